#pragma once
// The SQS source's side of large payloads: resolving S3 pointers on receive within
// a byte budget, and deleting objects after their messages (src/sqs/sqs_source.cpp).

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "runtime/async_wait.hpp"
#include "sluice/spi/source.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/large_payload.hpp"

namespace sluice::sqs {

// Bytes held by fetched payloads; a reservation is returned when the last message
// holding it is destroyed. Thread-safe.
class ByteBudget : public std::enable_shared_from_this<ByteBudget> {
 public:
  explicit ByteBudget(std::uint64_t capacity) : capacity_(capacity) {}
  // A reservation of n bytes, or null when they do not fit now.
  std::shared_ptr<void> try_take(std::uint64_t n);
  // Waits until n bytes fit, then takes them. More than the whole capacity waits
  // until nothing else is held (taking nothing new meanwhile: no starvation) and is
  // then held alone. Callers hold nothing while they wait, so waiters cannot deadlock.
  std::shared_ptr<void> take(std::uint64_t n);
  std::uint64_t used() const;
  std::uint64_t capacity() const { return capacity_; }
  // take() calls waiting now, and later, return null.
  void cancel();

 private:
  std::shared_ptr<void> reservation(std::uint64_t n);
  void give(std::uint64_t n);
  const std::uint64_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::uint64_t used_ = 0;
  int oversized_waiting_ = 0;
  bool cancelled_ = false;
};

struct PayloadStats {
  std::uint64_t fetched = 0;
  std::uint64_t fetched_bytes = 0;
  std::uint64_t missing = 0;
  std::uint64_t failed = 0;  // transient: the message is retried
  std::uint64_t waits = 0;   // units that waited for room in the budget
  std::uint64_t deleted = 0;
};

class PayloadResolver : public std::enable_shared_from_this<PayloadResolver> {
 public:
  using Warn = std::function<void(const std::string&)>;
  PayloadResolver(boost::asio::any_io_executor executor, LargePayloadOptions options, Warn warn);
  ~PayloadResolver();

  // On a worker thread (blocks): replaces the pointers in `unit` by their payloads,
  // fetched concurrently on the executor once the unit's declared sizes fit the
  // budget. Messages whose payload cannot be had get a problem: missing, too large
  // or malformed -> reject; an S3 failure -> retry.
  void prepare(std::span<const spi::Delivery> unit);
  // After their messages were deleted (delete_after_ack): deletes the objects in the
  // background; wait_for_deletes() (on stop) waits up to `limit` for them.
  void delete_objects(std::vector<PayloadPointer> pointers);
  boost::asio::awaitable<void> wait_for_deletes(std::chrono::milliseconds limit);

  // Stopping: prepare() calls waiting for room or for fetches return at once.
  void interrupt();
  bool delete_after_ack() const { return options_.delete_after_ack; }
  PayloadStats stats() const;
  std::uint64_t bytes_held() const { return budget_->used(); }

 private:
  boost::asio::awaitable<void> fetch_all(std::vector<spi::Delivery> states,
                                         std::vector<PayloadPointer> pointers,
                                         std::vector<std::uint64_t> sizes);
  boost::asio::awaitable<void> fetch(spi::Delivery state, PayloadPointer pointer,
                                     std::uint64_t declared);
  boost::asio::any_io_executor executor_;
  LargePayloadOptions options_;
  Warn warn_;
  std::shared_ptr<s3::S3Client> s3_;
  std::shared_ptr<ByteBudget> budget_;
  std::atomic<std::uint64_t> fetched_{0}, fetched_bytes_{0}, missing_{0}, failed_{0}, waits_{0},
      deleted_{0};
  // prepare() waits on it for its fetches or for interrupt(); shared with the fetches'
  // completions, which may come after this resolver is gone.
  struct Wait {
    std::mutex mutex;
    std::condition_variable changed;
    bool stopping = false;
  };
  std::shared_ptr<Wait> wait_ = std::make_shared<Wait>();
  // Object deletes in the background; shared with their completions.
  struct Deletes {
    explicit Deletes(boost::asio::any_io_executor executor) : done(std::move(executor)) {}
    std::atomic<int> running{0};
    runtime::AsyncCondition done;  // notified when running falls to 0
  };
  std::shared_ptr<Deletes> deletes_;
};

// The publisher's side: bodies over the threshold are stored in S3 and sent as a
// pointer, exactly as the Java extended client sends them.
class PayloadOffloader {
 public:
  PayloadOffloader(std::shared_ptr<SqsClient> sqs, std::string queue_url,
                   LargePayloadOptions options);
  // Stores the body and makes the entry a pointer when it is over the threshold;
  // returns whether it did. Throws AwsError (S3's, or configuration: no bucket, an
  // ExtendedPayloadSize attribute already set, too many attributes).
  boost::asio::awaitable<bool> offload(SendMessageEntry& entry);
  // The threshold in force (the queue's MaximumMessageSize when not configured).
  boost::asio::awaitable<std::size_t> threshold();

 private:
  std::shared_ptr<SqsClient> sqs_;
  std::string queue_url_;
  LargePayloadOptions options_;
  std::mutex mutex_;
  std::shared_ptr<s3::S3Client> s3_;  // made on first use, on the caller's executor
  std::size_t threshold_ = 0;
};

// A random (version 4) UUID, the extended clients' object key.
std::string random_uuid();

}  // namespace sluice::sqs
