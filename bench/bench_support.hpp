#pragma once
// Shared by the benchmarks: filling a queue, and the emulator's ceiling.
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/run.hpp"

namespace sluice::bench {

// A new queue holding `bodies`, sent in batches; returns its URL.
// A new queue holding `bodies`; with fifo_groups > 0, a FIFO queue whose message i
// belongs to group i % fifo_groups.
inline std::string fill_queue(boost::asio::io_context& io,
                              const std::shared_ptr<sqs::SqsClient>& client,
                              const std::string& prefix, const std::vector<std::string>& bodies,
                              int fifo_groups = 0) {
  const std::string name = test::unique_queue_name(prefix) + (fifo_groups ? ".fifo" : "");
  sqs::QueueAttributes attributes;
  if (fifo_groups) attributes["FifoQueue"] = "true";
  test::run(io, client->create_queue(name, attributes));
  const std::string url = test::Emulator::shared().queue_url(name);
  sqs::Publisher publisher(client, url);
  for (std::size_t start = 0; start < bodies.size(); start += 1000) {
    std::vector<sqs::SendMessageEntry> entries;
    for (std::size_t i = start; i < std::min(bodies.size(), start + 1000); ++i) {
      sqs::SendMessageEntry entry;
      entry.body = bodies[i];
      if (fifo_groups) {
        entry.message_group_id = "g" + std::to_string(i % static_cast<std::size_t>(fifo_groups));
        entry.message_deduplication_id = std::to_string(i);
      }
      entries.push_back(std::move(entry));
    }
    test::run(io, publisher.send_batch(std::move(entries)));
  }
  return url;
}

struct Drain {
  double messages_per_second = 0;
  double cpu_us_per_message = 0;
  double requests_per_1000 = 0;  // ReceiveMessage and DeleteMessageBatch calls
};

// The emulator's ceiling: `loops` overlapping receive loops asking what the
// container asks for (10 messages, all attributes), each batch deleted without
// waiting, no processing.
inline Drain ceiling(boost::asio::io_context& io, const std::shared_ptr<sqs::SqsClient>& client,
                     const std::string& url, int count, int loops) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> received{0}, deleted{0}, requests{0};
  Clock::time_point finished{};
  const double cpu0 = test::cpu_seconds();
  const auto start = Clock::now();
  for (int i = 0; i < loops; ++i)
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
          while (received.load() < count) {
            sqs::ReceiveMessageRequest r;
            r.queue_url = url;
            r.wait_time_seconds = 1;
            r.visibility_timeout = 30;
            ++requests;
            // The client's cheapest receive, as the container's: views, no copies.
            std::vector<sqs::DeleteMessageEntry> deletes;
            std::function<void(const sqs::MessageView&)> collect = [&](const sqs::MessageView& m) {
              deletes.push_back({std::to_string(deletes.size()), std::string(m.receipt_handle)});
            };
            co_await client->receive_message(r, std::move(collect));
            if (deletes.empty()) continue;
            ++requests;
            received += static_cast<int>(deletes.size());
            boost::asio::co_spawn(io, client->delete_message_batch(url, std::move(deletes)),
                                  [&](std::exception_ptr, sqs::BatchResult result) {
                                    deleted += static_cast<int>(result.successful.size());
                                    if (deleted.load() >= count && finished == Clock::time_point{})
                                      finished = Clock::now();
                                  });
          }
        },
        boost::asio::detached);
  io.restart();
  io.run();  // also waits out the idle long polls of the other loops: not counted
  const double seconds = std::chrono::duration<double>(finished - start).count();
  return {count / seconds, (test::cpu_seconds() - cpu0) / count * 1e6,
          requests.load() * 1000.0 / count};
}

}  // namespace sluice::bench
