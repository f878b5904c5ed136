// libFuzzer target: ReceiveMessage responses (the JSON the network hands us).
// Anything may be thrown as AwsError; nothing may crash, leak or read out of bounds.
#include <cstdint>
#include <string_view>

#include "sluice/aws/error.hpp"
#include "sqs/codec.hpp"

// Where the views' bytes are summed to, so that reading them is not optimized away.
volatile std::size_t g_read_sum = 0;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    sluice::sqs::codec::decode_receive(body, true);
  } catch (const sluice::aws::AwsError&) {
  }
  try {  // the views, every byte of them read (the sanitizers see a view out of bounds)
    std::size_t sum = 0;
    sluice::sqs::codec::decode_receive(body, false, [&](const sluice::sqs::MessageView& m) {
      auto read = [&](std::string_view text) {
        for (char c : text) sum += static_cast<unsigned char>(c);
      };
      for (auto text :
           {m.message_id, m.receipt_handle, m.body, m.md5_of_body, m.md5_of_message_attributes})
        read(text);
      for (const auto& [name, value] : m.attributes) {
        read(name);
        read(value);
      }
      sum += static_cast<std::size_t>(m.receive_count()) + m.message_attributes.size();
    });
    g_read_sum = sum;
  } catch (const sluice::aws::AwsError&) {
  }
  try {
    sluice::sqs::codec::decode_batch(body);
  } catch (const sluice::aws::AwsError&) {
  }
  sluice::sqs::codec::decode_error(body, body.substr(0, std::min<std::size_t>(size, 64)));
  return 0;
}
