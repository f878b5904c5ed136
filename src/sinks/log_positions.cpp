#include "sinks/log_positions.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "runtime/message_state.hpp"

namespace sluice::sinks {

LogPositions::LogPositions(std::span<const BatchWriter::Item> items) {
  for (const auto& item : items) {
    const auto& state = detail::MessageAccess::state(item.message);
    if (!state || !state->origin || !state->origin->positions) continue;
    auto* positions = state->origin->positions.get();
    auto it = std::find_if(by_source_.begin(), by_source_.end(),
                           [&](const auto& entry) { return entry.first == positions; });
    if (it == by_source_.end()) it = by_source_.insert(by_source_.end(), {positions, {}});
    it->second.push_back(state);
  }
}

std::vector<PositionUpdate> LogPositions::done_with() const {
  std::vector<PositionUpdate> updates;
  for (const auto& [log, deliveries] : by_source_)
    if (auto position = log->done_with(deliveries)) updates.push_back(std::move(*position));
  return updates;
}

void LogPositions::written(const Sink& sink, const WriteResult& result) const {
  if (by_source_.empty()) return;
  const bool whole = std::ranges::all_of(result.outcomes, [](WriteOutcome o) {
    return o == WriteOutcome::inserted || o == WriteOutcome::duplicate;
  });
  if (!whole) {
    spdlog::error(
        "event=position_with_partial_batch sink={} detail=\"a sink that saves positions with "
        "its records left some of a batch unwritten: the position saved may be ahead of them\"",
        sink.describe());
    return;
  }
  for (const auto& [log, deliveries] : by_source_) {
    try {
      log->written(deliveries);
    } catch (const std::exception& e) {  // committed: never written again for this
      spdlog::warn("event=position_not_advanced sink={} error=\"{}\"", sink.describe(), e.what());
    }
  }
}

}  // namespace sluice::sinks
