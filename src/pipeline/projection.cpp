#include "pipeline/projection.hpp"

#include <re2/re2.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_set>

namespace sluice::pipeline {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using Json = nlohmann::ordered_json;

struct Failure {
  RejectReason reason = RejectReason::schema_drift;
  std::string why;
};

std::string describe(element e) {
  return truncated(simdjson::minify(e));
}
// As JSON text; bytes that are not UTF-8 (a header, a configuration) become U+FFFD.
std::string describe_text(std::string_view text) {
  return truncated(Json(text).dump(-1, ' ', false, Json::error_handler_t::replace));
}

bool is_number(element_type kind) {
  return kind == element_type::INT64 || kind == element_type::UINT64 ||
         kind == element_type::DOUBLE;
}

// An epoch count written as text ("1700000000", "-5", "1700000000.25"): nullopt for
// anything else, which is then read as a date.
std::optional<std::int64_t> text_epoch(std::string_view text, EpochUnit unit, bool& is_epoch,
                                       std::string& why) {
  // Digits, optionally a point with digits on both sides: "1." and ".5" are not counts.
  std::size_t i = text.starts_with('-') ? 1 : 0;
  std::size_t whole = 0, fraction = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    if (text[i] >= '0' && text[i] <= '9')
      ++(point ? fraction : whole);
    else if (text[i] == '.' && !point)
      point = true;
    else
      return is_epoch = false, std::nullopt;
  }
  if (whole == 0 || (point && fraction == 0)) return is_epoch = false, std::nullopt;
  is_epoch = true;
  if (whole > 20) {  // beyond any unit's range, and beyond what stod reads
    why = "outside the years 0001-9999";
    return std::nullopt;
  }
  if (!point && text.size() <= 18)
    return epoch_micros(static_cast<std::int64_t>(std::stoll(std::string(text))), unit, why);
  return epoch_micros(std::strtod(std::string(text).c_str(), nullptr), unit, why);
}

// A value as canonical decimal text, for min and max: a double by its shortest
// round-trip spelling (0.1 is "0.1", as written, not 0.1000000000000000055...).
std::optional<std::string> decimal_text_of(const Json& value) {
  std::string why;
  if (value.is_number_integer() || value.is_number_float())
    return canonical_decimal(value.dump(), std::nullopt, why);
  if (value.is_string())
    return canonical_decimal(value.get_ref<const std::string&>(), std::nullopt, why);
  return std::nullopt;
}

std::string iso8601_ms(std::chrono::system_clock::time_point t) {
  return format_rfc3339(
      floor_to(std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count(),
               TimePrecision::milliseconds),
      TimePrecision::milliseconds);
}

// The exact text of the number at `pointer` (a decimal written as a JSON number with a
// fraction, which the DOM holds only as a double): read again, on demand.
std::optional<std::string> raw_number(std::string_view body, const std::string& pointer) {
  thread_local simdjson::ondemand::parser parser;
  const simdjson::padded_string padded(body);
  simdjson::ondemand::document doc;
  if (parser.iterate(padded).get(doc)) return std::nullopt;
  simdjson::ondemand::value value;
  if (doc.at_pointer(pointer).get(value)) return std::nullopt;
  std::string_view token = value.raw_json_token();
  while (!token.empty() && (token.back() == ' ' || token.back() == '\n' || token.back() == '\r' ||
                            token.back() == '\t'))
    token.remove_suffix(1);
  return std::string(token);
}

bool type_takes_text(FieldType t) {
  return t == FieldType::string || t == FieldType::enumeration;
}
bool type_is_numeric(FieldType t) {
  return t == FieldType::integer || t == FieldType::number || t == FieldType::decimal;
}

}  // namespace

// --- one compiled field

