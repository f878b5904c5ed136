#pragma once
// The real container core with nothing of its own running: no I/O thread, no worker
// threads. The caller polls io() on its one thread, with a virtual clock installed
// (runtime/clock.hpp): the deterministic simulation (tests/sim) drives the core so,
// every schedule a function of its seed. Not part of the public interface, and no
// configuration reaches it.
#include <boost/asio/io_context.hpp>
#include <chrono>

#include "sluice/container.hpp"

namespace sluice::runtime {

class SimulatedContainer {
 public:
  SimulatedContainer(ContainerOptions options, SourceFactory source, BatchHandler handler);
  SimulatedContainer(ContainerOptions options, SourceFactory source, MessageHandler handler);
  ~SimulatedContainer();

  boost::asio::io_context& io();
  // Opens the source and starts receiving, as Container::start does, once io() runs;
  // worker_threads workers are coroutines on io().
  void start();
  // Container::stop's sequence, started now and run by io(): returns at once.
  void begin_stop(std::chrono::milliseconds deadline);
  bool stop_finished() const { return stop_finished_; }
  // The stop sequence threw (a source's flush or stop_preparing) instead of finishing.
  bool stop_failed() const { return stop_failed_; }
  // Handlers the stop left running (their messages unsettled), once it finished.
  int handlers_still_running() const { return still_running_; }
  ContainerStats stats() const { return container_.stats(); }
  int permits_available() const;

 private:
  Container container_;
  bool stop_finished_ = false;
  bool stop_failed_ = false;
  int still_running_ = 0;
};

}  // namespace sluice::runtime
