#include "amqp/message_text.hpp"

#include <simdjson.h>

#include <cstdio>

#include "amqp/connection.hpp"

namespace sluice::amqp {

std::optional<std::string> field_text(const amqp_field_value_t& v) {
  switch (v.kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
      return text(v.value.bytes);
    case AMQP_FIELD_KIND_BOOLEAN:
      return v.value.boolean ? "true" : "false";
    case AMQP_FIELD_KIND_I8:
      return std::to_string(v.value.i8);
    case AMQP_FIELD_KIND_U8:
      return std::to_string(v.value.u8);
    case AMQP_FIELD_KIND_I16:
      return std::to_string(v.value.i16);
    case AMQP_FIELD_KIND_U16:
      return std::to_string(v.value.u16);
    case AMQP_FIELD_KIND_I32:
      return std::to_string(v.value.i32);
    case AMQP_FIELD_KIND_U32:
      return std::to_string(v.value.u32);
    case AMQP_FIELD_KIND_I64:
      return std::to_string(v.value.i64);
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
      return std::to_string(v.value.u64);
    default:
      return std::nullopt;
  }
}

nlohmann::json table_json(const amqp_table_t& table) {
  auto out = nlohmann::json::object();
  for (int i = 0; i < table.num_entries; ++i)
    out[text(table.entries[i].key)] = field_json(table.entries[i].value);
  return out;
}

nlohmann::json field_json(const amqp_field_value_t& v) {
  switch (v.kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
      return text(v.value.bytes);
    case AMQP_FIELD_KIND_BOOLEAN:
      return static_cast<bool>(v.value.boolean);
    case AMQP_FIELD_KIND_I8:
      return v.value.i8;
    case AMQP_FIELD_KIND_U8:
      return v.value.u8;
    case AMQP_FIELD_KIND_I16:
      return v.value.i16;
    case AMQP_FIELD_KIND_U16:
      return v.value.u16;
    case AMQP_FIELD_KIND_I32:
      return v.value.i32;
    case AMQP_FIELD_KIND_U32:
      return v.value.u32;
    case AMQP_FIELD_KIND_I64:
      return v.value.i64;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
      return v.value.u64;
    case AMQP_FIELD_KIND_F32:
      return v.value.f32;
    case AMQP_FIELD_KIND_F64:
      return v.value.f64;
    case AMQP_FIELD_KIND_DECIMAL:
      return {{"decimals", v.value.decimal.decimals}, {"value", v.value.decimal.value}};
    case AMQP_FIELD_KIND_ARRAY: {
      auto out = nlohmann::json::array();
      for (int i = 0; i < v.value.array.num_entries; ++i)
        out.push_back(field_json(v.value.array.entries[i]));
      return out;
    }
    case AMQP_FIELD_KIND_TABLE:
      return table_json(v.value.table);
    default:
      return nullptr;
  }
}

bool utf8(const std::string& text) {
  return simdjson::validate_utf8(text.data(), text.size());
}

// A body for a terminal: control bytes and bytes that are no UTF-8 shown as \xNN.
std::string printable(const std::string& text) {
  const bool valid = utf8(text);
  std::string out;
  for (const unsigned char c : text) {
    if (c < 0x20 || c == 0x7f || (!valid && c >= 0x80)) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace sluice::amqp
