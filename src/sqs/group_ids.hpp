#pragma once
// The MessageGroupId `sluice publish` gives each message it sends to SQS: one for all
// (--group-id), one from a field of each event (--group-id-from, a JSON pointer), or,
// on a FIFO queue given neither, g0..g15 in turn. Standard queues take group ids too
// since 2025 (fair queues: SQS keeps one noisy tenant's backlog from delaying others'
// messages); they are consumed as a standard queue still, in no order.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::sqs {

// 1 to 128 characters, each a letter, a digit or ASCII punctuation (SQS's rule for
// group and deduplication ids).
bool valid_group_id(std::string_view id);

class GroupIds {
 public:
  GroupIds(std::string fixed, std::string from_pointer, bool fifo)
      : fixed_(std::move(fixed)), pointer_(std::move(from_pointer)), fifo_(fifo) {}

  // What is wrong with the flags, naming the flag and the value; or nothing.
  std::optional<std::string> check() const;

  struct Choice {
    std::string id;     // empty: the message goes without one
    std::string error;  // not empty: the message cannot be sent (why)
  };
  // For the index-th body sent.
  Choice of(std::string_view body, std::size_t index) const;

 private:
  std::string fixed_, pointer_;
  bool fifo_;
};

}  // namespace sluice::sqs
