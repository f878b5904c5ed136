#include "sinks/mongodb/bson_document.hpp"

#include <limits>
#include <string_view>

#include "pipeline/typed_values.hpp"

namespace sluice::sinks {
namespace {

using Json = nlohmann::ordered_json;

// The typed field at `path` + `key`, if any (the lists are short: a linear search).
const TypedField* typed_at(const std::vector<TypedField>& typed,
                           const std::vector<std::string_view>& path, std::string_view key) {
  for (const auto& field : typed) {
    if (field.path.size() != path.size() + 1 || field.path.back() != key) continue;
    bool same = true;
    for (std::size_t i = 0; same && i < path.size(); ++i) same = field.path[i] == path[i];
    if (same) return &field;
  }
  return nullptr;
}

bool append_value(bson_t* out, std::string_view key, const Json& value,
                  const std::vector<TypedField>& typed, std::vector<std::string_view>& path,
                  std::string& why);

bool append_members(bson_t* out, const Json& object, const std::vector<TypedField>& typed,
                    std::vector<std::string_view>& path, std::string& why) {
  for (const auto& [key, value] : object.items())
    if (!append_value(out, key, value, typed, path, why)) return false;
  return true;
}

bool append_decimal(bson_t* out, std::string_view key, const std::string& text, std::string& why) {
  bson_decimal128_t decimal;
  std::string back_why;
  char back[BSON_DECIMAL128_STRING];
  // Decimal128 rounds what has more than 34 significant digits: read back, it must be
  // the same number, or the record is refused rather than stored changed.
  if (bson_decimal128_from_string(text.c_str(), &decimal)) {
    bson_decimal128_to_string(&decimal, back);
    const auto canonical = pipeline::canonical_decimal(back, std::nullopt, back_why);
    const auto original = pipeline::canonical_decimal(text, std::nullopt, back_why);
    if (canonical && original && pipeline::compare_decimals(*canonical, *original) == 0)
      return bson_append_decimal128(out, key.data(), static_cast<int>(key.size()), &decimal);
  }
  why = std::string(key) + ": the decimal " + text.substr(0, 64) + (text.size() > 64 ? "..." : "") +
        " does not fit MongoDB's Decimal128 (34 significant digits) exactly";
  return false;
}

bool append_date(bson_t* out, std::string_view key, const Json& value, bool epoch_ms,
                 std::string& why) {
  std::int64_t ms = 0;
  if (epoch_ms && value.is_number_integer()) {
    ms = value.get<std::int64_t>();
  } else if (!epoch_ms && value.is_string()) {
    std::string parse_why;
    const auto micros = pipeline::parse_iso8601(value.get_ref<const std::string&>(), parse_why);
    if (!micros) {
      why = std::string(key) + ": " + parse_why;
      return false;
    }
    // Floor to milliseconds, BSON's precision (as normalize's own precision does).
    ms = *micros / 1000 - (*micros % 1000 < 0 ? 1 : 0);
  } else {
    why = std::string(key) + ": a timestamp of an unexpected form: " + value.dump().substr(0, 64);
    return false;
  }
  return bson_append_date_time(out, key.data(), static_cast<int>(key.size()), ms);
}

bool append_value(bson_t* out, std::string_view key, const Json& value,
                  const std::vector<TypedField>& typed, std::vector<std::string_view>& path,
                  std::string& why) {
  if (key.find('\0') != std::string_view::npos) {
    why = "a key with a NUL byte has no BSON form";
    return false;
  }
  const int length = static_cast<int>(key.size());
  bool ok = true;
  if (const auto* field = typed_at(typed, path, key); field && !value.is_null()) {
    if (field->type == pipeline::FieldType::decimal && value.is_string())
      return append_decimal(out, key, value.get_ref<const std::string&>(), why);
    if (field->type == pipeline::FieldType::timestamp)
      return append_date(out, key, value, field->epoch_ms, why);
  }
  switch (value.type()) {
    case Json::value_t::null:
      ok = bson_append_null(out, key.data(), length);
      break;
    case Json::value_t::boolean:
      ok = bson_append_bool(out, key.data(), length, value.get<bool>());
      break;
    case Json::value_t::number_integer:
      ok = bson_append_int64(out, key.data(), length, value.get<std::int64_t>());
      break;
    case Json::value_t::number_unsigned: {
      const auto n = value.get<std::uint64_t>();
      ok = n <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
               ? bson_append_int64(out, key.data(), length, static_cast<std::int64_t>(n))
               : bson_append_double(out, key.data(), length, static_cast<double>(n));
      break;
    }
    case Json::value_t::number_float:
      ok = bson_append_double(out, key.data(), length, value.get<double>());
      break;
    case Json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      ok = bson_append_utf8(out, key.data(), length, text.data(), static_cast<int>(text.size()));
      break;
    }
    case Json::value_t::object: {
      bson_t child;
      if (!(ok = bson_append_document_begin(out, key.data(), length, &child))) break;
      path.push_back(key);
      const bool members = append_members(&child, value, typed, path, why);
      path.pop_back();
      if (!members) return false;
      ok = bson_append_document_end(out, &child);
      break;
    }
    case Json::value_t::array: {
      bson_t child;
      if (!(ok = bson_append_array_begin(out, key.data(), length, &child))) break;
      std::vector<std::string_view> inside;  // no typed field inside an array
      std::size_t index = 0;
      for (const auto& item : value) {
        const std::string at = std::to_string(index++);
        if (!append_value(&child, at, item, {}, inside, why)) return false;
      }
      ok = bson_append_array_end(out, &child);
      break;
    }
    default:
      why = std::string(key) + ": a value with no BSON form";
      return false;
  }
  if (!ok && why.empty()) why = "the document is over BSON's size limit";
  return ok;
}

}  // namespace

bool append_document(bson_t* out, const nlohmann::ordered_json& document,
                     const std::vector<TypedField>& typed, std::string& why) {
  if (!document.is_object()) {
    why = "the document is not an object";
    return false;
  }
  std::vector<std::string_view> path;
  return append_members(out, document, typed, path, why);
}

}  // namespace sluice::sinks
