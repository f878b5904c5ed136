#include "sqs/large_payload.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "common/crypto.hpp"
#include "runtime/async_wait.hpp"
#include "runtime/log_exceptions.hpp"
#include "sluice/aws/error.hpp"
#include "sqs/codec.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using spi::Delivery;

std::shared_ptr<void> ByteBudget::try_take(std::uint64_t n) {
  {
    std::lock_guard lock(mutex_);
    if (oversized_waiting_ > 0 || used_ > capacity_ || n > capacity_ - used_) return nullptr;
    used_ += n;
  }
  return reservation(n);
}

std::shared_ptr<void> ByteBudget::take(std::uint64_t n) {
  {
    std::unique_lock lock(mutex_);
    if (n <= capacity_) {
      freed_.wait(
          lock, [&] { return cancelled_ || (oversized_waiting_ == 0 && used_ <= capacity_ - n); });
    } else {
      ++oversized_waiting_;
      freed_.wait(lock, [&] { return cancelled_ || used_ == 0; });
      --oversized_waiting_;
    }
    if (cancelled_) return nullptr;
    used_ += n;
  }
  return reservation(n);
}

std::shared_ptr<void> ByteBudget::reservation(std::uint64_t n) {
  struct Reservation {
    Reservation(std::shared_ptr<ByteBudget> b, std::uint64_t n) : budget(std::move(b)), bytes(n) {}
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { budget->give(bytes); }
    std::shared_ptr<ByteBudget> budget;
    std::uint64_t bytes;
  };
  return std::make_shared<Reservation>(shared_from_this(), n);
}

void ByteBudget::give(std::uint64_t n) {
  {
    std::lock_guard lock(mutex_);
    used_ -= n;
  }
  freed_.notify_all();
}

void ByteBudget::cancel() {
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
  }
  freed_.notify_all();
}

std::uint64_t ByteBudget::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

namespace {

// The declared size: ExtendedPayloadSize, or the first Java client's attribute.
std::optional<std::uint64_t> declared_size(const Delivery& message, std::string& raw) {
  auto text = spi::header_of(message, kPayloadSizeAttribute);
  if (!text) text = spi::header_of(message, kLegacyPayloadSizeAttribute);
  if (!text) return std::nullopt;
  raw = std::string(*text);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), value);
  if (ec != std::errc{} || end != raw.data() + raw.size()) return std::nullopt;
  return value;
}

bool has_size_attribute(const Delivery& message) {
  return spi::header_of(message, kPayloadSizeAttribute) ||
         spi::header_of(message, kLegacyPayloadSizeAttribute);
}

void mark(const Delivery& state, bool retry, std::string reason, std::string detail) {
  spi::set_problem(state, retry, std::move(reason), std::move(detail));
}

}  // namespace

PayloadResolver::PayloadResolver(asio::any_io_executor executor, LargePayloadOptions options,
                                 Warn warn)
    : executor_(executor),
      options_(std::move(options)),
      warn_(std::move(warn)),
      budget_(std::make_shared<ByteBudget>(options_.max_bytes_in_flight)),
      deletes_(std::make_shared<Deletes>(executor)) {
  auto s3_options = options_.s3;
  s3_options.http.max_response_bytes =
      static_cast<std::size_t>(std::min<std::uint64_t>(options_.max_bytes_in_flight, SIZE_MAX));
  s3_ = std::make_shared<s3::S3Client>(executor, std::move(s3_options));
}

PayloadResolver::~PayloadResolver() = default;

PayloadStats PayloadResolver::stats() const {
  return {fetched_.load(), fetched_bytes_.load(), missing_.load(),
          failed_.load(),  waits_.load(),         deleted_.load()};
}

