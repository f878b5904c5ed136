#include "sqs/md5.hpp"

#include <cstdint>

#include "common/crypto.hpp"

namespace sluice::sqs {
namespace {
void put_length_prefixed(crypto::Md5Builder& md5, std::string_view value) {
  const auto n = static_cast<std::uint32_t>(value.size());
  const char prefix[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  md5.update({prefix, 4});
  md5.update(value);
}
}  // namespace

std::string md5_of_message_attributes(const MessageAttributes& attributes) {
  crypto::Md5Builder md5;  // std::map iterates names in sorted (byte) order, as SQS requires
  for (const auto& [name, value] : attributes) {
    put_length_prefixed(md5, name);
    put_length_prefixed(md5, value.data_type);
    if (value.is_binary()) {
      md5.update("\x02");
      put_length_prefixed(md5, value.binary_value);
    } else {
      md5.update("\x01");
      put_length_prefixed(md5, value.string_value);
    }
  }
  return crypto::hex(md5.finish());
}
}  // namespace sluice::sqs
