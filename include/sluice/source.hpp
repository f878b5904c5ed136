#pragma once
// Where a container's messages come from. A source is made by its factory
// (sluice::make_sqs_source, ...) and handed to the container, which opens it on
// start and drives it from then on; the container itself knows no queue.

#include <functional>
#include <memory>

namespace sluice {

namespace runtime {
class Source;
struct SourceContext;
}  // namespace runtime

using SourceFactory =
    std::function<std::unique_ptr<runtime::Source>(const runtime::SourceContext& context)>;

}  // namespace sluice