struct FieldProgram {
  const FieldSpec* spec = nullptr;
  std::string label;  // "field amount at /amount": the start of its rejections' reasons
  std::vector<std::vector<std::string>> pointers;
  std::optional<Json> fallback;  // the default, converted
  std::optional<Json> constant;  // the const, converted
  std::unordered_set<std::string> allowed;
  std::string allowed_text;  // "a, b, c" for reasons
  std::unique_ptr<re2::RE2> pattern;
  std::optional<std::string> min, max;  // canonical decimals

  std::optional<Json> timestamp_value(std::int64_t micros) const {
    const auto& t = spec->timestamp;
    micros = floor_to(micros, t.precision);
    if (t.output == TimeOutput::epoch_ms) return Json(micros / 1000 - (micros % 1000 < 0));
    return Json(format_rfc3339(micros, t.precision));
  }

  // A value written as text (a JSON string, a header, a default) in the field's type.
  std::optional<Json> from_text(std::string_view text, Failure& failure) const {
    const FieldType type = spec->type;
    std::string why;
    switch (type) {
      case FieldType::string:
      case FieldType::enumeration: {
        std::optional<std::string> value;
        if (spec->text.any()) {
          value = canonical_text(text, spec->text);
          if (!value) why = "not valid UTF-8";
        } else {
          value = std::string(text);
        }
        if (value) return Json(std::move(*value));
        break;
      }
      case FieldType::integer: {
        const std::string s(text);
        std::size_t used = 0;
        try {
          const long long v = std::stoll(s, &used);
          if (used == s.size() && !s.empty()) return Json(static_cast<std::int64_t>(v));
        } catch (...) {
        }
        break;
      }
      case FieldType::number: {
        const std::string s(text);
        std::size_t used = 0;
        try {
          const double v = std::stod(s, &used);
          if (used == s.size() && std::isfinite(v)) return Json(v);
        } catch (...) {
        }
        break;
      }
      case FieldType::boolean:
        if (text == "true") return Json(true);
        if (text == "false") return Json(false);
        break;
      case FieldType::json:
        return Json(std::string(text));
      case FieldType::timestamp: {
        std::optional<std::int64_t> micros;
        if (!spec->timestamp.format.empty()) {
          micros = parse_with_format(text, spec->timestamp.format, why);
        } else {
          bool is_epoch = false;
          micros = text_epoch(text, spec->timestamp.unit, is_epoch, why);
          if (!is_epoch) micros = parse_iso8601(text, why);
        }
        if (micros) return timestamp_value(*micros);
        break;
      }
      case FieldType::decimal:
        if (auto value = canonical_decimal(text, spec->scale, why)) return Json(std::move(*value));
        break;
      case FieldType::uuid:
        if (auto value = canonical_uuid(text)) return Json(std::move(*value));
        break;
    }
    failure = {RejectReason::schema_drift, "expected " + std::string(to_string(type)) + ", got " +
                                               describe_text(text) +
                                               (why.empty() ? "" : " (" + why + ")")};
    return std::nullopt;
  }

