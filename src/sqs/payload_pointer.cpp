// The AWS extended clients' S3 pointer (sluice/sqs/large_payload.hpp); apart from the
// coroutines of large_payload.cpp so that the fuzzer can instrument it.
#include <nlohmann/json.hpp>

#include "sluice/sqs/large_payload.hpp"

namespace sluice::sqs {

std::optional<PayloadPointer> parse_payload_pointer(std::string_view body) {
  const auto doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array() || doc.size() != 2 || !doc[0].is_string() || !doc[1].is_object())
    return std::nullopt;
  const auto& name = doc[0].get_ref<const std::string&>();
  if (name != kPayloadPointerClass && name != kLegacyPayloadPointerClass) return std::nullopt;
  const auto& fields = doc[1];
  auto bucket = fields.find("s3BucketName");
  auto key = fields.find("s3Key");
  if (bucket == fields.end() || key == fields.end() || !bucket->is_string() || !key->is_string())
    return std::nullopt;
  PayloadPointer pointer{bucket->get<std::string>(), key->get<std::string>()};
  if (pointer.bucket.empty() || pointer.key.empty()) return std::nullopt;
  return pointer;
}

std::string format_payload_pointer(const PayloadPointer& pointer) {
  nlohmann::json fields = nlohmann::json::object();
  fields["s3BucketName"] = pointer.bucket;
  fields["s3Key"] = pointer.key;
  return "[\"" + std::string(kPayloadPointerClass) + "\"," + fields.dump() + "]";
}

}  // namespace sluice::sqs
