// normalize.fields[] and normalize.when: the rows of a field and how a list of
// fields is read.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "config/engine.hpp"

namespace sluice::app {
using namespace config;

using std::chrono::milliseconds;

const std::vector<FieldOption>& field_options() {
  static const std::vector<FieldOption> table = {
      {"name", "string",
       "Name in the normalized document (required). Dots nest: customer.id is stored as "
       "{\"customer\": {\"id\": ...}}.",
       [](auto& f, auto& n, auto& k) { f.name = as_string(n, k); }},
      {"from", "JSON pointer, or a list of them",
       "Where the value is in the body, e.g. /item/sku; a list: the first one present (and not "
       "null) wins, e.g. [/customer/id, /customerId].",
       [](auto& f, auto& n, auto& k) {
         f.from = n.IsSequence() ? as_string_list(n, k) : std::vector{as_string(n, k)};
         if (f.from.empty()) bad(k, n, "a JSON pointer or a non-empty list of them");
       }},
      {"type",
       "enum: string | integer | number | boolean | json | timestamp | decimal | uuid | enum",
       "Type to convert to (\"42\" becomes 42 for integer); a value that does not convert is "
       "schema drift. timestamp: RFC 3339 with any offset, or an epoch count (see unit), stored "
       "in UTC (see precision, output); decimal: exact, stored as canonical text (\"1.10\", "
       "1.1 and \"1.100\" are all \"1.1\"; see scale), never a binary float; uuid: stored "
       "lowercase 8-4-4-4-12 (braces, urn:uuid: and 32 bare digits accepted); enum: a string "
       "among values.",
       [](auto& f, auto& n, auto& k) {
         static const std::pair<const char*, pipeline::FieldType> types[] = {
             {"string", pipeline::FieldType::string},
             {"integer", pipeline::FieldType::integer},
             {"number", pipeline::FieldType::number},
             {"boolean", pipeline::FieldType::boolean},
             {"json", pipeline::FieldType::json},
             {"timestamp", pipeline::FieldType::timestamp},
             {"decimal", pipeline::FieldType::decimal},
             {"uuid", pipeline::FieldType::uuid},
             {"enum", pipeline::FieldType::enumeration}};
         std::vector<std::string> allowed;
         for (const auto& [name, type] : types) allowed.emplace_back(name);
         const std::string t = as_enum(n, k, allowed);
         for (const auto& [name, type] : types)
           if (t == name) f.type = type;
       }},
      {"required", "boolean", "Missing (or null) is a validation reject. Default false.",
       [](auto& f, auto& n, auto& k) { f.required = as_bool(n, k); }},
      {"default", "scalar",
       "Value used when the field is absent and not required. For timestamp, decimal, uuid, enum "
       "and a field with text transforms it is converted and checked at load like a message's "
       "value; the other types keep it as written.",
       [](auto& f, auto& n, auto& k) { f.default_value = as_json_scalar(n, k); }},
      {"const", "scalar", "A constant value instead of `from` (converted like `default`).",
       [](auto& f, auto& n, auto& k) { f.constant = as_json_scalar(n, k); }},
      {"attribute", "string",
       "An SQS message attribute of this name instead of `from` (its String or Number value; "
       "a Binary one base64), e.g. tenant. For source.type sqs.",
       [](auto& f, auto& n, auto& k) {
         f.header = as_string(n, k);
         f.header_key = "attribute";
       }},
      {"header", "string",
       "An AMQP message header of this name instead of `from`. For source.type rabbitmq.",
       [](auto& f, auto& n, auto& k) {
         f.header = as_string(n, k);
         f.header_key = "header";
       }},
      {"unit", "enum: auto | seconds | milliseconds | microseconds",
       "timestamp: the unit of an epoch count (a number, or a string of digits). auto (the "
       "default): seconds below 100,000,000,000 (the year 5138), milliseconds from there.",
       [](auto& f, auto& n, auto& k) {
         const std::string u = as_enum(n, k, {"auto", "seconds", "milliseconds", "microseconds"});
         f.timestamp.unit = u == "seconds"        ? pipeline::EpochUnit::seconds
                            : u == "milliseconds" ? pipeline::EpochUnit::milliseconds
                            : u == "microseconds" ? pipeline::EpochUnit::microseconds
                                                  : pipeline::EpochUnit::auto_detect;
       }},
      {"precision", "enum: seconds | milliseconds | microseconds",
       "timestamp: the precision kept; finer digits are cut (toward the past). Default "
       "milliseconds.",
       [](auto& f, auto& n, auto& k) {
         const std::string u = as_enum(n, k, {"seconds", "milliseconds", "microseconds"});
         f.timestamp.precision = u == "seconds"        ? pipeline::TimePrecision::seconds
                                 : u == "microseconds" ? pipeline::TimePrecision::microseconds
                                                       : pipeline::TimePrecision::milliseconds;
       }},
      {"output", "enum: rfc3339 | epoch_ms",
       "timestamp: stored as RFC 3339 text in UTC (2024-02-29T18:14:59.123Z, the default) or as "
       "an integer of epoch milliseconds. A PostgreSQL column of it is timestamptz either way.",
       [](auto& f, auto& n, auto& k) {
         f.timestamp.output = as_enum(n, k, {"rfc3339", "epoch_ms"}) == "epoch_ms"
                                  ? pipeline::TimeOutput::epoch_ms
                                  : pipeline::TimeOutput::rfc3339;
       }},
      {"format", "string",
       "timestamp: a strftime-style format for text that is not RFC 3339, e.g. \"%d/%m/%Y "
       "%H:%M:%S\" (%z reads an offset such as +0545; without one the text is read as UTC).",
       [](auto& f, auto& n, auto& k) {
         f.timestamp.format = as_string(n, k);
         if (f.timestamp.format.find('%') == std::string::npos)
           bad(k, n, "a format with at least one %-field, such as %Y-%m-%d %H:%M:%S");
       }},
      {"scale", "integer",
       "decimal: exactly this many digits after the point (12.5 is stored \"12.50\" with "
       "scale 2); a value with more significant digits after the point is schema drift, never "
       "rounded. Without it trailing zeros are trimmed.",
       [](auto& f, auto& n, auto& k) { f.scale = static_cast<int>(as_int(n, k, 0, 1000)); }},
      {"values", "list of strings",
       "enum: the allowed values (compared after the text transforms); any other is a "
       "validation reject.",
       [](auto& f, auto& n, auto& k) { f.values = as_string_list(n, k); }},
      {"text", "list of: trim | lower | upper | nfc | collapse",
       "string, enum: canonical text before hashing, applied as NFC (Unicode composition), "
       "trim (leading and trailing whitespace), collapse (inner whitespace runs to one space), "
       "then lower or upper, whatever the order listed. They change the hash of records that "
       "had other spellings: adding one is a new identity version.",
       [](auto& f, auto& n, auto& k) {
         f.text = {};
         for (const auto& t : as_string_list(n, k)) {
           const std::string item =
               as_enum(YAML::Node(t), k + "[]", {"trim", "lower", "upper", "nfc", "collapse"});
           if (item == "trim") f.text.trim = true;
           if (item == "nfc") f.text.nfc = true;
           if (item == "collapse") f.text.collapse = true;
           if (item == "lower" || item == "upper") {
             const auto wanted =
                 item == "lower" ? pipeline::LetterCase::lower : pipeline::LetterCase::upper;
             if (f.text.letter_case != pipeline::LetterCase::keep && f.text.letter_case != wanted)
               bad(k, n, "at most one of lower and upper");
             f.text.letter_case = wanted;
           }
         }
       }},
      {"min", "number",
       "integer, number, decimal: the least value allowed (inclusive); below it is a "
       "validation reject. Compared exactly.",
       [](auto& f, auto& n, auto& k) { f.min = as_decimal_text(n, k); }},
      {"max", "number", "integer, number, decimal: the greatest value allowed (inclusive).",
       [](auto& f, auto& n, auto& k) { f.max = as_decimal_text(n, k); }},
      {"min_length", "integer",
       "string, enum: the fewest characters (Unicode code points) allowed, after the text "
       "transforms; fewer is a validation reject.",
       [](auto& f, auto& n, auto& k) {
         f.min_length = static_cast<std::size_t>(as_int(n, k, 0, 1'000'000'000));
       }},
      {"max_length", "integer", "string, enum: the most characters allowed.",
       [](auto& f, auto& n, auto& k) {
         f.max_length = static_cast<std::size_t>(as_int(n, k, 0, 1'000'000'000));
       }},
      {"pattern", "string",
       "string, enum, uuid: a regular expression (RE2 syntax: linear time, no backreferences) "
       "the whole value must match, after the text transforms; else a validation reject.",
       [](auto& f, auto& n, auto& k) { f.pattern = as_string(n, k); }},
      {"meta",
       "enum: message_id | sent_time | received_time | receive_count | source | group_id | "
       "sequence_number | trace_id | sns_message_id | sns_topic_arn | sns_timestamp | "
       "sns_subject | sns_signature | sns_signature_version | sns_signing_cert_url",
       "A message property instead of `from`. group_id and sequence_number are a FIFO message's "
       "MessageGroupId and SequenceNumber (a decimal string; null when the queue does not send "
       "them). trace_id is the trace of the message's processing (32 hex digits: its producer's "
       "trace when it carried one, unless tracing.producer_as_parent is false; null when "
       "tracing is off). sns_* are the SNS envelope's "
       "MessageId, TopicArn, Timestamp, Subject, Signature, "
       "SignatureVersion and SigningCertURL (with decode.sns_envelope; null when absent).",
       [](auto& f, auto& n, auto& k) {
         static const std::pair<const char*, pipeline::MetaField> names[] = {
             {"message_id", pipeline::MetaField::message_id},
             {"sent_time", pipeline::MetaField::sent_time},
             {"received_time", pipeline::MetaField::received_time},
             {"receive_count", pipeline::MetaField::receive_count},
             {"source", pipeline::MetaField::source},
             {"group_id", pipeline::MetaField::group_id},
             {"sequence_number", pipeline::MetaField::sequence_number},
             {"trace_id", pipeline::MetaField::trace_id},
             {"sns_message_id", pipeline::MetaField::sns_message_id},
             {"sns_topic_arn", pipeline::MetaField::sns_topic_arn},
             {"sns_timestamp", pipeline::MetaField::sns_timestamp},
             {"sns_subject", pipeline::MetaField::sns_subject},
             {"sns_signature", pipeline::MetaField::sns_signature},
             {"sns_signature_version", pipeline::MetaField::sns_signature_version},
             {"sns_signing_cert_url", pipeline::MetaField::sns_signing_cert_url}};
         std::vector<std::string> allowed;
         for (const auto& [name, field] : names) allowed.emplace_back(name);
         const std::string m = as_enum(n, k, allowed);
         for (const auto& [name, field] : names)
           if (m == name) f.meta = field;
       }},
  };
  return table;
}

std::vector<pipeline::FieldSpec> parse_fields(const YAML::Node& list, const std::string& key) {
  if (!list.IsSequence()) bad(key, list, "a list of fields");
  std::vector<pipeline::FieldSpec> fields;
  std::vector<std::string> known;
  for (const auto& o : field_options()) known.push_back(o.key);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    if (!item.IsMap())
      bad(item_key, item, "a mapping with name and from, const, meta, attribute or header");
    pipeline::FieldSpec field;
    for (const auto& entry : item) {
      const std::string name = entry.first.Scalar();
      auto it = std::find_if(field_options().begin(), field_options().end(),
                             [&](const FieldOption& o) { return o.key == name; });
      if (it == field_options().end()) {
        std::vector<std::string> qualified;
        for (const auto& k : known) qualified.push_back(item_key + "." + k);
        unknown_key(item_key + "." + name, qualified);
      }
      it->apply(field, entry.second, item_key + "." + name);
    }
    fields.push_back(std::move(field));
  }
  return fields;
}

// normalize.when: {from: /schemaVersion, cases: {"1": [fields], "2": [fields]}, absent: "1"}
pipeline::PayloadVersions parse_versions(const YAML::Node& node, const std::string& key) {
  if (!node.IsMap()) bad(key, node, "a mapping with from, cases and (optionally) absent");
  pipeline::PayloadVersions versions;
  for (const auto& entry : node) {
    const std::string name = entry.first.Scalar();
    const std::string item_key = key + "." + name;
    if (name == "from") {
      versions.from = entry.second.IsSequence() ? as_string_list(entry.second, item_key)
                                                : std::vector{as_string(entry.second, item_key)};
    } else if (name == "cases") {
      if (!entry.second.IsMap() || entry.second.size() == 0)
        bad(item_key, entry.second, "a mapping of each version's value to its list of fields");
      for (const auto& version : entry.second) {
        const std::string value = as_string(version.first, item_key);
        versions.cases.emplace_back(value, parse_fields(version.second, item_key + "." + value));
      }
    } else if (name == "absent") {
      versions.absent = as_string(entry.second, item_key);
    } else {
      unknown_key(item_key, {key + ".from", key + ".cases", key + ".absent"});
    }
  }
  if (versions.from.empty()) bad(key + ".from", YAML::Node(), "the discriminator's JSON pointer");
  if (versions.cases.empty()) bad(key + ".cases", YAML::Node(), "the versions' field lists");
  return versions;
}

// A field a sink writes as a column of its own: its type, and its timestamp output,
// one in every version.
std::vector<std::pair<std::string, sinks::FieldInfo>> consistent_fields(
    const pipeline::TransformSpec& transform) {
  std::vector<std::pair<std::string, sinks::FieldInfo>> fields;
  std::set<std::string> conflicting;
  for (const auto& [where, list] : pipeline::field_lists(transform))
    for (const auto& f : list) {
      sinks::FieldInfo info;
      info.type = f.type;
      info.epoch_ms = f.type == pipeline::FieldType::timestamp &&
                      f.timestamp.output == pipeline::TimeOutput::epoch_ms;
      const auto it = std::find_if(fields.begin(), fields.end(),
                                   [&](const auto& known) { return known.first == f.name; });
      if (it == fields.end())
        fields.emplace_back(f.name, info);
      else if (it->second.type != info.type || it->second.epoch_ms != info.epoch_ms)
        conflicting.insert(f.name);
    }
  std::erase_if(fields, [&](const auto& field) { return conflicting.contains(field.first); });
  return fields;
}

sinks::FieldInfo field_info(const pipeline::TransformSpec& transform, const std::string& key,
                            const std::string& name) {
  sinks::FieldInfo info;
  try {
    info.type = pipeline::field_in_every_version(transform, key, name).type;
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  std::optional<bool> epoch_ms;
  for (const auto& [where, fields] : pipeline::field_lists(transform))
    for (const auto& f : fields)
      if (f.name == name && f.type == pipeline::FieldType::timestamp) {
        const bool here = f.timestamp.output == pipeline::TimeOutput::epoch_ms;
        if (epoch_ms && *epoch_ms != here)
          throw ConfigError(key + ": '" + name +
                            "' has output epoch_ms in one version and rfc3339 in another: give "
                            "it one output");
        epoch_ms = here;
      }
  info.epoch_ms = epoch_ms.value_or(false);
  return info;
}

}  // namespace sluice::app
