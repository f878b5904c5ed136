#pragma once
// The heartbeat: for an extendable source (SQS visibility), extends the lease of
// every held message that would run out within half a lease, every interval, so
// that a slow handler never has its message delivered a second time meanwhile.
//
// Threads: the I/O thread.
#include <boost/asio/awaitable.hpp>
#include "runtime/clock.hpp"
#include <chrono>

#include "runtime/async_wait.hpp"
#include "runtime/core.hpp"

namespace sluice::runtime {

class Settlement;

class Heartbeat {
 public:
  Heartbeat(Core& core, Settlement& settlement);
  // Once the source is open, when the options and the source allow it.
  void start();
  // No more rounds; drain() waits for the one in flight (its extends) to end.
  void close();
  boost::asio::awaitable<bool> drain(CoreClock::time_point deadline);

 private:
  boost::asio::awaitable<void> run(std::chrono::milliseconds interval);
  Core& core_;
  Settlement& settlement_;
  CoreTimer timer_;
  bool closed_ = false;
  bool running_ = false;  // its loop has not ended
  AsyncCondition ended_;
};

}  // namespace sluice::runtime
