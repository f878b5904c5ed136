#pragma once
// A number a query on the test PostgreSQL answers, or -1: no row, or no table yet.
#include <exception>
#include <string>

#include "support/emulator.hpp"

namespace sluice::test {

inline long postgres_number(const std::string& sql) {
  try {
    const auto text = Postgres::shared().query(sql);
    return text.find_first_of("0123456789") == std::string::npos ? -1L : std::stol(text);
  } catch (const std::exception&) {
    return -1L;  // the table is not there yet
  }
}

}  // namespace sluice::test
