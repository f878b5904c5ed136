#pragma once
// Connection strings carry passwords: never print one as given.
#include <string>
#include <string_view>

namespace sluice::common {

// "postgresql://user:secret@host/db" -> "postgresql://user:***@host/db";
// "host=h password=secret" -> "host=h password=***" (libpq key=value form, quoted too).
std::string redact_password(std::string_view connection_string);

}  // namespace sluice::common
