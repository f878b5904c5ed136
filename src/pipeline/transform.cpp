#include "pipeline/transform.hpp"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "common/crypto.hpp"

namespace sluice::pipeline {
namespace {

std::string iso8601(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms % 1000));
  return buf;
}

const char* type_name(FieldType t) {
  switch (t) {
    case FieldType::string:
      return "string";
    case FieldType::integer:
      return "integer";
    case FieldType::number:
      return "number";
    case FieldType::boolean:
      return "boolean";
    case FieldType::json:
      return "json";
  }
  return "?";
}

std::string describe(simdjson::dom::element e) {
  std::string text = simdjson::minify(e);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Converts a JSON value to the field's type, or explains why it cannot.
std::optional<nlohmann::ordered_json> convert(simdjson::dom::element e, FieldType type,
                                              std::string& why) {
  using simdjson::dom::element_type;
  const element_type kind = e.type();
  switch (type) {
    case FieldType::string:
      if (kind == element_type::STRING) return std::string(e.get_string().value());
      if (kind == element_type::INT64 || kind == element_type::UINT64 ||
          kind == element_type::DOUBLE || kind == element_type::BOOL)
        return simdjson::minify(e);  // numbers and booleans keep their JSON spelling
      break;
    case FieldType::integer:
      if (kind == element_type::INT64) return e.get_int64().value();
      if (kind == element_type::UINT64 &&
          e.get_uint64().value() <= static_cast<std::uint64_t>(INT64_MAX))
        return static_cast<std::int64_t>(e.get_uint64().value());
      if (kind == element_type::DOUBLE) {
        const double d = e.get_double().value();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
          return static_cast<std::int64_t>(d);
      }
      if (kind == element_type::STRING) {
        const std::string s(e.get_string().value());
        std::size_t used = 0;
        try {
          const long long v = std::stoll(s, &used);
          if (used == s.size()) return static_cast<std::int64_t>(v);
        } catch (...) {
        }
      }
      break;
    case FieldType::number:
      if (kind == element_type::INT64 || kind == element_type::UINT64 ||
          kind == element_type::DOUBLE)
        return e.get_double().value();
      if (kind == element_type::STRING) {
        const std::string s(e.get_string().value());
        std::size_t used = 0;
        try {
          const double v = std::stod(s, &used);
          if (used == s.size() && std::isfinite(v)) return v;
        } catch (...) {
        }
      }
      break;
    case FieldType::boolean:
      if (kind == element_type::BOOL) return e.get_bool().value();
      if (kind == element_type::STRING) {
        const std::string_view s = e.get_string().value();
        if (s == "true") return true;
        if (s == "false") return false;
      }
      break;
    case FieldType::json:
      // Through plain json: the document keeps the keys sorted, as it always has.
      return nlohmann::ordered_json(nlohmann::json::parse(simdjson::minify(e)));
  }
  why = std::string("expected ") + type_name(type) + ", got " + describe(e);
  return std::nullopt;
}

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

using CanonicalWriter = nlohmann::detail::serializer<nlohmann::ordered_json>;

// Appends `value` as nlohmann::json(value).dump() writes it (stored records carry
// hashes of that text) to the writer's string: scalars straight through the
// serializer, structured values (type json) through plain json, whose objects sort
// their keys.
void append_canonical(CanonicalWriter& writer, std::string& out,
                      const nlohmann::ordered_json& value) {
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

}  // namespace

const char* to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::malformed:
      return "malformed";
    case RejectReason::validation:
      return "validation";
    case RejectReason::schema_drift:
      return "schema_drift";
  }
  return "unknown";
}

const char* sns_envelope_key(MetaField field) {
  switch (field) {
    case MetaField::sns_message_id:
      return "MessageId";
    case MetaField::sns_topic_arn:
      return "TopicArn";
    case MetaField::sns_timestamp:
      return "Timestamp";
    case MetaField::sns_subject:
      return "Subject";
    case MetaField::sns_signature:
      return "Signature";
    case MetaField::sns_signature_version:
      return "SignatureVersion";
    case MetaField::sns_signing_cert_url:
      return "SigningCertURL";
    default:
      return nullptr;
  }
}

void validate(const TransformSpec& spec) {
  if (spec.fields.empty())
    throw std::invalid_argument("normalize.fields: expected at least one field");
  std::map<std::string, int> names;
  for (const auto& f : spec.fields) {
    if (f.name.empty())
      throw std::invalid_argument("normalize.fields[].name: expected a non-empty name");
    if (++names[f.name] > 1)
      throw std::invalid_argument("normalize.fields[].name = " + f.name +
                                  ": expected unique names");
    const int sources = (!f.pointer.empty()) + f.constant.has_value() + f.meta.has_value();
    if (sources != 1)
      throw std::invalid_argument("normalize.fields[" + f.name +
                                  "]: expected exactly one of from, const, meta");
    if (f.meta && sns_envelope_key(*f.meta) && !spec.unwrap_sns)
      throw std::invalid_argument("normalize.fields[" + f.name + "].meta: the SNS envelope's " +
                                  std::string(sns_envelope_key(*f.meta)) +
                                  " needs decode.sns_envelope: true");
    if (!f.pointer.empty() && f.pointer.front() != '/')
      throw std::invalid_argument("normalize.fields[" + f.name + "].from = " + f.pointer +
                                  ": expected a JSON pointer starting with '/'");
  }
  if (names.count(spec.hash_field))
    throw std::invalid_argument("normalize.fields[].name = " + spec.hash_field +
                                ": expected a name other than the hash field");
  if (spec.hash_versions.empty())
    throw std::invalid_argument("identity.versions: expected at least one hash version");
  for (const auto& [version, fields] : spec.hash_versions) {
    if (fields.empty())
      throw std::invalid_argument("identity.versions." + version + ": expected at least one field");
    for (const auto& name : fields)
      if (!names.count(name))
        throw std::invalid_argument("identity.versions." + version + " names field '" + name +
                                    "': expected one of normalize.fields");
  }
  if (!spec.hash_versions.count(spec.hash_version))
    throw std::invalid_argument("identity.version = " + spec.hash_version +
                                ": expected one of identity.versions");
  if (spec.max_body_bytes == 0 || spec.max_depth < 2)
    throw std::invalid_argument("decode limits: expected max_body_bytes > 0 and max_depth >= 2");
}

