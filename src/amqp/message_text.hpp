#pragma once
// An AMQP message's parts as text and JSON: a header's value (for normalize's header
// fields and the meta a source offers), a header table as JSON and a body for a
// terminal (sluice dlq peek).
#include <amqp.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace sluice::amqp {

// A header value as text: strings, booleans and integers; other kinds (floats,
// decimals, arrays, tables) are nothing.
std::optional<std::string> field_text(const amqp_field_value_t& v);
// Any value, arrays and tables included, as JSON.
nlohmann::json field_json(const amqp_field_value_t& v);
nlohmann::json table_json(const amqp_table_t& table);

// Valid UTF-8.
bool utf8(const std::string& text);
// A body for a terminal: control bytes and bytes that are no UTF-8 shown as \xNN.
std::string printable(const std::string& text);
// JSON as one line, bytes that are no UTF-8 replaced.
std::string dump(const nlohmann::json& j);

}  // namespace sluice::amqp
