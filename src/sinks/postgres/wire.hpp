#pragma once
// What PostgreSQL's wire and catalog need from the sink: the SQL type of a typed
// column, the sorting of the server's errors (SQLSTATE) and the array formats the
// batch's columns travel in.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "pipeline/transform.hpp"
#include "sluice/driver/sink.hpp"

namespace sluice::sinks::postgres {

// The column type of a field type (text, bigint, numeric, timestamptz, ...).
const char* sql_type(pipeline::FieldType type);

// The one place where PostgreSQL's errors are sorted (SQLSTATE classes, Appendix A).
SinkFailure classify_sqlstate(std::string_view state);

// PostgreSQL's binary array format (array_recv), one dimension: no escaping, no parsing
// of an array literal, and a document goes as it was serialized.
class BinaryArray {
 public:
  BinaryArray(std::uint32_t element_type, std::size_t bytes) {
    data_.reserve(20 + bytes);
    put32(1);  // dimensions
    put32(0);  // no NULLs
    put32(element_type);
    put32(0);  // the number of elements: set by take()
    put32(1);  // lower bound
  }
  void add(std::string_view value) {
    put32(static_cast<std::uint32_t>(value.size()));
    data_.append(value);
    ++size_;
  }
  // An element written in place by `fill`, after `prefix`.
  template <typename Fill>
  void add_with(std::string_view prefix, Fill&& fill) {
    const auto at = data_.size();
    put32(0);
    data_.append(prefix);
    fill(data_);
    set32(at, static_cast<std::uint32_t>(data_.size() - at - 4));
    ++size_;
  }
  std::size_t bytes() const { return data_.size(); }
  std::string take() {
    set32(12, size_);
    return std::move(data_);
  }

 private:
  void put32(std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) data_ += static_cast<char>(v >> shift);
  }
  void set32(std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) data_[at + i] = static_cast<char>(v >> (24 - 8 * i));
  }
  std::string data_;
  std::uint32_t size_ = 0;
};

// A text array literal ({"a","b",NULL}) for a typed column: its values are converted
// by the column type's own input function, as in a VALUES list.
void append_array_element(std::string& literal, const nlohmann::ordered_json* value);

}  // namespace sluice::sinks::postgres
