#include "sinks/mongodb/bson_document.hpp"

#include <limits>
#include <optional>
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

std::string dotted(const std::vector<std::string_view>& path, std::string_view key) {
  std::string out;
  for (const auto& step : path) (out += step) += '.';
  return out += key;
}

// Not a number at all (another version's field of that path): nullopt, appended as it is.
std::optional<bool> append_decimal(bson_t* out, std::string_view key, const std::string& text,
                                   const std::string& where, std::string& why) {
  std::string unused;
  const auto original = pipeline::canonical_decimal(text, std::nullopt, unused);
  if (!original) return std::nullopt;
  // Decimal128 holds 34 significant digits: libbson refuses more, or rounds; read back,
  // it must be the same number, or the record is refused rather than stored changed.
  bson_decimal128_t decimal;
  if (bson_decimal128_from_string(text.c_str(), &decimal)) {
    char back[BSON_DECIMAL128_STRING];
    bson_decimal128_to_string(&decimal, back);
    const auto canonical = pipeline::canonical_decimal(back, std::nullopt, unused);
    if (canonical && pipeline::compare_decimals(*canonical, *original) == 0)
      return bson_append_decimal128(out, key.data(), static_cast<int>(key.size()), &decimal);
  }
  why = where + ": the decimal " + text.substr(0, 64) + (text.size() > 64 ? "..." : "") +
        " does not fit MongoDB's Decimal128 (34 significant digits) exactly";
  return false;
}

// Not of the timestamp's form (another version's field of that path): nullopt.
std::optional<bool> append_date(bson_t* out, std::string_view key, const Json& value,
                                bool epoch_ms) {
  std::int64_t ms = 0;
  if (epoch_ms && value.is_number_integer()) {
    ms = value.get<std::int64_t>();
  } else if (!epoch_ms && value.is_string()) {
    std::string unused;
    const auto micros = pipeline::parse_iso8601(value.get_ref<const std::string&>(), unused);
    if (!micros) return std::nullopt;
    // Floor to milliseconds, BSON's precision (as normalize's own precision does).
    ms = *micros / 1000 - (*micros % 1000 < 0 ? 1 : 0);
  } else {
    return std::nullopt;
  }
  return bson_append_date_time(out, key.data(), static_cast<int>(key.size()), ms);
}

bool append_value(bson_t* out, std::string_view key, const Json& value,
                  const std::vector<TypedField>& typed, std::vector<std::string_view>& path,
                  std::string& why) {
  if (key.find('\0') != std::string_view::npos) {
    why = dotted(path, key.substr(0, key.find('\0'))) + ": a key with a NUL byte has no BSON form";
    return false;
  }
  const int length = static_cast<int>(key.size());
  bool ok = true;
  if (const auto* field = typed_at(typed, path, key); field && !value.is_null()) {
    std::optional<bool> typed_ok;
    if (field->type == pipeline::FieldType::decimal && value.is_string())
      typed_ok =
          append_decimal(out, key, value.get_ref<const std::string&>(), dotted(path, key), why);
    else if (field->type == pipeline::FieldType::timestamp)
      typed_ok = append_date(out, key, value, field->epoch_ms);
    if (typed_ok) {
      if (!*typed_ok && why.empty()) why = "the document is over BSON's size limit";
      return *typed_ok;
    }
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
      if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        // As libbson's own JSON reader does: refused, not rounded into a double.
        why = dotted(path, key) + ": the integer " + std::to_string(n) +
              " is beyond BSON's 64-bit integers";
        return false;
      }
      ok = bson_append_int64(out, key.data(), length, static_cast<std::int64_t>(n));
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
      why = dotted(path, key) + ": a value with no BSON form";
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
