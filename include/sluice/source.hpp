#pragma once
// Where a container's messages come from. A source is made by its factory
// (sluice::make_sqs_source, ...) and handed to the container, which opens it on
// start and drives it from then on; the container itself knows no queue. A source of
// your own implements sluice/spi/source.hpp.

#include <functional>
#include <memory>

namespace sluice {

namespace spi {
class Source;
struct SourceContext;
}  // namespace spi

using SourceFactory =
    std::function<std::unique_ptr<spi::Source>(const spi::SourceContext& context)>;

}  // namespace sluice
