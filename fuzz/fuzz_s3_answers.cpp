// libFuzzer target: what S3 and SNS send back and what arrives in place of a body.
// A message body tried as an extended client's S3 pointer either is one (and then
// formats and parses back to the same bucket and key) or is not; an XML answer
// (S3 errors, SNS results) either parses into a tree no deeper than the limit or is
// refused. Nothing else may happen.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "aws/xml.hpp"
#include "sluice/sqs/large_payload.hpp"

namespace {
std::size_t depth(const sluice::aws::XmlElement& e) {
  std::size_t deepest = 0;
  for (const auto& c : e.children) deepest = std::max(deepest, depth(c));
  return deepest + 1;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (auto pointer = sluice::sqs::parse_payload_pointer(input)) {
    if (pointer->bucket.empty() || pointer->key.empty()) std::abort();
    const auto again =
        sluice::sqs::parse_payload_pointer(sluice::sqs::format_payload_pointer(*pointer));
    if (!again || again->bucket != pointer->bucket || again->key != pointer->key) std::abort();
  }
  if (auto doc = sluice::aws::parse_xml(input)) {
    if (depth(*doc) > 65) std::abort();
    (void)doc->find("Code");
  }
  return 0;
}
