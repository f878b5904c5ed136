#pragma once
// The pipeline's pure stages: decode (JSON, optional SNS envelope, size and depth
// limits), normalize (a projection from JSON pointers, message properties and headers
// to a stable document; projection.hpp), validate (required fields, types, checks) and
// identity (a versioned SHA-256 content hash, or of a key the producer gives). A filter
// (filter.hpp) may skip a decoded message before it is normalized.
// No I/O here: every function is deterministic and safe to call from many threads.

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "pipeline/filter.hpp"
#include "pipeline/projection.hpp"

namespace sluice::pipeline {

struct TransformSpec {
  std::size_t max_body_bytes = 1024 * 1024;
  std::size_t max_depth = 64;
  bool unwrap_sns = false;                  // SNS-to-SQS envelopes: parse the inner "Message"
  std::vector<FieldSpec> fields;            // every version's; with `versions`, may be empty
  std::optional<PayloadVersions> versions;  // normalize.when
  // Hash versions: name -> the fields whose canonical values make a record's identity.
  std::map<std::string, std::vector<std::string>> hash_versions;
  std::string hash_version;  // the one in force
  std::string hash_field = "documentHash";
  // identity.key: what a record's identity is made of.
  enum class Key { content, header, deduplication_id };
  Key key = Key::content;
  std::string key_header;      // Key::header: the attribute's or header's name
  std::string key_header_key;  // "attribute" or "header": for reasons
  // filter: Lambda's patterns (filter.hpp), ORed; empty: every message passes.
  nlohmann::json filter = nlohmann::json::array();
  std::string filter_headers;  // the key patterns name headers with ("attributes")
  // route: the table (collection) a record is written to, by its route_field's value
  // (value -> table); a value not listed goes to the sink's own table, or is rejected.
  std::string route_field;
  std::vector<std::pair<std::string, std::string>> route_tables;
  bool route_unknown_rejected = false;
};

// The tables route_tables names, each once, in order: Record::route k > 0 is the k-th.
std::vector<std::string> routed_tables(const TransformSpec& spec);

// Every field list a message can be projected with, and where the configuration says
// it: normalize.fields alone, or followed by each version's own fields.
std::vector<std::pair<std::string, std::vector<FieldSpec>>> field_lists(const TransformSpec& spec);

// A field named elsewhere (a typed column, a log line's field), by `key`: the field in
// every one of those lists, all of one type. Throws std::invalid_argument naming `key`
// when it is missing from one or its type differs between two.
const FieldSpec& field_in_every_version(const TransformSpec& spec, const std::string& key,
                                        const std::string& name);

// Checks everything a Transformer would: names, pointers, types, checks, defaults,
// patterns and hash fields; throws std::invalid_argument naming the key and problem.
void validate(const TransformSpec& spec);

// A message no filter pattern matches: acked, not written.
struct Filtered {};

using Outcome = std::variant<Record, Rejection, Filtered>;

// A message as the transform reads it: its body and its properties.
struct MessageView : MessageProperties {
  std::string_view body;
};

class Transformer {
 public:
  explicit Transformer(TransformSpec spec);
  ~Transformer();
  Outcome transform(const MessageView& message) const;
  const TransformSpec& spec() const { return spec_; }

 private:
  struct Version;  // a compiled field list and where its hash fields are
  TransformSpec spec_;
  std::vector<Version> versions_;  // one, or one per normalize.when case
  std::map<std::string, std::size_t, std::less<>> version_of_;  // case value -> versions_
  std::optional<std::size_t> absent_version_;
  std::vector<std::vector<std::string>> discriminator_;         // normalize.when.from, split
  std::string discriminator_text_;                              // "/schemaVersion" for reasons
  std::string known_cases_;                                     // "1, 2" for reasons
  std::map<std::string, std::uint16_t, std::less<>> route_of_;  // value -> Record::route
  std::map<std::string, std::uint16_t, std::less<>> route_of_number_;  // canonical decimal ->
  std::string known_routes_;                                           // "A, B" for reasons
  Filter filter_;
};

// "V1:" + hex(SHA-256(canonical JSON array of the values)).
std::string content_hash(const std::string& version, const std::vector<nlohmann::json>& values);

}  // namespace sluice::pipeline
