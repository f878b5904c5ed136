#pragma once
// Large message payloads through S3, interoperable with the AWS extended clients
// (amazon-sqs-java-extended-client-lib, the Python sqs-extended-client): a body too
// large for a message is stored as an S3 object and the message carries a pointer,
//   ["software.amazon.payloadoffloading.PayloadS3Pointer",
//    {"s3BucketName": "...", "s3Key": "..."}]
// with the payload's size in the ExtendedPayloadSize message attribute
// (SQSLargePayloadSize for the first Java client, which is accepted too).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/s3/client.hpp"

namespace sluice::sqs {

struct LargePayloadOptions {
  bool enabled = false;
  s3::S3ClientOptions s3;

  // --- Receiving (the SQS source): pointers are resolved before the handler runs.
  // Payload bytes held at once (fetched, not yet settled). A payload larger than
  // this can never be held: it is rejected with reason payload_too_large.
  std::uint64_t max_bytes_in_flight = 256ull * 1024 * 1024;
  // Delete the S3 object once its message is deleted from the queue (the Java
  // client's cleanupS3Payload; off by default, as there).
  bool delete_after_ack = false;

  // --- Sending (the publisher): bodies over the threshold go to this bucket.
  std::string bucket;
  std::string key_prefix;  // prepended to the random object key
  // Body plus message attributes above this many bytes goes through S3; 0: the
  // queue's MaximumMessageSize attribute (1,048,576, SQS's default since 2025, when it
  // cannot be read).
  std::size_t threshold = 0;
  bool always_through_s3 = false;
};

struct PayloadPointer {
  std::string bucket;
  std::string key;
};

inline constexpr std::string_view kPayloadPointerClass =
    "software.amazon.payloadoffloading.PayloadS3Pointer";
inline constexpr std::string_view kLegacyPayloadPointerClass =
    "com.amazon.sqs.javamessaging.MessageS3Pointer";
inline constexpr std::string_view kPayloadSizeAttribute = "ExtendedPayloadSize";
inline constexpr std::string_view kLegacyPayloadSizeAttribute = "SQSLargePayloadSize";

// The pointer in a body; nullopt when the body is not one (any JSON spacing, either
// class name). Never throws.
std::optional<PayloadPointer> parse_payload_pointer(std::string_view body);
// The Java client's exact text.
std::string format_payload_pointer(const PayloadPointer& pointer);

}  // namespace sluice::sqs
