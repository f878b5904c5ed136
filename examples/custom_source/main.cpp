// A source of your own: it generates N messages in process, a container consumes
// them, and every one must be acked exactly once. Every 100th message fails its first
// delivery, so the retry path runs too. Only the installed headers are used: the
// source SPI (sluice/spi/source.hpp) and the container.
// Usage: custom_source [N]   (exit 0 when all N were acked once each)
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <set>
#include <sluice/container.hpp>
#include <sluice/spi/source.hpp>
#include <stdexcept>
#include <string>

namespace asio = boost::asio;
namespace spi = sluice::spi;
using namespace std::chrono_literals;

// What the source saw settled, read by main().
struct Tally {
  std::mutex mutex;
  std::condition_variable changed;
  std::set<int> acked;  // distinct numbers
  int acks = 0, retries = 0, releases = 0, rejects = 0;
};

class CountingSource final : public spi::Source {
 public:
  CountingSource(int total, std::shared_ptr<Tally> tally, const spi::SourceContext& context)
      : total_(total), tally_(std::move(tally)), executor_(context.executor) {}

  asio::awaitable<void> open() override { co_return; }

  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.max_batch = 10;
    return c;
  }

  // Several receive loops may be waiting here at once, on the container's I/O thread.
  asio::awaitable<std::vector<spi::Delivery>> receive(int max) override {
    std::vector<spi::Delivery> out;
    {
      std::lock_guard lock(mutex_);
      const auto now = std::chrono::steady_clock::now();
      while (static_cast<int>(out.size()) < max) {
        int n = 0, count = 1;
        if (!again_.empty() && again_.front().due <= now) {
          n = again_.front().n;
          count = again_.front().count;
          again_.pop_front();
        } else if (next_ < total_) {
          n = next_++;
        } else {
          break;
        }
        const auto text = std::to_string(n);
        out.push_back(builder_.id("m-" + text)
                          .receipt(text)
                          .body("{\"n\":" + text + "}")
                          .receive_count(count)
                          .build());
      }
    }
    if (out.empty()) {  // nothing due: wait a little, as a long poll would
      asio::steady_timer idle(executor_, 20ms);
      auto [ec] = co_await idle.async_wait(asio::as_tuple(asio::use_awaitable));
      if (ec) throw spi::SourceError(spi::SourceErrorKind::cancelled, "", "receive cancelled");
    }
    co_return out;
  }

  void ack(const spi::Delivery& delivery) override {
    const int n = number(delivery);
    std::lock_guard lock(tally_->mutex);
    tally_->acked.insert(n);
    ++tally_->acks;
    tally_->changed.notify_all();
  }
  void retry(const spi::Delivery& delivery, std::chrono::milliseconds backoff) override {
    again(delivery, std::chrono::steady_clock::now() + backoff, true);
  }
  void release(const spi::Delivery& delivery) override {
    again(delivery, std::chrono::steady_clock::now(), false);
  }
  asio::awaitable<bool> reject(spi::Delivery, std::string reason) override {
    std::cerr << "custom_source: rejected: " << reason << "\n";
    std::lock_guard lock(tally_->mutex);
    ++tally_->rejects;
    co_return true;  // a generator has no dead-letter queue: counted and dropped
  }
  asio::awaitable<void> flush() override { co_return; }  // nothing is batched
  std::string describe() const override { return "counting source of " + std::to_string(total_); }
  std::string message_source() const override { return "counting"; }

 private:
  static int number(const spi::Delivery& delivery) {
    const auto receipt = spi::receipt_of(delivery);
    int n = -1;
    std::from_chars(receipt.data(), receipt.data() + receipt.size(), n);
    return n;
  }
  void again(const spi::Delivery& delivery, std::chrono::steady_clock::time_point due,
             bool failed) {
    {
      std::lock_guard lock(tally_->mutex);
      ++(failed ? tally_->retries : tally_->releases);
    }
    std::lock_guard lock(mutex_);
    const int count = spi::receive_count_of(delivery) + (failed ? 1 : 0);
    auto at = again_.begin();
    while (at != again_.end() && at->due <= due) ++at;
    again_.insert(at, Again{number(delivery), count, due});
  }

  struct Again {
    int n;
    int count;
    std::chrono::steady_clock::time_point due;
  };
  const int total_;
  std::shared_ptr<Tally> tally_;
  asio::any_io_executor executor_;
  std::mutex mutex_;  // guards what follows
  int next_ = 0;
  std::deque<Again> again_;  // in due order
  spi::DeliveryBuilder builder_;
};

// A whole number of messages, at least 1, and nothing after it.
bool parse_count(const char* text, int& count) {
  const char* end = text + std::strlen(text);
  const auto [at, error] = std::from_chars(text, end, count);
  return error == std::errc{} && at == end && count >= 1;
}

int main(int argc, char** argv) {
  int total = 1000;
  if (argc > 2 || (argc == 2 && !parse_count(argv[1], total))) {
    std::cerr << "usage: " << argv[0] << " [N]   (N: how many messages, at least 1)\n";
    return 2;
  }
  auto tally = std::make_shared<Tally>();
  sluice::ContainerOptions options;
  options.name = "custom";
  options.worker_threads = 4;
  options.failure_backoff_base = 10ms;  // the failed ones come back quickly
  options.failure_backoff_max = 100ms;
  sluice::parse_concurrency("1-4", options);

  sluice::SourceFactory factory = [total, tally](const spi::SourceContext& context) {
    return std::unique_ptr<spi::Source>(std::make_unique<CountingSource>(total, tally, context));
  };
  auto handler = [](sluice::Message& message) {
    const auto& body = message.body();  // {"n":123}
    const int n = std::stoi(body.substr(5));
    if (n % 100 == 0 && message.receive_count() == 1)
      throw std::runtime_error("fails once");  // nacked: delivered again after a backoff
  };
  sluice::Container container(options, factory, handler);
  container.start();
  {
    std::unique_lock lock(tally->mutex);
    tally->changed.wait_for(lock, 60s,
                            [&] { return static_cast<int>(tally->acked.size()) == total; });
  }
  container.stop();
  std::lock_guard lock(tally->mutex);
  std::cout << "custom_source: acked " << tally->acked.size() << " of " << total << " ("
            << tally->acks << " acks, " << tally->retries << " retried, " << tally->releases
            << " released, " << tally->rejects << " rejected)\n";
  return static_cast<int>(tally->acked.size()) == total && tally->acks == total ? 0 : 1;
}
