#include "pipeline/transform.hpp"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "common/crypto.hpp"

namespace sluice::pipeline {
namespace {

using Json = nlohmann::ordered_json;

// simdjson's words, made specific where they are vague.
std::string json_error(simdjson::error_code error) {
  if (error == simdjson::NUMBER_ERROR || error == simdjson::NUMBER_OUT_OF_RANGE)
    return "a number is malformed or out of range (an integer beyond 64 bits, or beyond double "
           "precision)";
  return simdjson::error_message(error);
}

// The first key that appears twice in one object, anywhere in the document: JSON
// parsers disagree on which value wins (RFC 8259 4, I-JSON forbids it), so such a
// body is malformed rather than silently read one way.
std::optional<std::string> duplicate_key(simdjson::dom::element e) {
  if (e.type() == simdjson::dom::element_type::ARRAY) {
    const simdjson::dom::array array = e.get_array().value();
    for (auto child : array)
      if (auto d = duplicate_key(child)) return d;
    return std::nullopt;
  }
  if (e.type() != simdjson::dom::element_type::OBJECT) return std::nullopt;
  const simdjson::dom::object object = e.get_object().value();
  // Most objects are small: their keys sorted on the stack, not the heap.
  std::array<std::string_view, 32> small;
  std::vector<std::string_view> large;
  std::string_view* keys = small.data();
  if (object.size() > small.size()) {
    large.resize(object.size());
    keys = large.data();
  }
  std::size_t count = 0;
  for (auto field : object) {
    keys[count++] = field.key;
    if (auto d = duplicate_key(field.value)) return d;
  }
  std::sort(keys, keys + count);
  if (auto it = std::adjacent_find(keys, keys + count); it != keys + count) return std::string(*it);
  return std::nullopt;
}

using CanonicalWriter = nlohmann::detail::serializer<Json>;

// Appends `value` as nlohmann::json(value).dump() writes it (stored records carry
// hashes of that text) to the writer's string: scalars straight through the
// serializer, structured values (type json) through plain json, whose objects sort
// their keys.
void append_canonical(CanonicalWriter& writer, std::string& out, const Json& value) {
  if (value.is_structured())
    out += nlohmann::json(value).dump();
  else
    writer.dump(value, false, false, 0);
}

// version + ":" + hex(SHA-256(canonical)).
std::string hash_text(const std::string& version, std::string_view canonical) {
  const auto digest = crypto::sha256(canonical);
  std::string hash;
  hash.reserve(version.size() + 1 + 2 * digest.size());
  hash += version;
  hash += ':';
  crypto::append_hex(hash, digest.data(), digest.size());
  return hash;
}

// The discriminator's value as the case keys write it: a string as it is, a number as
// its canonical decimal (2, 2.0 and 20e-1 are "2"), a boolean as true or false.
std::optional<std::string> case_text(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  std::string why;
  switch (e.type()) {
    case element_type::STRING:
      return std::string(e.get_string().value());
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE:
      return canonical_decimal(simdjson::minify(e), std::nullopt, why);
    case element_type::BOOL:
      return simdjson::minify(e);
    default:
      return std::nullopt;
  }
}

}  // namespace

struct Transformer::Version {
  Projection projection;
  std::vector<std::size_t> hash_indexes;  // positions of the hash fields in its values
  std::size_t route_index = 0;            // position of route_field, when routed
  bool route_numeric = false;             // ... of a numeric type: matched by its value
};

std::vector<std::string> routed_tables(const TransformSpec& spec) {
  std::vector<std::string> tables;
  for (const auto& [value, table] : spec.route_tables)
    if (std::find(tables.begin(), tables.end(), table) == tables.end()) tables.push_back(table);
  return tables;
}

std::vector<std::pair<std::string, std::vector<FieldSpec>>> field_lists(const TransformSpec& spec) {
  std::vector<std::pair<std::string, std::vector<FieldSpec>>> lists;
  if (!spec.versions) {
    lists.emplace_back("normalize.fields", spec.fields);
    return lists;
  }
  for (const auto& [value, fields] : spec.versions->cases) {
    std::vector<FieldSpec> all = spec.fields;
    all.insert(all.end(), fields.begin(), fields.end());
    lists.emplace_back("normalize.when.cases." + value, std::move(all));
  }
  return lists;
}

const FieldSpec& field_in_every_version(const TransformSpec& spec, const std::string& key,
                                        const std::string& name) {
  const FieldSpec* first = nullptr;
  auto find = [&](const std::vector<FieldSpec>& fields, const std::string& where) {
    const auto it =
        std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.name == name; });
    if (it == fields.end())
      throw std::invalid_argument(key + ": '" + name + "' is not one of " + where);
    return &*it;
  };
  if (!spec.versions) return *find(spec.fields, "normalize.fields");
  for (const auto& [value, fields] : spec.versions->cases) {
    // A common field is the spec's own; a version's own field, that version's.
    const FieldSpec* here = nullptr;
    try {
      here = find(spec.fields, "normalize.fields");
    } catch (const std::invalid_argument&) {
      here = find(fields, "normalize.when.cases." + value);
    }
    if (first && first->type != here->type)
      throw std::invalid_argument(key + ": '" + name + "' has type " + to_string(first->type) +
                                  " in one version and " + to_string(here->type) +
                                  " in normalize.when.cases." + value);
    if (!first) first = here;
  }
  return *first;
}

