#include "runtime/message_trace.hpp"

namespace sluice::runtime {
using detail::Outcome;
using tracing::Attribute;

ContainerTracing::ContainerTracing(std::shared_ptr<tracing::Tracer> tracer)
    : tracer_(std::move(tracer)) {
  set_source({}, {});
}

void ContainerTracing::set_source(std::string system, std::string destination) {
  system_ = std::move(system);
  destination_ = std::move(destination);
  receive_name_ = destination_.empty() ? "receive" : "receive " + destination_;
  process_name_ = destination_.empty() ? "process" : "process " + destination_;
}

namespace {
// W3C traceparent (an SQS message attribute, an AMQP header) first, then SQS's
// AWSTraceHeader system attribute.
tracing::SpanContext producer_context(const detail::MessageState& state) {
  const auto headers = state.text.headers();
  if (auto traceparent = headers.find(tracing::kTraceparent)) {
    if (auto context = tracing::parse_traceparent(
            *traceparent, headers.find(tracing::kTracestate).value_or(std::string_view{})))
      return *context;
  }
  if (auto header = state.text.attributes().find(tracing::kAwsTraceHeader))
    if (auto context = tracing::parse_aws_trace_header(*header)) return *context;
  return {};
}
}  // namespace

void ContainerTracing::received(const std::vector<StatePtr>& states,
                                std::chrono::system_clock::time_point started) {
  auto span = tracer_->start_span(receive_name_, tracing::SpanKind::client, nullptr, started);
  for (const auto& state : states) {
    auto trace = std::make_unique<detail::MessageTrace>();
    trace->producer = producer_context(*state);
    if (span.recording() && trace->producer.valid())
      span.add_link(trace->producer,
                    {Attribute{"messaging.message.id", std::string(state->text.id())}});
    state->trace = std::move(trace);
  }
  if (!span.recording()) return;
  if (!system_.empty()) span.set_attribute("messaging.system", system_);
  span.set_attribute("messaging.operation.type", std::string("receive"));
  span.set_attribute("messaging.operation.name", std::string("receive"));
  if (!destination_.empty()) span.set_attribute("messaging.destination.name", destination_);
  span.set_attribute("messaging.batch.message_count", static_cast<std::int64_t>(states.size()));
}

void ContainerTracing::started(const StatePtr& state) {
  auto* trace = state->trace.get();
  if (!trace) return;
  const bool as_parent = tracer_->options().producer_as_parent && trace->producer.valid();
  auto span = tracer_->start_span(process_name_, tracing::SpanKind::consumer,
                                  as_parent ? &trace->producer : nullptr);
  if (span.recording()) {
    if (!as_parent) span.add_link(trace->producer);
    if (!system_.empty()) span.set_attribute("messaging.system", system_);
    span.set_attribute("messaging.operation.type", std::string("process"));
    span.set_attribute("messaging.operation.name", std::string("process"));
    if (!destination_.empty()) span.set_attribute("messaging.destination.name", destination_);
    span.set_attribute("messaging.message.id", std::string(state->text.id()));
    span.set_attribute("messaging.message.body.size",
                       static_cast<std::int64_t>(state->body.size()));
    if (auto group = state->text.group())
      span.set_attribute("sluice.message.group", std::string(*group));
    span.set_attribute("sluice.message.receive_count",
                       static_cast<std::int64_t>(state->receive_count));
  }
  std::lock_guard lock(trace->mutex);
  trace->process = std::move(span);
  trace->started = true;
}

void ContainerTracing::settled(const StatePtr& state, Outcome outcome, const std::string& reason) {
  auto* trace = state->trace.get();
  if (!trace) return;
  std::lock_guard lock(trace->mutex);
  auto& span = trace->process;
  if (!span.recording()) return;
  span.set_attribute("sluice.outcome", std::string(detail::to_string(outcome)));
  if (outcome == Outcome::reject) {
    span.set_attribute("sluice.reject.reason", reason);
    span.set_attribute("error.type", std::string("rejected"));
    span.set_error(reason);
  } else if (outcome == Outcome::retry) {
    span.set_attribute("error.type", std::string("retried"));
    span.set_error("failed: delivered again after a backoff");
  }
  span.end();
}

std::string trace_field(const detail::MessageState& state) {
  if (!state.trace) return {};
  std::lock_guard lock(state.trace->mutex);
  if (!state.trace->started) {
    if (!state.trace->producer.valid()) return {};
    return " trace_id=" + state.trace->producer.trace_id_hex();
  }
  return " trace_id=" + state.trace->process.context().trace_id_hex();
}

}  // namespace sluice::runtime
