#pragma once
// The SQS source of the listener container; internal.

#include <boost/asio/any_io_executor.hpp>
#include <memory>

#include "runtime/source.hpp"
#include "sluice/container.hpp"

namespace sluice::sqs {

std::unique_ptr<runtime::Source> make_sqs_source(boost::asio::any_io_executor executor,
                                                 SqsSourceOptions source,
                                                 const ContainerOptions& options,
                                                 runtime::SourceEvents events, bool fifo);

}  // namespace sluice::sqs
