#pragma once
// Messages through the container and the batch writers into a real database, from the
// in-process source (support/fake_source.hpp) returning up to 10 messages of a group
// per receive as SQS FIFO does (the emulator returns one): the FIFO tests' and the
// FIFO benchmark's common path. Bodies are "g<group>:<seq>", sent in blocks of 10 of a
// group; a record's identity is (group, seq).
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline/transform.hpp"
#include "sinks/writer.hpp"
#include "sluice/container.hpp"
#include "support/fake_source.hpp"
#include "support/wait.hpp"

namespace sluice::test {

struct OrderedDrainOptions {
  int groups = 20;
  int per_group = 300;  // a multiple of 10
  bool grouped = true;  // false: the same messages without group ids (a standard queue)
  bool runs = true;     // ContainerOptions::ordered_group_runs
  int writers = 4;
  std::size_t batch_size = 50;
  int max_attempts = 1;
  std::chrono::seconds timeout{120};
};

struct OrderedDrain {
  bool drained = false;
  std::chrono::duration<double> took{};        // from start() until every message is settled
  int longest_run = 0;                         // the most messages of one group in one handler call
  std::vector<std::vector<std::string>> runs;  // each handler call's messages of one group
  std::vector<std::string> retried, released, rejected;
};

inline OrderedDrain drain_ordered(const sinks::BatchWriter::SinkFactory& factory,
                                  const OrderedDrainOptions& o) {
  using namespace std::chrono_literals;
  auto queue = std::make_shared<FakeQueue>();
  queue->ordered_groups = true;
  queue->fifo = true;
  for (int block = 0; block < o.per_group; block += 10)
    for (int g = 0; g < o.groups; ++g)
      for (int seq = block; seq < block + 10; ++seq) {
        const std::string group = "g" + std::to_string(g);
        queue->push(group + ":" + std::to_string(seq),
                    o.grouped ? std::optional<std::string>(group) : std::nullopt);
      }
  sinks::WriterOptions writer_options;
  writer_options.writers = o.writers;
  writer_options.max_attempts = o.max_attempts;
  writer_options.batch_size = o.batch_size;
  sinks::BatchWriter writer(factory, writer_options, {});
  writer.start();
  ContainerOptions options;
  options.name = "ordered-drain";
  options.listener_mode = ListenerMode::batch;
  options.ack_mode = AckMode::manual;
  options.ordered_group_runs = o.runs;
  options.max_in_flight = 200;
  options.max_concurrent_receives = 4;
  options.worker_threads = 4;
  options.failure_backoff_base = 0ms;
  options.failure_backoff_max = 0ms;
  OrderedDrain outcome;
  std::mutex mutex;
  Container container(options, fake_source(queue), BatchHandler([&](std::span<Message> batch) {
                        std::vector<sinks::BatchWriter::Item> items;
                        std::map<std::string, std::vector<std::string>> per_group;
                        for (auto& message : batch) {
                          const std::string body(message.body());
                          const auto colon = body.find(':');
                          const std::string group = body.substr(0, colon);
                          const int seq = std::stoi(body.substr(colon + 1));
                          per_group[group].push_back(body);
                          pipeline::Record record;
                          record.hash = pipeline::content_hash("V1", {group, seq});
                          record.message_id = body;
                          record.document["group"] = group;
                          record.document["seq"] = seq;
                          record.document["documentHash"] = record.hash;
                          items.push_back({std::move(record), message});
                        }
                        std::lock_guard lock(mutex);
                        for (auto& [group, run] : per_group) {
                          outcome.longest_run =
                              std::max(outcome.longest_run, static_cast<int>(run.size()));
                          outcome.runs.push_back(std::move(run));
                        }
                        writer.submit_all(std::move(items));
                      }));
  const auto total = static_cast<std::size_t>(o.groups) * static_cast<std::size_t>(o.per_group);
  const auto started = std::chrono::steady_clock::now();
  container.start();
  outcome.drained = wait_until(
      [&] {
        std::lock_guard lock(queue->mutex);
        return queue->ready.empty() && container.stats().in_flight == 0 &&
               queue->acked.size() + queue->rejected.size() >= total;
      },
      o.timeout);
  outcome.took = std::chrono::steady_clock::now() - started;
  container.stop();
  writer.stop();
  std::lock_guard lock(queue->mutex);
  outcome.retried = queue->retried;
  outcome.released = queue->released;
  outcome.rejected = queue->rejected;
  return outcome;
}

}  // namespace sluice::test
