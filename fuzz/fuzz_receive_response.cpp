// libFuzzer target: ReceiveMessage responses (the JSON the network hands us).
// Anything may be thrown as AwsError; nothing may crash, leak or read out of bounds.
#include <cstdint>
#include <string_view>

#include "sluice/aws/error.hpp"
#include "sqs/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    sluice::sqs::codec::decode_receive(body, true);
  } catch (const sluice::aws::AwsError&) {
  }
  try {
    sluice::sqs::codec::decode_batch(body);
  } catch (const sluice::aws::AwsError&) {
  }
  sluice::sqs::codec::decode_error(body, body.substr(0, std::min<std::size_t>(size, 64)));
  return 0;
}
