#include "sluice/registry.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <thread>

namespace sluice {

Container& ContainerRegistry::add(std::unique_ptr<Container> container) {
  containers_.push_back(std::move(container));
  return *containers_.back();
}

void ContainerRegistry::start_all() {
  for (auto& c : containers_) c->start();
}

void ContainerRegistry::stop_all(std::chrono::milliseconds deadline) {
  std::vector<std::thread> stoppers;
  for (auto& c : containers_) stoppers.emplace_back([&c, deadline] { c->stop(deadline); });
  for (auto& t : stoppers) t.join();
}

int ContainerRegistry::run_until_signal(std::chrono::milliseconds deadline) {
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  int received = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int number) {
    if (!ec) received = number;
  });
  start_all();
  io.run();
  spdlog::info("registry event=signal signal={} containers={}", received, containers_.size());
  stop_all(deadline);
  return received;
}

}  // namespace sluice
