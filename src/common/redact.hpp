#pragma once
// Connection strings carry passwords: never print one as given.
#include <string>
#include <string_view>

namespace sluice::common {

// "postgresql://user:secret@host/db" -> "postgresql://user:***@host/db";
// "host=h password=secret" -> "host=h password=***" (libpq key=value form, quoted too).
std::string redact_password(std::string_view connection_string);
// `message` (a driver's error, say) with the password of `connection_string`, and any
// piece of it a driver may have split off, replaced by ***.
std::string redact_secret(std::string message, std::string_view connection_string);

}  // namespace sluice::common