  // A value found in the body, in the field's type.
  std::optional<Json> from_element(element e, std::string_view body, std::size_t pointer_at,
                                   Failure& failure) const {
    const element_type kind = e.type();
    const FieldType type = spec->type;
    if (kind == element_type::STRING) return from_text(e.get_string().value(), failure);
    std::string why;
    switch (type) {
      case FieldType::string:
      case FieldType::enumeration:
        // Numbers and booleans keep their JSON spelling.
        if (is_number(kind) || kind == element_type::BOOL)
          return from_text(simdjson::minify(e), failure);
        break;
      case FieldType::integer:
        if (kind == element_type::INT64) return Json(e.get_int64().value());
        if (kind == element_type::UINT64 &&
            e.get_uint64().value() <= static_cast<std::uint64_t>(INT64_MAX))
          return Json(static_cast<std::int64_t>(e.get_uint64().value()));
        if (kind == element_type::DOUBLE) {
          const double d = e.get_double().value();
          if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
            return Json(static_cast<std::int64_t>(d));
        }
        break;
      case FieldType::number:
        if (is_number(kind)) return Json(e.get_double().value());
        break;
      case FieldType::boolean:
        if (kind == element_type::BOOL) return Json(e.get_bool().value());
        break;
      case FieldType::json:
        // Through plain json: the document keeps the keys sorted, as it always has.
        return Json(nlohmann::json::parse(simdjson::minify(e)));
      case FieldType::timestamp: {
        std::optional<std::int64_t> micros;
        if (kind == element_type::INT64)
          micros = epoch_micros(e.get_int64().value(), spec->timestamp.unit, why);
        else if (kind == element_type::UINT64 || kind == element_type::DOUBLE)
          micros = epoch_micros(e.get_double().value(), spec->timestamp.unit, why);
        if (micros) return timestamp_value(*micros);
        break;
      }
      case FieldType::decimal: {
        std::optional<std::string> text;
        if (kind == element_type::INT64 || kind == element_type::UINT64)
          text = simdjson::minify(e);
        else if (kind == element_type::DOUBLE)
          // 1.10 stays exact; where the text cannot be found again (a key written with
          // escapes), the double's shortest spelling, exact to 15 digits.
          text = raw_number(body, spec->from[pointer_at]).value_or(simdjson::minify(e));
        if (text) {
          if (auto value = canonical_decimal(*text, spec->scale, why))
            return Json(std::move(*value));
        }
        break;
      }
      case FieldType::uuid:
        break;
    }
    failure = {RejectReason::schema_drift, "expected " + std::string(to_string(type)) + ", got " +
                                               describe(e) + (why.empty() ? "" : " (" + why + ")")};
    return std::nullopt;
  }

  // The checks: a value that converted but is not allowed.
  std::optional<std::string> check(const Json& value) const {
    if (value.is_null()) return std::nullopt;
    if (!allowed.empty() && !allowed.count(value.get_ref<const std::string&>()))
      return "got " + describe_text(value.get_ref<const std::string&>()) + ", expected one of " +
             allowed_text;
    if (min || max) {
      const auto text = decimal_text_of(value);
      if (!text) return "got " + truncated(value.dump()) + ", expected a number within min and max";
      const std::string& number = *text;
      if (min && compare_decimals(number, *min) < 0)
        return "got " + truncated(number) + ", below min " + *min;
      if (max && compare_decimals(number, *max) > 0)
        return "got " + truncated(number) + ", above max " + *max;
    }
    if (value.is_string()) {
      const auto& text = value.get_ref<const std::string&>();
      if (spec->min_length || spec->max_length) {
        const std::size_t length = code_points(text);
        if (spec->min_length && length < *spec->min_length)
          return "got " + describe_text(text) + " of " + std::to_string(length) +
                 " characters, below min_length " + std::to_string(*spec->min_length);
        if (spec->max_length && length > *spec->max_length)
          return "got " + describe_text(text) + " of " + std::to_string(length) +
                 " characters, above max_length " + std::to_string(*spec->max_length);
      }
      if (pattern && !re2::RE2::FullMatch(text, *pattern))
        return "got " + describe_text(text) + ", expected a match of the pattern " +
               spec->pattern.value();
    }
    return std::nullopt;
  }

  // A default or const from the configuration, as a message's value would be.
  Json configured(const nlohmann::json& written, const std::string& key) const {
    const bool converts = spec->type == FieldType::timestamp || spec->type == FieldType::decimal ||
                          spec->type == FieldType::uuid || spec->type == FieldType::enumeration ||
                          spec->text.any();
    // The first five types keep a configured value as written (as they always have:
    // stored hashes depend on it); the others, and text transforms, convert it.
    Json value = Json(written);
    if (converts && !written.is_null()) {
      const std::string text = written.is_string() ? written.get<std::string>() : written.dump();
      Failure failure;
      auto converted = from_text(text, failure);
      if (!converted) throw std::invalid_argument(key + " = " + text + ": " + failure.why);
      value = std::move(*converted);
    }
    if (auto problem = check(value)) throw std::invalid_argument(key + ": " + *problem);
    return value;
  }
};

