#include "sinks/sqlite/driver.hpp"
int f() {
  return sluice::sinks::SqliteSettings{}.options.path.size();
}
