#pragma once
// What a rejects row keeps of its message besides the body (RejectRow::properties), as
// JSON: receive count, sent and received times, group, sequence number, deduplication
// id and headers (SQS message attributes, AMQP headers). Written when a message is
// rejected; read back when `sluice rejects replay` puts the row through the pipeline
// again, so that the replay sees the message as it came. One format, both sides here.

#include <functional>
#include <map>
#include <string>

#include "pipeline/transform.hpp"
#include "sluice/driver/sink.hpp"
#include "sluice/driver/source_driver.hpp"
#include "sluice/message.hpp"

namespace sluice::ingest {

std::string message_properties(const Message& message, const driver::MessageMeta& meta);

// A rejects row as the transform reads a message: its body, id and source, and the
// properties the row kept. The view points into this object and the row: neither may
// move while it is used.
struct ReplayedMessage {
  pipeline::MessageView view;
  std::map<std::string, std::string, std::less<>> headers;
  std::string group_id, sequence_number, deduplication_id;
};

// Fills `message` from the row; false when the row kept no properties (written by an
// earlier release): the view then has the body, id and source only.
bool replayed_message(const sinks::StoredReject& row, ReplayedMessage& message);

}  // namespace sluice::ingest
