#pragma once
// The positions of the sources that read a log, kept in the sink's database.
#include <functional>
#include <memory>

#include "sluice/driver/sink.hpp"
#include "sluice/position_store.hpp"

namespace sluice::sinks {

// A PositionStore in the sink's database: a connection of its own, made by `factory`
// at first use and made again after a failure. Calls are serialized.
std::shared_ptr<PositionStore> make_position_store(std::function<std::unique_ptr<Sink>()> factory);

}  // namespace sluice::sinks