void PayloadResolver::prepare(std::span<const Delivery> unit) {
  std::vector<Delivery> states;
  std::vector<PayloadPointer> pointers;
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (auto& state : unit) {
    if (spi::has_problem(state) || !has_size_attribute(state) || !spi::queue_body_of(state).empty())
      continue;
    std::string raw_size;
    const auto size = declared_size(state, raw_size);
    auto pointer = parse_payload_pointer(spi::body_of(state));
    if (!pointer || !size) {
      mark(state, false, "malformed",
           !size ? "payload size attribute is not a byte count: '" + raw_size.substr(0, 40) + "'"
                 : "the message has a payload size attribute but its body is not an S3 pointer");
      continue;
    }
    if (*size == 0) {
      mark(state, false, "malformed",
           "payload size attribute is 0: an S3 pointer carries a payload");
      continue;
    }
    if (*size > budget_->capacity()) {
      mark(state, false, "payload_too_large",
           "s3://" + pointer->bucket + "/" + pointer->key + " is " + std::to_string(*size) +
               " bytes, more than source.sqs.large_payloads.max_bytes_in_flight (" +
               std::to_string(budget_->capacity()) + ")");
      continue;
    }
    states.push_back(state);
    pointers.push_back(std::move(*pointer));
    sizes.push_back(*size);
    total += *size;
  }
  if (states.empty()) return;
  // One reservation for the unit's declared sizes, taken while holding nothing: the
  // messages are held (and their leases extended) by the core meanwhile.
  auto reservation = budget_->try_take(total);
  auto stopped = [&] {
    for (auto& state : states)
      if (!spi::has_problem(state)) mark(state, true, "stopping", "stopped while fetching");
  };
  if (!reservation) {
    waits_.fetch_add(1, std::memory_order_relaxed);
    reservation = budget_->take(total);
    if (!reservation) return stopped();  // stopping: the core releases the unit
  }
  for (auto& state : states) spi::hold_with(state, reservation);
  reservation.reset();
  struct Fetched {
    bool done = false;
    std::exception_ptr error;
  };
  auto fetched = std::make_shared<Fetched>();
  asio::co_spawn(executor_, fetch_all(states, std::move(pointers), std::move(sizes)),
                 [fetched, wait = wait_](std::exception_ptr error) {
                   {
                     std::lock_guard lock(wait->mutex);
                     fetched->done = true;
                     fetched->error = error;
                   }
                   wait->changed.notify_all();
                 });
  // Stopping stops the executor too: never wait for a fetch past interrupt().
  std::unique_lock lock(wait_->mutex);
  wait_->changed.wait(lock, [&] { return fetched->done || wait_->stopping; });
  if (!fetched->done) {
    lock.unlock();
    return stopped();
  }
  if (fetched->error) std::rethrow_exception(fetched->error);
}

void PayloadResolver::interrupt() {
  {
    std::lock_guard lock(wait_->mutex);
    wait_->stopping = true;
  }
  wait_->changed.notify_all();
  budget_->cancel();
}

asio::awaitable<void> PayloadResolver::fetch_all(std::vector<Delivery> states,
                                                 std::vector<PayloadPointer> pointers,
                                                 std::vector<std::uint64_t> sizes) {
  std::vector<asio::awaitable<void>> fetches;
  for (std::size_t i = 0; i < states.size(); ++i)
    fetches.push_back(fetch(states[i], std::move(pointers[i]), sizes[i]));
  co_await runtime::run_all(executor_, std::move(fetches));
}

asio::awaitable<void> PayloadResolver::fetch(Delivery state, PayloadPointer pointer,
                                             std::uint64_t declared) {
  const std::string where = "s3://" + pointer.bucket + "/" + pointer.key;
  try {
    // Never more than it said it was: the reservation is its declared size.
    std::string payload =
        co_await s3_->get_object(pointer.bucket, pointer.key, static_cast<std::size_t>(declared));
    fetched_.fetch_add(1, std::memory_order_relaxed);
    fetched_bytes_.fetch_add(payload.size(), std::memory_order_relaxed);
    spi::replace_body(state, std::move(payload));
  } catch (const aws::AwsError& e) {
    spi::hold_with(state, nullptr);
    if (e.kind() == aws::ErrorKind::integrity && e.code().empty()) {
      mark(state, false, "malformed",
           where + " is larger than its " + std::string(kPayloadSizeAttribute) + " (" +
               std::to_string(declared) + " bytes)");
    } else {
      // A missing key or bucket, as S3 names them; anything else may pass (a bare 404
      // from a wrong endpoint, AccessDenied without s3:ListBucket, 5xx, throttling).
      const bool missing = e.code() == "NoSuchKey" || e.code() == "NoSuchBucket";
      (missing ? missing_ : failed_).fetch_add(1, std::memory_order_relaxed);
      mark(state, !missing, missing ? "payload_missing" : "payload_unavailable",
           where + ": " + e.what());
    }
  } catch (...) {
    spi::hold_with(state, nullptr);
    failed_.fetch_add(1, std::memory_order_relaxed);
    mark(state, true, "payload_unavailable", where + ": " + runtime::describe_current_exception());
  }
}