struct Projection::Compiled {
  std::vector<FieldSpec> fields;
  std::vector<FieldProgram> programs;
  std::map<std::string, std::size_t, std::less<>> index;
  bool nested = false;
};

Projection::Projection(std::vector<FieldSpec> fields, bool unwrap_sns, const std::string& where)
    : compiled_(std::make_unique<Compiled>()) {
  auto& c = *compiled_;
  c.fields = std::move(fields);
  if (c.fields.empty()) throw std::invalid_argument(where + ": expected at least one field");
  std::set<std::string> names;
  for (const auto& f : c.fields) {
    const std::string at = where + "[" + f.name + "]";
    auto bad = [&](const std::string& what) { throw std::invalid_argument(at + what); };
    if (f.name.empty()) throw std::invalid_argument(where + "[].name: expected a non-empty name");
    if (f.name.front() == '.' || f.name.back() == '.' || f.name.find("..") != std::string::npos)
      bad(".name: expected names joined by single dots (customer.id)");
    if (!names.insert(f.name).second)
      throw std::invalid_argument(where + "[].name = " + f.name + ": expected unique names");
    const int sources =
        !f.from.empty() + f.constant.has_value() + f.meta.has_value() + f.header.has_value();
    if (sources != 1) bad(": expected exactly one of from, const, meta, attribute, header");
    if (f.meta && sns_envelope_key(*f.meta) && !unwrap_sns)
      bad(".meta: the SNS envelope's " + std::string(sns_envelope_key(*f.meta)) +
          " needs decode.sns_envelope: true");
    if (f.header && f.header->empty()) bad("." + f.header_key + ": expected a name");
    if (f.meta) {
      // A message property is what the source says: converted only where it has a type.
      const bool time = *f.meta == MetaField::sent_time || *f.meta == MetaField::received_time ||
                        *f.meta == MetaField::sns_timestamp;
      if (f.type == FieldType::timestamp && !time)
        bad(".type: timestamp applies to meta sent_time, received_time and sns_timestamp");
      if (f.type == FieldType::decimal || f.type == FieldType::uuid ||
          f.type == FieldType::enumeration)
        bad(".type: " + std::string(to_string(f.type)) + " applies to from, attribute and header");
      if (f.text.any() || f.min || f.max || f.min_length || f.max_length || f.pattern ||
          !f.values.empty() || f.scale)
        bad(": text transforms and checks apply to from, attribute and header, not meta");
    }
    const bool text_type = type_takes_text(f.type);
    if (f.text.any() && !text_type)
      bad(".text: applies to types string and enum, not " + std::string(to_string(f.type)));
    if ((f.min_length || f.max_length) && !text_type)
      bad(".min_length/max_length: apply to types string and enum, not " +
          std::string(to_string(f.type)));
    if (f.pattern && !text_type && f.type != FieldType::uuid)
      bad(".pattern: applies to types string, enum and uuid, not " +
          std::string(to_string(f.type)));
    if ((f.min || f.max) && !type_is_numeric(f.type))
      bad(".min/max: apply to types integer, number and decimal, not " +
          std::string(to_string(f.type)));
    if (f.scale && f.type != FieldType::decimal) bad(".scale: applies to type decimal only");
    for (const auto& v : f.values)
      if (!simdjson::validate_utf8(v.data(), v.size()))
        bad(".values: " + describe_text(v) + " is not valid UTF-8");
    if (!f.values.empty() && f.type != FieldType::enumeration)
      bad(".values: applies to type enum only");
    if (f.type == FieldType::enumeration && f.values.empty())
      bad(".values: expected the allowed values of the enum");
    if (f.type != FieldType::timestamp &&
        (f.timestamp.unit != EpochUnit::auto_detect ||
         f.timestamp.precision != TimePrecision::milliseconds ||
         f.timestamp.output != TimeOutput::rfc3339 || !f.timestamp.format.empty()))
      bad(".unit/precision/output/format: apply to type timestamp only");
    if (f.min_length && f.max_length && *f.min_length > *f.max_length)
      bad(": expected min_length <= max_length");
  }
  for (const auto& name : names)  // "customer" beside "customer.id": which is it?
    for (auto dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
      c.nested = true;
      if (names.count(name.substr(0, dot)))
        throw std::invalid_argument(where + "[].name = " + name + ": " + name.substr(0, dot) +
                                    " is also a field, and cannot also hold " + name);
    }
  c.programs.resize(c.fields.size());
  for (std::size_t i = 0; i < c.fields.size(); ++i) {
    const FieldSpec& f = c.fields[i];
    FieldProgram& p = c.programs[i];
    const std::string at = where + "[" + f.name + "]";
    p.spec = &f;
    c.index.emplace(f.name, i);
    for (const auto& pointer : f.from) {
      try {
        p.pointers.push_back(pointer_tokens(pointer));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(at + ".from = " + pointer + ": " + e.what());
      }
      p.label += (p.label.empty() ? "" : " or ") + pointer;
    }
    if (f.header) p.label = f.header_key + " " + *f.header;
    p.label = "field " + f.name + (p.label.empty() ? "" : (f.header ? " from " : " at ") + p.label);
    if (f.pattern) {
      re2::RE2::Options options;
      options.set_log_errors(false);
      p.pattern = std::make_unique<re2::RE2>(*f.pattern, options);
      if (!p.pattern->ok())
        throw std::invalid_argument(at + ".pattern = " + *f.pattern +
                                    ": does not compile: " + p.pattern->error());
    }
    std::string why;
    auto bound = [&](const std::optional<std::string>& written, const char* key) {
      if (!written) return std::optional<std::string>();
      auto value = canonical_decimal(*written, std::nullopt, why);
      if (!value) throw std::invalid_argument(at + "." + key + " = " + *written + ": " + why);
      return value;
    };
    p.min = bound(f.min, "min");
    p.max = bound(f.max, "max");
    if (p.min && p.max && compare_decimals(*p.min, *p.max) > 0)
      throw std::invalid_argument(at + ": expected min <= max");
    for (const auto& v : f.values) {
      auto value = f.text.any() ? canonical_text(v, f.text) : std::optional<std::string>(v);
      if (!value || !p.allowed.insert(*value).second)
        throw std::invalid_argument(at + ".values: " + describe_text(v) +
                                    " appears twice (after the text transforms)");
      p.allowed_text += (p.allowed_text.empty() ? "" : ", ") + *value;
    }
    if (f.default_value) p.fallback = p.configured(*f.default_value, at + ".default");
    if (f.constant) p.constant = p.configured(*f.constant, at + ".const");
  }
}

