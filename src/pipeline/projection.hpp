#pragma once
// The projection: from a decoded body (and the message's properties and headers) to
// the stable document whose chosen fields make the content hash. A field list is
// compiled once, at load: pointers split into their tokens, enums as sets, patterns
// compiled, defaults converted and checked; every problem of the list is found there,
// not on the first message.

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/canonical_text.hpp"
#include "pipeline/typed_values.hpp"
#include "sluice/driver/record.hpp"

namespace simdjson::dom {
class element;
}

namespace sluice::pipeline {

enum class MetaField {
  message_id,
  sent_time,
  received_time,
  receive_count,
  source,
  group_id,         // an ordered group (SQS FIFO MessageGroupId)
  sequence_number,  // its position in the queue (SQS FIFO SequenceNumber, a decimal string)
  trace_id,         // the trace its processing belongs to (32 hex digits), when traced
  // The SNS envelope's own fields (decode.sns_envelope): null when absent.
  sns_message_id,
  sns_topic_arn,
  sns_timestamp,
  sns_subject,
  sns_signature,
  sns_signature_version,
  sns_signing_cert_url,
};
// "MessageId" for sns_message_id, ...; null for the other meta fields.
const char* sns_envelope_key(MetaField field);

struct FieldSpec {
  std::string name;               // in the normalized document; "customer.id" nests
  std::vector<std::string> from;  // JSON pointers into the body: the first present wins
  FieldType type = FieldType::string;
  bool required = false;
  std::optional<nlohmann::json> default_value;  // when absent and not required
  std::optional<nlohmann::json> constant;       // a fixed value, no pointer
  std::optional<MetaField> meta;                // a message property, no pointer
  std::optional<std::string> header;            // a message header (SQS message attribute)
  std::string header_key = "header";            // the key that named it, for errors
  // The type's own settings.
  TimestampOptions timestamp;
  std::optional<int> scale;         // decimal: exactly this many fraction digits
  std::vector<std::string> values;  // enumeration: the allowed values, after `text`
  TextTransforms text;              // string and enumeration
  // Checks: a value outside them is a validation reject.
  std::optional<std::string> min, max;  // integer, number, decimal (inclusive, decimal text)
  std::optional<std::size_t> min_length, max_length;  // string, enumeration (code points)
  std::optional<std::string> pattern;  // string, enumeration, uuid: RE2, the whole value
};

// Field lists written in code (tests, benchmarks, library users).
inline FieldSpec field(std::string name, std::string pointer, FieldType type = FieldType::string,
                       bool required = false) {
  FieldSpec f;
  f.name = std::move(name);
  f.from = {std::move(pointer)};
  f.type = type;
  f.required = required;
  return f;
}
inline FieldSpec meta_field(std::string name, FieldType type, MetaField meta) {
  FieldSpec f;
  f.name = std::move(name);
  f.type = type;
  f.meta = meta;
  return f;
}
inline FieldSpec constant_field(std::string name, nlohmann::json value) {
  FieldSpec f;
  f.name = std::move(name);
  f.constant = std::move(value);
  return f;
}
inline FieldSpec with_default(FieldSpec f, nlohmann::json value) {
  f.default_value = std::move(value);
  return f;
}

// normalize.when: a discriminator in the body selects the field list of its version.
struct PayloadVersions {
  std::vector<std::string> from;  // JSON pointers: the first present wins
  // The discriminator's value as text ("2" for 2 or "2") -> that version's fields,
  // after normalize.fields (the ones every version has).
  std::vector<std::pair<std::string, std::vector<FieldSpec>>> cases;
  std::optional<std::string> absent;  // the case of a body without the discriminator
};

enum class RejectReason { malformed, validation, schema_drift };
const char* to_string(RejectReason reason);

struct Rejection {
  RejectReason reason;
  std::string detail;
};

// What a field can read besides the body.
struct MessageProperties {
  std::string_view message_id;
  int receive_count = 1;
  std::optional<std::chrono::system_clock::time_point> sent_time;
  std::chrono::system_clock::time_point received_time;
  std::string_view source;
  std::optional<std::string_view> group_id;
  std::optional<std::string_view> sequence_number;
  std::optional<std::string_view> deduplication_id;  // SQS FIFO's MessageDeduplicationId
  std::optional<std::string_view> trace_id;          // its process span's trace, when traced
  // A header (SQS message attribute, AMQP header) by name; null: the source has none.
  std::optional<std::string_view> (*header)(const void* context, std::string_view name) = nullptr;
  const void* header_context = nullptr;
};

// One field list, compiled. Thread-safe: transform from many threads at once.
class Projection {
 public:
  // Throws std::invalid_argument naming `where` ("normalize.fields[2]") and the problem.
  // `unwrap_sns`: whether the SNS envelope's meta fields exist.
  Projection(std::vector<FieldSpec> fields, bool unwrap_sns, const std::string& where);
  ~Projection();
  Projection(Projection&&) noexcept;
  Projection& operator=(Projection&&) noexcept;

  const std::vector<FieldSpec>& fields() const;
  // The position of a field by name, or nullopt.
  std::optional<std::size_t> index_of(std::string_view name) const;
  bool nested() const;  // a name has a dot: the document has objects

  // Fills `values` (one per field, in order) from the body's root (an object), the SNS
  // envelope (or an invalid element) and the body's text (for exact decimals); or says
  // why it cannot.
  std::optional<Rejection> project(const simdjson::dom::element& root,
                                   const simdjson::dom::element& envelope,
                                   std::string_view body_text, const MessageProperties& message,
                                   std::vector<nlohmann::ordered_json>& values) const;

  // The stored document: the values under their names (dots nest), in field order.
  void build_document(std::vector<nlohmann::ordered_json>& values,
                      nlohmann::ordered_json& document) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// A field by its dotted name in a built document; null when absent.
const nlohmann::ordered_json* find_field(const nlohmann::ordered_json& document,
                                         std::string_view name);

// A value as a reason shows it: at most 60 bytes, cut on a UTF-8 character boundary,
// "..." when cut.
std::string truncated(std::string text);

// Splits a JSON pointer ("/a/b~1c/0") into its tokens ("a", "b/c", "0"); throws
// std::invalid_argument for one that does not start with '/' or has a bad escape.
std::vector<std::string> pointer_tokens(std::string_view pointer);
// The element a split pointer names in `root` into `found`; false when it names nothing.
bool at_pointer(const simdjson::dom::element& root, const std::vector<std::string>& tokens,
                simdjson::dom::element& found);

}  // namespace sluice::pipeline
