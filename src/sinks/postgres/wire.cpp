#include "sinks/postgres/wire.hpp"

namespace sluice::sinks::postgres {

const char* sql_type(pipeline::FieldType type) {
  switch (type) {
    case pipeline::FieldType::string:
      return "text";
    case pipeline::FieldType::integer:
      return "bigint";
    case pipeline::FieldType::number:
      return "double precision";
    case pipeline::FieldType::boolean:
      return "boolean";
    case pipeline::FieldType::json:
      return "jsonb";
    case pipeline::FieldType::timestamp:
      return "timestamptz";
    case pipeline::FieldType::decimal:
      return "numeric";
    case pipeline::FieldType::uuid:
      return "uuid";
    case pipeline::FieldType::enumeration:
      return "text";
  }
  return "text";
}

SinkFailure classify_sqlstate(std::string_view state) {
  if (state.size() != 5) return SinkFailure::transient;
  const auto cls = state.substr(0, 2);
  // Data exceptions (invalid text, \u0000 in jsonb, out of range, bad casts) and
  // integrity constraints other than our ON CONFLICT hash: this record, every time.
  if (cls == "22" || cls == "23") return SinkFailure::refused;
  if (state == "54000") return SinkFailure::refused;  // program_limit_exceeded (row too large)
  if (cls == "08") return SinkFailure::unavailable;   // connection exceptions
  // 40 (serialization failure, deadlock), 53 (resources), 57 (operator intervention,
  // statement timeout), 55P03 (lock not available), and anything else, e.g. a table
  // changed under us: retried a bounded number of times, never split record by record.
  return SinkFailure::transient;
}

// A text array literal ({"a","b",NULL}) for a typed column: its values are converted
// by the column type's own input function, as in a VALUES list.
void append_array_element(std::string& literal, const nlohmann::ordered_json* value) {
  literal += literal.size() > 1 ? "," : "";
  if (!value || value->is_null()) {
    literal += "NULL";
    return;
  }
  const std::string text =
      value->is_string() ? value->get_ref<const std::string&>() : value->dump();
  literal += '"';
  for (const char c : text) {
    if (c == '"' || c == '\\') literal += '\\';
    literal += c;
  }
  literal += '"';
}

}  // namespace sluice::sinks::postgres
