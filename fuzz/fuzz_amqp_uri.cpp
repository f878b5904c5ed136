// libFuzzer target: AMQP URIs (amqp[s]://user:password@host:port/vhost), as given to
// source.amqp_url, sluice publish --amqp-url and the library. Any input either parses
// or is refused with std::invalid_argument, and a refusal never repeats the password.
// The same input as a stream's start (source.rabbitmq.stream_offset): parsed or
// refused (nullopt), never an offset or a time before 0.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "amqp/connection.hpp"
#include "amqp/stream.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (const auto start = sluice::amqp::parse_stream_start(input)) {
    using Kind = sluice::amqp::StreamStart::Kind;
    if ((start->kind == Kind::offset || start->kind == Kind::timestamp) && start->value < 0)
      std::abort();
    if (start->kind == Kind::timestamp && input.size() != 20) std::abort();
  }
  try {
    const auto uri = sluice::amqp::parse_uri(input);
    if (uri.port < 1 || uri.port > 65535 || uri.host.empty()) std::abort();
  } catch (const std::invalid_argument& e) {
    // The password is never shown.
    const auto scheme = input.find("://");
    const auto at = input.rfind('@');
    if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
      const auto colon = input.find(':', scheme + 3);
      if (colon != std::string::npos && colon < at) {
        const std::string password = input.substr(colon + 1, at - colon - 1);
        // Only a password that can be told apart in the message is checked: 12 letters
        // or digits at least (no run that long is in our own texts), appearing nowhere
        // else in the input (not in the host, say).
        const bool distinct = password.size() >= 12 &&
                              std::all_of(password.begin(), password.end(),
                                          [](unsigned char c) { return std::isalnum(c) != 0; }) &&
                              input.find(password) == colon + 1 &&
                              input.find(password, colon + 2) == std::string::npos;
        if (distinct && std::string(e.what()).find(password) != std::string::npos) std::abort();
      }
    }
  }
  return 0;
}
