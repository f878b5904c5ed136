// A source of this distribution's own: `count` inventory events made in process, every
// `malformed_every`-th of them not JSON (rejected by the pipeline, kept in the rejects
// table). A retried or released event is handed out again; the probe reports what is
// left, so `my-sluice run --until-drained` ends once every event is settled.
// Only the installed driver SPI is used (sluice/driver/).
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <deque>
#include <mutex>
#include <sluice/driver/source_driver.hpp>
#include <sluice/spi/source.hpp>
#include <string>
#include <thread>

namespace my {
namespace {
namespace asio = boost::asio;
namespace spi = sluice::spi;
using namespace sluice::driver;
using sluice::config::Value;

// What the source has settled, read by the probe.
struct Progress {
  std::atomic<long> left{-1};      // not yet settled (acked or rejected)
  std::atomic<long> in_flight{0};  // handed out, not yet settled
};

struct CounterSettings : SourceSettings {
  long long count = 1000;
  long long malformed_every = 0;  // 0: none
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
};

class CounterSource final : public spi::Source {
 public:
  CounterSource(const CounterSettings& settings, const spi::SourceContext& context)
      : count_(settings.count),
        malformed_every_(settings.malformed_every),
        progress_(settings.progress),
        executor_(context.executor) {
    progress_->left = static_cast<long>(count_);
  }

  asio::awaitable<void> open() override { co_return; }
  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.max_batch = 100;
    return c;
  }

  asio::awaitable<std::vector<spi::Delivery>> receive(int max) override {
    std::vector<spi::Delivery> out;
    {
      std::lock_guard lock(mutex_);
      while (static_cast<int>(out.size()) < max && (!again_.empty() || next_ < count_)) {
        long long n = next_;
        if (!again_.empty()) {
          n = again_.front();
          again_.pop_front();
        } else {
          ++next_;
        }
        const auto text = std::to_string(n);
        const bool malformed = malformed_every_ > 0 && n % malformed_every_ == malformed_every_ - 1;
        out.push_back(builder_.id("counter-" + text)
                          .receipt(text)
                          .body(malformed ? "not json " + text
                                          : "{\"n\":" + text + ",\"sku\":\"SKU-" +
                                                std::to_string(n % 50) +
                                                "\",\"qty\":" + std::to_string(n % 7) + "}")
                          .build());
      }
    }
    progress_->in_flight += static_cast<long>(out.size());
    if (out.empty()) {  // nothing left: wait a little, as a long poll would
      asio::steady_timer idle(executor_, std::chrono::milliseconds(50));
      auto [ec] = co_await idle.async_wait(asio::as_tuple(asio::use_awaitable));
      if (ec) throw spi::SourceError(spi::SourceErrorKind::cancelled, "", "receive cancelled");
    }
    co_return out;
  }

  void ack(const spi::Delivery&) override { settled(); }
  void retry(const spi::Delivery& delivery, std::chrono::milliseconds) override { again(delivery); }
  void release(const spi::Delivery& delivery) override { again(delivery); }
  asio::awaitable<bool> reject(spi::Delivery, std::string) override {
    settled();
    co_return false;  // no dead-letter queue of its own: the rejects table keeps it
  }
  asio::awaitable<void> flush() override { co_return; }
  std::string describe() const override { return "counter of " + std::to_string(count_); }
  std::string message_source() const override { return "counter"; }

 private:
  void settled() {
    --progress_->in_flight;
    --progress_->left;
  }
  void again(const spi::Delivery& delivery) {
    const auto receipt = spi::receipt_of(delivery);
    long long n = 0;
    std::from_chars(receipt.data(), receipt.data() + receipt.size(), n);
    --progress_->in_flight;
    std::lock_guard lock(mutex_);
    again_.push_back(n);
  }

  const long long count_, malformed_every_;
  std::shared_ptr<Progress> progress_;
  asio::any_io_executor executor_;
  std::mutex mutex_;
  long long next_ = 0;
  std::deque<long long> again_;
  spi::DeliveryBuilder builder_;
};

// Reads the source's progress for the backlog gauge and --until-drained.
class CounterProbe final : public QueueProbe {
 public:
  explicit CounterProbe(std::shared_ptr<Progress> progress) : progress_(std::move(progress)) {}
  ~CounterProbe() override { stop(); }
  int check_at_start(bool, const std::function<bool()>&) override { return 0; }
  void start(QueueCounts& counts) override {
    thread_ = std::thread([this, &counts] {
      while (!stopping_) {
        if (const long left = progress_->left; left >= 0) {
          const long in_flight = progress_->in_flight;
          counts.ready = left - in_flight;
          counts.in_flight = in_flight;
          counts.read_at_ns = std::chrono::steady_clock::now().time_since_epoch().count();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  void stop() override {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::shared_ptr<Progress> progress_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

class CounterDriver final : public DriverOf<CounterSettings> {
 public:
  std::string_view name() const override { return "counter"; }
  std::string_view doc() const override {
    return "Inventory events made in process (an example of a source driver built outside "
           "Sluice's tree).";
  }
  const std::vector<SourceOption>& options() const override {
    using S = CounterSettings;
    using namespace sluice::config;
    static const std::vector<SourceOption> rows = {
        option<S>("count", "integer", "1000", "How many events.",
                  [](S& s, const Value& v, const std::string& k) {
                    s.count = as_int(v, k, 0, 1'000'000'000);
                  }),
        option<S>("malformed_every", "integer", "0",
                  "Every N-th event is not JSON (rejected as malformed); 0: none.",
                  [](S& s, const Value& v, const std::string& k) {
                    s.malformed_every = as_int(v, k, 0, 1'000'000'000);
                  }),
    };
    return rows;
  }
  void finalize(SourceSettings&, PipelineSettings&) const override {}
  sluice::SourceFactory factory(const SourceSettings& settings) const override {
    return [s = of(settings)](const spi::SourceContext& context) {
      return std::unique_ptr<spi::Source>(std::make_unique<CounterSource>(s, context));
    };
  }
  std::unique_ptr<QueueProbe> probe(const SourceSettings& settings) const override {
    return std::make_unique<CounterProbe>(of(settings).progress);
  }
  const std::vector<SourceFigure>& figures() const override {
    static const std::vector<SourceFigure> none;
    return none;
  }
  bool dead_letters(const SourceSettings&) const override { return false; }
  std::string describe(const SourceSettings& settings,
                       const sluice::ContainerOptions&) const override {
    return "counter of " + std::to_string(of(settings).count) + " events";
  }
  std::string queue_name(const SourceSettings&) const override { return "counter"; }
};

}  // namespace

const SourceDriver& counter_source_driver() {
  static const CounterDriver driver;
  return driver;
}

}  // namespace my
