#pragma once
// Runs many queues' containers together and ties them to the process lifecycle (a
// listener-container registry): start them all, stop them all on SIGTERM/SIGINT.

#include <chrono>
#include <memory>
#include <vector>

#include "sluice/container.hpp"

namespace sluice {

class ContainerRegistry {
 public:
  Container& add(std::unique_ptr<Container> container);
  void start_all();
  // Stops every container in parallel, each with the same deadline.
  void stop_all(std::chrono::milliseconds deadline);
  // Starts everything, blocks until SIGTERM or SIGINT, then stops everything with
  // `deadline`. Returns the signal number received.
  int run_until_signal(std::chrono::milliseconds deadline);
  const std::vector<std::unique_ptr<Container>>& containers() const { return containers_; }

 private:
  std::vector<std::unique_ptr<Container>> containers_;
};

}  // namespace sluice
