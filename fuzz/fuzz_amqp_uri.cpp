// libFuzzer target: AMQP URIs (amqp[s]://user:password@host:port/vhost), as given to
// source.amqp_url, sluice publish --amqp-url and the library. Any input either parses
// or is refused with std::invalid_argument, and a refusal never repeats the password.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "amqp/connection.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    const auto uri = sluice::amqp::parse_uri(input);
    if (uri.port < 1 || uri.port > 65535 || uri.host.empty()) std::abort();
  } catch (const std::invalid_argument& e) {
    // A password of 8+ characters (shorter ones may appear by chance) is never shown.
    const auto scheme = input.find("://");
    const auto at = input.rfind('@');
    if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
      const auto colon = input.find(':', scheme + 3);
      if (colon != std::string::npos && colon < at) {
        const std::string password = input.substr(colon + 1, at - colon - 1);
        // (A "password" holding the placeholder itself may match the redacted text.)
        if (password.size() >= 8 && password.find("***") == std::string::npos &&
            std::string(e.what()).find(password) != std::string::npos)
          std::abort();
      }
    }
  }
  return 0;
}