Projection::~Projection() = default;
Projection::Projection(Projection&&) noexcept = default;
Projection& Projection::operator=(Projection&&) noexcept = default;

const std::vector<FieldSpec>& Projection::fields() const {
  return compiled_->fields;
}
bool Projection::nested() const {
  return compiled_->nested;
}

std::optional<std::size_t> Projection::index_of(std::string_view name) const {
  const auto it = compiled_->index.find(name);
  if (it == compiled_->index.end()) return std::nullopt;
  return it->second;
}

std::optional<Rejection> Projection::project(const element& root, const element& envelope,
                                             std::string_view body_text,
                                             const MessageProperties& message,
                                             std::vector<Json>& values) const {
  const auto& programs = compiled_->programs;
  values.resize(programs.size());
  for (std::size_t i = 0; i < programs.size(); ++i) {
    const FieldProgram& p = programs[i];
    const FieldSpec& f = *p.spec;
    Json& value = values[i];
    value = nullptr;
    Failure failure;
    std::optional<Json> converted;
    bool present = true;
    if (p.constant) {
      value = *p.constant;
      continue;
    }
    if (f.meta) {
      std::optional<std::chrono::system_clock::time_point> time;
      switch (*f.meta) {
        case MetaField::message_id:
          value = message.message_id;
          break;
        case MetaField::sent_time:
          time = message.sent_time;
          break;
        case MetaField::received_time:
          time = message.received_time;
          break;
        case MetaField::receive_count:
          value = message.receive_count;
          break;
        case MetaField::source:
          value = message.source;
          break;
        case MetaField::group_id:
          if (message.group_id) value = *message.group_id;
          break;
        case MetaField::sequence_number:
          if (message.sequence_number) value = *message.sequence_number;
          break;
        case MetaField::trace_id:
          if (message.trace_id) value = *message.trace_id;
          break;
        default: {
          std::string_view text;
          if (!envelope[sns_envelope_key(*f.meta)].get_string().get(text)) {  // unwrap_sns: set
            if (f.type != FieldType::timestamp) {
              value = text;
            } else if (auto stamp = p.from_text(text, failure)) {
              value = std::move(*stamp);
            } else {
              return Rejection{RejectReason::schema_drift, p.label + ": " + failure.why};
            }
          }
          break;
        }
      }
      if (time)
        value = f.type == FieldType::timestamp
                    ? *p.timestamp_value(std::chrono::duration_cast<std::chrono::microseconds>(
                                             time->time_since_epoch())
                                             .count())
                    : Json(iso8601_ms(*time));
      continue;
    }
    if (f.header) {
      std::optional<std::string_view> text;
      if (message.header) text = message.header(message.header_context, *f.header);
      if (!text) {
        present = false;
      } else if (!simdjson::validate_utf8(text->data(), text->size())) {
        // A body's strings are valid UTF-8 (the parser checks); an AMQP header's bytes
        // need not be.
        return Rejection{RejectReason::schema_drift, p.label + ": not valid UTF-8"};
      } else {
        converted = p.from_text(*text, failure);
      }
    } else {
      present = false;
      for (std::size_t k = 0; k < p.pointers.size() && !present; ++k) {
        element found;
        if (!at_pointer(root, p.pointers[k], found) || found.is_null()) continue;
        present = true;
        converted = p.from_element(found, body_text, k, failure);
      }
    }
    if (!present) {
      if (f.required) return Rejection{RejectReason::validation, "missing required " + p.label};
      if (p.fallback) value = *p.fallback;
      continue;
    }
    if (!converted) return Rejection{failure.reason, p.label + ": " + failure.why};
    if (auto problem = p.check(*converted))
      return Rejection{RejectReason::validation, p.label + ": " + *problem};
    value = std::move(*converted);
  }
  return std::nullopt;
}

void Projection::build_document(std::vector<Json>& values, Json& document) const {
  const auto& fields = compiled_->fields;
  document = Json::object();
  auto& top = document.get_ref<Json::object_t&>();
  top.reserve(fields.size() + 1);
  if (!compiled_->nested) {
    // The document's object is a vector in field order: built in place.
    for (std::size_t i = 0; i < fields.size(); ++i)
      top.emplace_back(fields[i].name, std::move(values[i]));  // names are unique
    return;
  }
  for (std::size_t i = 0; i < fields.size(); ++i) {
    Json* at = &document;
    std::string_view name = fields[i].name;
    for (auto dot = name.find('.'); dot != std::string_view::npos; dot = name.find('.')) {
      at = &(*at)[std::string(name.substr(0, dot))];
      if (at->is_null()) *at = Json::object();
      name.remove_prefix(dot + 1);
    }
    (*at)[std::string(name)] = std::move(values[i]);
  }
}

}  // namespace sluice::pipeline
