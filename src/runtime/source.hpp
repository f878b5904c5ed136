#pragma once
// The source SPI (sluice/spi/source.hpp) as the core names it, with the message state
// behind a delivery.

#include "runtime/message_state.hpp"
#include "sluice/spi/source.hpp"

namespace sluice::runtime {

using spi::Source;
using spi::SourceCapabilities;
using spi::SourceContext;
using spi::SourceError;
using spi::SourceErrorKind;
using StatePtr = spi::Delivery;

}  // namespace sluice::runtime