void validate(const TransformSpec& spec) {
  Transformer check{spec};
}

std::string content_hash(const std::string& version, const std::vector<nlohmann::json>& values) {
  // A JSON array is an unambiguous encoding: no separator can collide with a value.
  return hash_text(version, nlohmann::json(values).dump());
}

Transformer::Transformer(TransformSpec spec) : spec_(std::move(spec)) {
  if (spec_.max_body_bytes == 0 || spec_.max_depth < 2)
    throw std::invalid_argument("decode limits: expected max_body_bytes > 0 and max_depth >= 2");
  if (!spec_.versions && spec_.fields.empty())
    throw std::invalid_argument("normalize.fields: expected at least one field");
  if (spec_.hash_versions.empty())
    throw std::invalid_argument("identity.versions: expected at least one hash version");
  if (!spec_.hash_versions.count(spec_.hash_version))
    throw std::invalid_argument("identity.version = " + spec_.hash_version +
                                ": expected one of identity.versions");
  if (spec_.key == TransformSpec::Key::header && spec_.key_header.empty())
    throw std::invalid_argument("identity.key: expected the " + spec_.key_header_key + "'s name");
  if (!spec_.filter.empty()) filter_ = Filter(spec_.filter, spec_.filter_headers);
  if (spec_.route_field.empty() != spec_.route_tables.empty())
    throw std::invalid_argument(spec_.route_field.empty()
                                    ? "route.field: expected the field whose value picks the table"
                                    : "route.tables: expected at least one value: table");
  const auto tables = routed_tables(spec_);
  if (tables.size() >= 0xffff) throw std::invalid_argument("route.tables: too many tables");
  if (!spec_.route_field.empty() && spec_.key != TransformSpec::Key::content)
    throw std::invalid_argument(
        "route.field = " + spec_.route_field +
        ": needs identity.key: content (the unique index is per table, and a producer's key "
        "could name one record with two values of the field: stored once in each table)");
  for (const auto& [value, table] : spec_.route_tables) {
    const auto route = static_cast<std::uint16_t>(std::find(tables.begin(), tables.end(), table) -
                                                  tables.begin() + 1);
    if (!route_of_.emplace(value, route).second)
      throw std::invalid_argument("route.tables." + value + ": given twice");
    known_routes_ += (known_routes_.empty() ? "" : ", ") + value;
  }
  // A numeric field's value is found by its number in any spelling (7, 7.0, 7.00); two
  // keys that are one number must name one table.
  std::string why;
  for (const auto& [value, table] : spec_.route_tables)
    if (auto number = canonical_decimal(value, std::nullopt, why)) {
      const auto route = route_of_.at(value);
      const auto [it, added] = route_of_number_.emplace(*number, route);
      if (!added && it->second != route)
        throw std::invalid_argument("route.tables." + value + ": the number " + *number +
                                    " is given twice, for two tables");
    }
  if (spec_.versions) {
    const auto& when = *spec_.versions;
    if (when.from.empty())
      throw std::invalid_argument("normalize.when.from: expected the discriminator's JSON pointer");
    if (when.cases.empty())
      throw std::invalid_argument("normalize.when.cases: expected at least one version");
    for (const auto& pointer : when.from) {
      try {
        discriminator_.push_back(pointer_tokens(pointer));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("normalize.when.from = " + pointer + ": " + e.what());
      }
      discriminator_text_ += (discriminator_text_.empty() ? "" : " or ") + pointer;
    }
    for (std::size_t i = 0; i < when.cases.size(); ++i) {
      if (!version_of_.emplace(when.cases[i].first, i).second)
        throw std::invalid_argument("normalize.when.cases." + when.cases[i].first +
                                    ": given twice");
      known_cases_ += (known_cases_.empty() ? "" : ", ") + when.cases[i].first;
    }
    // A key that is a number is found by a numeric discriminator in any spelling.
    std::string why;
    for (std::size_t i = 0; i < when.cases.size(); ++i)
      if (auto number = canonical_decimal(when.cases[i].first, std::nullopt, why))
        version_of_.emplace(*number, i);
    if (when.absent) {
      const auto it = version_of_.find(*when.absent);
      if (it == version_of_.end())
        throw std::invalid_argument("normalize.when.absent = " + *when.absent +
                                    ": expected one of normalize.when.cases (" + known_cases_ +
                                    ")");
      absent_version_ = it->second;
    }
  }
  // The fields every version has, checked alone first: their problems are theirs.
  if (spec_.versions && !spec_.fields.empty())
    Projection common(spec_.fields, spec_.unwrap_sns, "normalize.fields");
  for (auto& [where, fields] : field_lists(spec_)) {
    Version version{Projection(std::move(fields), spec_.unwrap_sns, where), {}};
    const auto& projection = version.projection;
    for (const auto& field : projection.fields()) {
      const std::string top = field.name.substr(0, field.name.find('.'));
      if (top == spec_.hash_field)
        throw std::invalid_argument(where + "[].name = " + field.name +
                                    ": expected a name other than the hash field");
    }
    for (const auto& [hash_version, names] : spec_.hash_versions) {
      if (names.empty())
        throw std::invalid_argument("identity.versions." + hash_version +
                                    ": expected at least one field");
      for (const auto& name : names) {
        const auto index = projection.index_of(name);
        if (!index)
          throw std::invalid_argument(
              "identity.versions." + hash_version + " names field '" + name + "'" +
              (spec_.versions ? ", which " + where + " (with normalize.fields) does not have"
                              : ": expected one of normalize.fields"));
        if (hash_version == spec_.hash_version) version.hash_indexes.push_back(*index);
      }
    }
    if (!spec_.route_field.empty()) {
      const auto index = projection.index_of(spec_.route_field);
      if (!index)
        throw std::invalid_argument("route.field = " + spec_.route_field +
                                    ": expected a field of " + where);
      // The unique index is per table: a record's identity must fix its table, or one
      // record could be stored once in each.
      const auto& identity = spec_.hash_versions.at(spec_.hash_version);
      if (std::find(identity.begin(), identity.end(), spec_.route_field) == identity.end())
        throw std::invalid_argument("route.field = " + spec_.route_field +
                                    ": expected one of identity.versions." + spec_.hash_version +
                                    " (the unique index is per table: a field outside the "
                                    "identity could store one record in two tables)");
      version.route_index = *index;
      const auto type = projection.fields()[*index].type;
      version.route_numeric =
          type == FieldType::integer || type == FieldType::number || type == FieldType::decimal;
      if (version.route_numeric)
        for (const auto& [value, table] : spec_.route_tables)
          if (!route_of_number_.count(canonical_decimal(value, std::nullopt, why).value_or("")))
            throw std::invalid_argument("route.tables." + value + ": route.field " +
                                        spec_.route_field + " is a number (" + to_string(type) +
                                        " in " + where + "): this key can never match");
    }
    // One business value hashes one way: an identity field has one type everywhere.
    if (!versions_.empty())
      for (std::size_t k = 0; k < version.hash_indexes.size(); ++k) {
        const auto& here = projection.fields()[version.hash_indexes[k]];
        const auto& first =
            versions_.front().projection.fields()[versions_.front().hash_indexes[k]];
        if (here.type != first.type)
          throw std::invalid_argument("identity field '" + here.name + "' has type " +
                                      to_string(first.type) + " in one version and " +
                                      to_string(here.type) + " in " + where);
      }
    versions_.push_back(std::move(version));
  }
}

