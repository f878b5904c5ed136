#pragma once
// JSON 1.0 encoding of SQS requests and decoding of responses; internal.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/sqs/types.hpp"

namespace sluice::sqs::codec {

// Each validate_* throws AwsError{client} with the code SQS would have answered.
void validate(const ReceiveMessageRequest& request);
void validate_send(const SendMessageEntry& entry, bool in_batch);
template <class Entry>
void validate_batch(const std::vector<Entry>& entries);
void validate_send_batch(const std::vector<SendMessageEntry>& entries);

std::string encode_receive(const ReceiveMessageRequest& request);
std::string encode_send(const std::string& queue_url, const SendMessageEntry& entry);
std::string encode_send_batch(const std::string& queue_url,
                              const std::vector<SendMessageEntry>& entries);
std::string encode_delete_batch(const std::string& queue_url,
                                const std::vector<DeleteMessageEntry>& entries);
std::string encode_change_visibility_batch(const std::string& queue_url,
                                           const std::vector<ChangeVisibilityEntry>& entries);

// Throws AwsError{integrity} on a malformed document or, when verify_md5, a digest
// that does not match the body or the message attributes.
std::vector<Message> decode_receive(std::string_view body, bool verify_md5);
// The same, without copying: every message is checked first (nothing is passed on
// from a malformed answer), then each is passed to `each` as views into the parsed
// answer, valid until `each` returns. Returns how many.
std::size_t decode_receive(std::string_view body, bool verify_md5,
                           const std::function<void(const MessageView&)>& each);
SendMessageResult decode_send(std::string_view body, const SendMessageEntry& sent, bool verify_md5);
BatchResult decode_batch(std::string_view body);
// SendMessageBatch: also checks each entry's MD5 against what was sent.
BatchResult decode_send_batch(std::string_view body, const std::vector<SendMessageEntry>& sent,
                              bool verify_md5);

struct ServiceError {
  std::string code;  // "QueueDoesNotExist"
  std::string message;
};
ServiceError decode_error(std::string_view body, std::string_view query_error_header);

// The size SQS counts against the 1 MiB limit: body plus attribute names, types, values.
std::size_t message_size(const SendMessageEntry& entry);

// A batch answer's entry id, checked: ours are decimal indexes below `size`, but an
// answer is input (an id never sent, or not a number, is nullopt).
std::optional<std::size_t> entry_index(std::string_view id, std::size_t size);

}  // namespace sluice::sqs::codec