std::string content_hash(const std::string& version, const std::vector<nlohmann::json>& values) {
  // A JSON array is an unambiguous encoding: no separator can collide with a value.
  return hash_text(version, nlohmann::json(values).dump());
}

Transformer::Transformer(TransformSpec spec) : spec_(std::move(spec)) {
  validate(spec_);
  for (const auto& name : spec_.hash_versions.at(spec_.hash_version))
    for (std::size_t i = 0; i < spec_.fields.size(); ++i)
      if (spec_.fields[i].name == name) hash_indexes_.push_back(i);
}

std::variant<Record, Rejection> Transformer::transform(const MessageView& message) const {
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
  simdjson::dom::element envelope;  // the SNS notification around the body, when unwrapped
  if (spec_.unwrap_sns) {
    envelope = root;
    std::string_view type, inner;
    if (!root["Type"].get_string().get(type) && type == "Notification" &&
        !root["Message"].get_string().get(inner)) {
      if (auto error = inner_parser.parse(inner.data(), inner.size()).get(root))
        return Rejection{RejectReason::malformed,
                         "SNS Message is not valid JSON: " + json_error(error)};
    } else {
      return Rejection{RejectReason::malformed, "expected an SNS Notification envelope"};
    }
  }
  if (auto key = duplicate_key(root))
    return Rejection{RejectReason::malformed, "body has the key \"" + *key +
                                                  "\" twice in one object (which value is meant?)"};
  if (!root.is_object()) return Rejection{RejectReason::schema_drift, "body is not a JSON object"};

  Record record;
  record.message_id = std::string(message.message_id);
  // The document's object is a vector in field order: built in place, reserved once.
  record.document = nlohmann::ordered_json::object();
  auto& fields = record.document.get_ref<nlohmann::ordered_json::object_t&>();
  fields.reserve(spec_.fields.size() + 1);
  for (std::size_t i = 0; i < spec_.fields.size(); ++i) {
    const FieldSpec& f = spec_.fields[i];
    nlohmann::ordered_json value;
    if (f.constant) {
      value = *f.constant;
    } else if (f.meta) {
      switch (*f.meta) {
        case MetaField::message_id:
          value = record.message_id;
          break;
        case MetaField::sent_time:
          if (message.sent_time) value = iso8601(*message.sent_time);
          break;
        case MetaField::received_time:
          value = iso8601(message.received_time);
          break;
        case MetaField::receive_count:
          value = message.receive_count;
          break;
        case MetaField::source:
          value = std::string(message.source);
          break;
        case MetaField::group_id:
          if (message.group_id) value = std::string(*message.group_id);
          break;
        case MetaField::sequence_number:
          if (message.sequence_number) value = std::string(*message.sequence_number);
          break;
        default: {
          std::string_view text;
          if (!envelope[sns_envelope_key(*f.meta)].get_string().get(text))
            value = std::string(text);
          break;
        }
      }
    } else {
      simdjson::dom::element found;
      const auto error = root.at_pointer(f.pointer).get(found);
      if (error || found.is_null()) {
        if (f.required)
          return Rejection{RejectReason::validation,
                           "missing required field " + f.name + " at " + f.pointer};
        if (f.default_value) value = *f.default_value;
      } else {
        std::string why;
        auto converted = convert(found, f.type, why);
        if (!converted)
          return Rejection{RejectReason::schema_drift,
                           "field " + f.name + " at " + f.pointer + ": " + why};
        value = std::move(*converted);
      }
    }
    fields.emplace_back(f.name, std::move(value));  // names are unique (validate)
  }
  // The identity: the JSON array of the hash fields' values, in the version's order.
  thread_local std::string canonical;
  thread_local CanonicalWriter writer(nlohmann::detail::output_adapter<char>(canonical), ' ');
  canonical.assign(1, '[');
  for (std::size_t k = 0; k < hash_indexes_.size(); ++k) {
    if (k > 0) canonical += ',';
    append_canonical(writer, canonical,
                     (fields.begin() + static_cast<std::ptrdiff_t>(hash_indexes_[k]))->second);
  }
  canonical += ']';
  record.hash = hash_text(spec_.hash_version, canonical);
  fields.emplace_back(spec_.hash_field, record.hash);
  return record;
}

}  // namespace sluice::pipeline
