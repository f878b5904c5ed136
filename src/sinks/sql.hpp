#pragma once
#include <string>

namespace sluice::sinks {
// A double-quoted SQL identifier (SQLite and PostgreSQL), quotes doubled.
inline std::string sql_identifier(const std::string& name) {
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace sluice::sinks
