#pragma once
// The pipeline's pure stages: decode (JSON, optional SNS envelope, size and depth
// limits), normalize (a projection from JSON pointers to a stable document), validate
// (required fields and types) and identity (a versioned SHA-256 content hash).
// No I/O here: every function is deterministic and safe to call from many threads.

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sluice::pipeline {

enum class FieldType { string, integer, number, boolean, json };
enum class MetaField {
  message_id,
  sent_time,
  received_time,
  receive_count,
  source,
  group_id,         // an ordered group (SQS FIFO MessageGroupId)
  sequence_number,  // its position in the queue (SQS FIFO SequenceNumber, a decimal string)
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
  std::string name;     // in the normalized document
  std::string pointer;  // JSON pointer into the (unwrapped) body, e.g. "/item/sku"
  FieldType type = FieldType::string;
  bool required = false;
  std::optional<nlohmann::json> default_value;  // when absent and not required
  std::optional<nlohmann::json> constant;       // a fixed value, no pointer
  std::optional<MetaField> meta;                // a message property, no pointer
};

struct TransformSpec {
  std::size_t max_body_bytes = 256 * 1024;
  std::size_t max_depth = 64;
  bool unwrap_sns = false;  // SNS-to-SQS envelopes: parse the inner "Message"
  std::vector<FieldSpec> fields;
  // Hash versions: name -> the fields whose canonical values make a record's identity.
  std::map<std::string, std::vector<std::string>> hash_versions;
  std::string hash_version;  // the one in force
  std::string hash_field = "documentHash";
};

// Checks names, pointers and hash fields; throws std::invalid_argument naming the problem.
void validate(const TransformSpec& spec);

enum class RejectReason { malformed, validation, schema_drift };
const char* to_string(RejectReason reason);

struct Rejection {
  RejectReason reason;
  std::string detail;
};

struct Record {
  std::string hash;                 // "V1:" + 64 hex digits
  nlohmann::ordered_json document;  // fields in configured order, then the hash field
  std::string message_id;
  std::string log_context;  // "skuId=SKU-1 locationId=L-7": carried to the writer's log lines
};

struct MessageView {
  std::string_view body;
  std::string_view message_id;
  int receive_count = 1;
  std::optional<std::chrono::system_clock::time_point> sent_time;
  std::chrono::system_clock::time_point received_time;
  std::string_view source;
  std::optional<std::string_view> group_id;
  std::optional<std::string_view> sequence_number;
};

class Transformer {
 public:
  explicit Transformer(TransformSpec spec);
  std::variant<Record, Rejection> transform(const MessageView& message) const;
  const TransformSpec& spec() const { return spec_; }

 private:
  TransformSpec spec_;
  std::vector<std::size_t> hash_indexes_;  // positions of the hash fields in spec_.fields
};

// "V1:" + hex(SHA-256(canonical JSON array of the values)).
std::string content_hash(const std::string& version, const std::vector<nlohmann::json>& values);

}  // namespace sluice::pipeline
