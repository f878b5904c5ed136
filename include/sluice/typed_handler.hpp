#pragma once
// Typed handlers (a handler receives a T, not a raw body): a decoder turns the body into a
// T; a body that does not decode is rejected with the decoder's reason (dead-lettered),
// never retried.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "sluice/container.hpp"

namespace sluice {

template <class T>
using Decoder = std::function<std::optional<T>(const Message&, std::string& error)>;

// Decodes JSON bodies with nlohmann::json (define from_json for T).
template <class T>
Decoder<T> json_decoder() {
  return [](const Message& message, std::string& error) -> std::optional<T> {
    try {
      return nlohmann::json::parse(message.body()).get<T>();
    } catch (const std::exception& e) {
      error = std::string("body does not decode: ") + e.what();
      return std::nullopt;
    }
  };
}

template <class T>
MessageHandler typed_handler(Decoder<T> decode, std::function<void(T&, Message&)> handle) {
  return [decode = std::move(decode), handle = std::move(handle)](Message& message) {
    std::string error;
    std::optional<T> value = decode(message, error);
    if (!value) {
      message.reject(error.empty() ? "decode failed" : error);
      return;
    }
    handle(*value, message);
  };
}

}  // namespace sluice