Transformer::~Transformer() = default;

Outcome Transformer::transform(const MessageView& message) const {
  if (message.body.size() > spec_.max_body_bytes)
    return Rejection{RejectReason::malformed, "body of " + std::to_string(message.body.size()) +
                                                  " bytes exceeds max_body_bytes " +
                                                  std::to_string(spec_.max_body_bytes)};
  thread_local simdjson::dom::parser parser;
  thread_local simdjson::dom::parser inner_parser;
  thread_local std::size_t allocated_depth = 0;
  if (allocated_depth != spec_.max_depth) {
    if (parser.allocate(spec_.max_body_bytes, spec_.max_depth) ||
        inner_parser.allocate(spec_.max_body_bytes, spec_.max_depth))
      throw std::runtime_error("cannot allocate the JSON parser");
    allocated_depth = spec_.max_depth;
  }
  if (message.body.starts_with("\xEF\xBB\xBF"))
    return Rejection{RejectReason::malformed,
                     "body starts with a UTF-8 byte-order mark (JSON text must not, RFC 8259 8.1)"};
  simdjson::dom::element root;
  if (auto error = parser.parse(message.body.data(), message.body.size()).get(root))
    return Rejection{RejectReason::malformed, "body is not valid JSON: " + json_error(error)};
  std::string_view body_text = message.body;
  simdjson::dom::element envelope;  // the SNS notification around the body, when unwrapped
  if (spec_.unwrap_sns) {
    envelope = root;
    std::string_view type, inner;
    if (!root["Type"].get_string().get(type) && type == "Notification" &&
        !root["Message"].get_string().get(inner)) {
      if (auto error = inner_parser.parse(inner.data(), inner.size()).get(root))
        return Rejection{RejectReason::malformed,
                         "SNS Message is not valid JSON: " + json_error(error)};
      body_text = inner;
    } else {
      return Rejection{RejectReason::malformed, "expected an SNS Notification envelope"};
    }
  }
  if (auto key = duplicate_key(root))
    return Rejection{RejectReason::malformed, "body has the key \"" + *key +
                                                  "\" twice in one object (which value is meant?)"};
  if (!root.is_object()) return Rejection{RejectReason::schema_drift, "body is not a JSON object"};
  if (!filter_.empty() && !filter_.matches(root, message)) return Filtered{};

  // The payload's version, when the field lists depend on it.
  const Version* version = &versions_.front();
  if (spec_.versions) {
    simdjson::dom::element found;
    bool present = false;
    for (const auto& tokens : discriminator_)
      if ((present = at_pointer(root, tokens, found) && !found.is_null())) break;
    if (!present) {
      if (!absent_version_)
        return Rejection{RejectReason::schema_drift, "the version at " + discriminator_text_ +
                                                         " is absent: expected one of " +
                                                         known_cases_};
      version = &versions_[*absent_version_];
    } else {
      const auto text = case_text(found);
      const auto it = text ? version_of_.find(*text) : version_of_.end();
      if (it == version_of_.end()) {
        return Rejection{RejectReason::schema_drift, "the version at " + discriminator_text_ +
                                                         " is " +
                                                         truncated(simdjson::minify(found)) +
                                                         ": expected one of " + known_cases_};
      }
      version = &versions_[it->second];
    }
  }

  thread_local std::vector<Json> values;
  if (auto rejection = version->projection.project(root, envelope, body_text, message, values))
    return std::move(*rejection);

  // The identity: the JSON array of the hash fields' values, in the version's order,
  // or of the producer's key.
  thread_local std::string canonical;
  thread_local CanonicalWriter writer(nlohmann::detail::output_adapter<char>(canonical), ' ');
  if (spec_.key == TransformSpec::Key::content) {
    canonical.assign(1, '[');
    for (std::size_t k = 0; k < version->hash_indexes.size(); ++k) {
      if (k > 0) canonical += ',';
      append_canonical(writer, canonical, values[version->hash_indexes[k]]);
    }
    canonical += ']';
  } else {
    std::optional<std::string_view> key;
    if (spec_.key == TransformSpec::Key::deduplication_id)
      key = message.deduplication_id;
    else if (message.header)
      key = message.header(message.header_context, spec_.key_header);
    if (!key || key->empty())
      return Rejection{RejectReason::validation,
                       spec_.key == TransformSpec::Key::deduplication_id
                           ? std::string("identity.key: the message has no deduplication id (a "
                                         "FIFO queue's MessageDeduplicationId)")
                           : "identity.key: the " + spec_.key_header_key + " " + spec_.key_header +
                                 " is " + (key ? "empty" : "absent")};
    // {"attribute:producer-id":"p-1"}: an object, where a content identity is an
    // array, so that a key can never hash like some content.
    canonical.assign(1, '{');
    append_canonical(writer, canonical,
                     Json(spec_.key == TransformSpec::Key::deduplication_id
                              ? std::string("deduplication_id")
                              : spec_.key_header_key + ":" + spec_.key_header));
    canonical += ':';
    append_canonical(writer, canonical, Json(std::string(*key)));
    canonical += '}';
  }
  Record record;
  if (!route_of_.empty()) {
    // The normalized value: text as it is, a number by its value (canonical decimal).
    const auto& value = values[version->route_index];
    std::optional<std::string> text;
    std::string why;
    if (value.is_string())
      text = version->route_numeric
                 ? canonical_decimal(value.get_ref<const std::string&>(), std::nullopt, why)
                 : value.get<std::string>();
    else if (value.is_number())
      text = canonical_decimal(value.dump(), std::nullopt, why);
    else if (value.is_boolean())
      text = value.dump();
    const auto& table_of = version->route_numeric ? route_of_number_ : route_of_;
    const auto it = text ? table_of.find(*text) : table_of.end();
    if (it != table_of.end())
      record.route = it->second;
    else if (spec_.route_unknown_rejected)
      return Rejection{RejectReason::validation,
                       "route: " + spec_.route_field + " is " +
                           (value.is_null() ? std::string("absent") : truncated(value.dump())) +
                           ", which route.tables does not name (" + known_routes_ + ")"};
  }
  record.message_id = std::string(message.message_id);
  record.hash = hash_text(spec_.hash_version, canonical);
  version->projection.build_document(values, record.document);
  record.document.get_ref<Json::object_t&>().emplace_back(spec_.hash_field, record.hash);
  return record;
}

}  // namespace sluice::pipeline