void PayloadResolver::delete_objects(std::vector<PayloadPointer> pointers) {
  for (auto& pointer : pointers) {
    deletes_->running.fetch_add(1);
    // Detached from the SQS deletes that made them due: never holds them up.
    asio::co_spawn(
        executor_,
        [](std::shared_ptr<s3::S3Client> s3, PayloadPointer p) -> asio::awaitable<void> {
          co_await s3->delete_object(p.bucket, p.key);
        }(s3_, pointer),
        [self = weak_from_this(), pointer, deletes = deletes_](std::exception_ptr error) {
          if (deletes->running.fetch_sub(1) == 1) deletes->done.notify();
          auto resolver = self.lock();
          if (!resolver) return;  // the source is gone (stopped)
          if (!error) {
            resolver->deleted_.fetch_add(1, std::memory_order_relaxed);
            return;
          }
          // The message is gone already: the object stays, which costs storage only.
          std::string why;
          try {
            std::rethrow_exception(error);
          } catch (...) {
            why = runtime::describe_current_exception();
          }
          if (resolver->warn_)
            resolver->warn_("payload s3://" + pointer.bucket + "/" + pointer.key +
                            " not deleted: " + why);
        });
  }
}

asio::awaitable<void> PayloadResolver::wait_for_deletes(std::chrono::milliseconds limit) {
  auto deletes = deletes_;
  co_await deletes->done.wait_until(std::chrono::steady_clock::now() + limit,
                                    [&] { return deletes->running.load() == 0; });
}

std::string random_uuid() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uint8_t bytes[16];
  for (int i = 0; i < 16; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(bytes + i, &v, 8);
  }
  bytes[6] = static_cast<std::uint8_t>((bytes[6] & 0x0f) | 0x40);  // version 4
  bytes[8] = static_cast<std::uint8_t>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  const std::string hex = crypto::hex(bytes, 16);
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20);
}

PayloadOffloader::PayloadOffloader(std::shared_ptr<SqsClient> sqs, std::string queue_url,
                                   LargePayloadOptions options)
    : sqs_(std::move(sqs)), queue_url_(std::move(queue_url)), options_(std::move(options)) {
  if (options_.bucket.empty())
    throw aws::AwsError(aws::ErrorKind::configuration,
                        "large payloads: no bucket to store bodies in (large_payloads.bucket)");
  if (options_.s3.region.empty()) options_.s3.region = sqs_->region();
}

asio::awaitable<std::size_t> PayloadOffloader::threshold() {
  if (options_.threshold > 0) co_return options_.threshold;
  {
    std::lock_guard lock(mutex_);
    if (threshold_ > 0) co_return threshold_;
  }
  std::size_t found = kMaxMessageBytes;  // SQS's default MaximumMessageSize since 2025
  std::vector<std::string> names;        // not braced inside co_await: GCC 12 mis-compiles it
  names.emplace_back("MaximumMessageSize");
  try {
    const auto attributes = co_await sqs_->get_queue_attributes(queue_url_, names);
    if (auto it = attributes.find("MaximumMessageSize"); it != attributes.end()) {
      std::size_t value = 0;
      const auto& text = it->second;
      if (std::from_chars(text.data(), text.data() + text.size(), value).ec == std::errc{} &&
          value > 0)
        found = value;
    }
  } catch (const aws::AwsError& e) {
    if (e.kind() == aws::ErrorKind::cancelled) throw;
  }
  std::lock_guard lock(mutex_);
  threshold_ = found;
  co_return found;
}

asio::awaitable<bool> PayloadOffloader::offload(SendMessageEntry& entry) {
  const std::size_t limit = co_await threshold();
  if (!options_.always_through_s3 && codec::message_size(entry) <= limit) co_return false;
  for (auto name : {kPayloadSizeAttribute, kLegacyPayloadSizeAttribute})
    if (entry.message_attributes.contains(std::string(name)))
      throw aws::AwsError(
          aws::ErrorKind::configuration,
          "large payloads: the message already has the reserved attribute " + std::string(name));
  if (entry.message_attributes.size() >= 10)
    throw aws::AwsError(aws::ErrorKind::configuration,
                        "large payloads: a message sent through S3 may carry at most 9 attributes "
                        "(ExtendedPayloadSize is the 10th)");
  const auto executor = co_await asio::this_coro::executor;
  std::shared_ptr<s3::S3Client> s3;
  {
    std::lock_guard lock(mutex_);
    if (!s3_) s3_ = std::make_shared<s3::S3Client>(executor, options_.s3);
    s3 = s3_;
  }
  const PayloadPointer pointer{options_.bucket, options_.key_prefix + random_uuid()};
  const std::size_t size = entry.body.size();
  // A copy: a failed store leaves the entry as it was, to be sent again.
  co_await s3->put_object(pointer.bucket, pointer.key, entry.body);
  entry.body = format_payload_pointer(pointer);
  entry.message_attributes.emplace(std::string(kPayloadSizeAttribute),
                                   MessageAttributeValue::number(std::to_string(size)));
  co_return true;
}

}  // namespace sluice::sqs
