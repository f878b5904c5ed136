#pragma once
// The container's spans (OpenTelemetry's messaging conventions): a `receive` span for
// each receive that brought messages, linked to every message's producer; a `process`
// span for each message, from the moment a handler gets it to its settlement, whose
// parent is the producer's context (or, with producer_as_parent off, which links to
// it). The outcome is the settlement: ack, retry, release, reject (with the reason),
// lost. What a handler adds (Message::set_trace_attribute) joins it.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/message_state.hpp"
#include "sluice/tracing.hpp"

namespace sluice::detail {

// A traced message's part of its state.
struct MessageTrace {
  tracing::SpanContext producer;  // valid when the message carried one
  std::mutex mutex;               // the handler's thread and the settling thread
  tracing::Span process;          // under mutex once started
  bool started = false;           // under mutex
};

}  // namespace sluice::detail

namespace sluice::runtime {

using StatePtr = std::shared_ptr<detail::MessageState>;

class ContainerTracing {
 public:
  explicit ContainerTracing(std::shared_ptr<tracing::Tracer> tracer);
  // What the spans say of the source (after it opened): "aws_sqs", the queue's name.
  void set_source(std::string system, std::string destination);
  // After a receive that brought `states`: each one's producer context, the receive span.
  void received(const std::vector<StatePtr>& states, std::chrono::system_clock::time_point started);
  // A handler gets it: its process span starts.
  void started(const StatePtr& state);
  // Its settlement ends the process span.
  void settled(const StatePtr& state, detail::Outcome outcome, const std::string& reason);

 private:
  std::shared_ptr<tracing::Tracer> tracer_;
  std::string system_, destination_, receive_name_, process_name_;
};

// " trace_id=<32 hex>" for a log line about a traced message, else "".
std::string trace_field(const detail::MessageState& state);

}  // namespace sluice::runtime
