#pragma once
// What the pipeline hands a sink: a normalized record, and the types its fields have
// (a sink may write a field as a column of that type).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace sluice::pipeline {

enum class FieldType {
  string,
  integer,
  number,
  boolean,
  json,
  timestamp,    // UTC, RFC 3339 text or epoch milliseconds (normalize's output)
  decimal,      // exact, canonical text ("12.5", or "12.50" with scale 2)
  uuid,         // canonical lowercase 8-4-4-4-12
  enumeration,  // a string among the field's values
};
inline const char* to_string(FieldType type) {
  switch (type) {
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
    case FieldType::timestamp:
      return "timestamp";
    case FieldType::decimal:
      return "decimal";
    case FieldType::uuid:
      return "uuid";
    case FieldType::enumeration:
      return "enum";
  }
  return "?";
}

struct Record {
  std::string hash;                 // "V1:" + 64 hex digits
  nlohmann::ordered_json document;  // fields in configured order, then the hash field
  std::string message_id;
  std::string log_context;  // "skuId=SKU-1 locationId=L-7": carried to the writer's log lines
  std::uint16_t route = 0;  // 0: the sink's table; k: the k-th routed table
  // Its message is in an ordered group (SQS FIFO): a batch holding one is inserted in
  // the order given, so that a group's rows in one batch keep their sequence.
  bool ordered = false;
};

}  // namespace sluice::pipeline
