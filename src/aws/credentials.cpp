#include "sluice/aws/credentials.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "aws/credentials_util.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::aws {
namespace asio = boost::asio;
using Clock = std::chrono::system_clock;

std::optional<Clock::time_point> parse_iso8601(std::string_view text) {
  std::tm tm{};
  const std::string copy(text);
  const char* rest = strptime(copy.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) return std::nullopt;
  long offset_seconds = 0;
  if (*rest == '.')
    while (*++rest >= '0' && *rest <= '9') {
    }
  if (*rest == '+' || *rest == '-') {
    int hh = 0, mm = 0;
    if (std::sscanf(rest + 1, "%2d:%2d", &hh, &mm) != 2) return std::nullopt;
    offset_seconds = (hh * 3600 + mm * 60) * (*rest == '+' ? 1 : -1);
  } else if (*rest != 'Z' && *rest != '\0') {
    return std::nullopt;
  }
  return Clock::from_time_t(timegm(&tm) - offset_seconds);
}

std::ostream& operator<<(std::ostream& out, const Credentials& credentials) {
  const std::string& id = credentials.access_key_id;
  out << "Credentials{provider=" << credentials.provider
      << ", access_key_id=" << (id.size() > 4 ? id.substr(0, 4) + "****" : std::string("****"))
      << ", secret=<redacted>" << (credentials.session_token.empty() ? "" : ", token=<redacted>")
      << "}";
  return out;
}

namespace {

class StaticProvider final : public CredentialsProvider {
 public:
  explicit StaticProvider(Credentials c) : credentials_(std::move(c)) {
    if (credentials_.provider.empty()) credentials_.provider = "static";
  }
  asio::awaitable<Credentials> get() override { co_return credentials_; }
  std::string name() const override { return "static"; }

 private:
  Credentials credentials_;
};

// Tries each provider in order; a provider that is not configured passes to the
// next, any other failure of a configured provider stops the chain (as the CLI does).
class ChainProvider final : public CredentialsProvider {
 public:
  explicit ChainProvider(std::vector<std::shared_ptr<CredentialsProvider>> providers)
      : providers_(std::move(providers)) {}

  asio::awaitable<Credentials> get() override {
    std::string tried;
    for (std::size_t i = 0; i < providers_.size(); ++i) {
      const auto& provider = providers_[i];
      const bool last = i + 1 == providers_.size();
      try {
        co_return co_await provider->get();
      } catch (const AwsError& e) {
        // The metadata service is the fallback of last resort: its absence just means
        // there is nothing to find, so it is reported with the others.
        if (e.code() != "NotConfigured" && !last) throw;
        tried += (tried.empty() ? "" : "; ") + provider->name() + ": " + e.what();
      }
    }
    throw AwsError(ErrorKind::credentials, "no AWS credentials found; tried " + tried);
  }
  std::string name() const override { return "default chain"; }

 private:
  std::vector<std::shared_ptr<CredentialsProvider>> providers_;
};

class CachingProvider final : public CredentialsProvider,
                              public std::enable_shared_from_this<CachingProvider> {
  using Channel = asio::experimental::concurrent_channel<void(boost::system::error_code)>;

 public:
  CachingProvider(std::shared_ptr<CredentialsProvider> inner, std::chrono::seconds refresh_before)
      : inner_(std::move(inner)), refresh_before_(refresh_before) {}

  asio::awaitable<Credentials> get() override {
    for (;;) {
      std::shared_ptr<Channel> wait_on;
      {
        std::unique_lock lock(mutex_);
        const auto now = Clock::now();
        const bool usable = cached_ && (!cached_->expiration || now < *cached_->expiration);
        const bool fresh =
            usable && (!cached_->expiration || now + refresh_before_ < *cached_->expiration);
        if (fresh) co_return *cached_;
        // A refresh that has not ended in kStuckAfter runs on an executor that stopped (a
        // client abandoned at its stop): the next caller refreshes instead.
        if (!refreshing_ || std::chrono::steady_clock::now() - refresh_started_ > kStuckAfter) {
          refreshing_ = true;
          refresh_started_ = std::chrono::steady_clock::now();
          break;  // this caller refreshes
        }
        if (usable) co_return *cached_;  // someone refreshes; the old ones still work
        wait_on = std::make_shared<Channel>(co_await asio::this_coro::executor, 1);
        waiters_.push_back(wait_on);
      }
      {
        // Whatever ends this wait (the answer, a cancellation, this executor's end), the
        // channel, which belongs to this executor, leaves the list with it.
        struct Leave {
          CachingProvider& self;
          const std::shared_ptr<Channel>& channel;
          ~Leave() {
            std::lock_guard lock(self.mutex_);
            std::erase(self.waiters_, channel);
          }
        } leave{*this, wait_on};
        asio::steady_timer stuck(co_await asio::this_coro::executor, kStuckAfter);
        auto [order, answered, timed_out] =
            co_await asio::experimental::make_parallel_group(wait_on->async_receive(asio::deferred),
                                                             stuck.async_wait(asio::deferred))
                .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
        if (order[0] == 1) continue;  // no answer in time: look again (and take it over)
      }
      std::lock_guard lock(mutex_);
      if (last_error_) std::rethrow_exception(last_error_);
      // Nothing usable: the refresh was abandoned; look again (and perhaps refresh).
      if (cached_ && (!cached_->expiration || Clock::now() < *cached_->expiration))
        co_return *cached_;
    }

    // A refresh whose executor goes away half-way (a short-lived client's io_context)
    // is destroyed at its co_await: the guard ends it for the waiters and the next caller.
    struct Unfinished {
      std::shared_ptr<CachingProvider> self;
      bool armed = true;
      ~Unfinished() {
        if (armed) self->finish_refresh(std::nullopt, nullptr);  // the waiters look again
      }
    } unfinished{shared_from_this()};
    std::exception_ptr error;
    std::optional<Credentials> fresh;
    bool cancelled = false;
    try {
      fresh = co_await inner_->get();
    } catch (const AwsError& e) {
      error = std::current_exception();
      cancelled = e.kind() == ErrorKind::cancelled;
    } catch (const boost::system::system_error&) {  // Asio's cancellation of this caller
      error = std::current_exception();
      cancelled = true;
    } catch (...) {
      error = std::current_exception();
    }
    unfinished.armed = false;
    // This caller's cancellation is its own: the waiters look again instead.
    finish_refresh(fresh, cancelled ? nullptr : error);
    if (error) std::rethrow_exception(error);
    co_return *fresh;
  }
  std::string name() const override { return inner_->name(); }

 private:
  // Under the lock, so that a waiter's channel is never signalled once its wait has
  // ended (it leaves the list under the same lock).
  void finish_refresh(const std::optional<Credentials>& fresh, std::exception_ptr error) {
    std::lock_guard lock(mutex_);
    refreshing_ = false;
    last_error_ = error;
    if (fresh) cached_ = fresh;
    ++refreshes_;
    for (auto& w : waiters_) w->try_send(boost::system::error_code{});
    waiters_.clear();
  }

  static constexpr std::chrono::seconds kStuckAfter{30};

  std::shared_ptr<CredentialsProvider> inner_;
  std::chrono::seconds refresh_before_;
  std::mutex mutex_;
  std::optional<Credentials> cached_;
  bool refreshing_ = false;
  std::chrono::steady_clock::time_point refresh_started_{};
  std::exception_ptr last_error_;
  std::vector<std::shared_ptr<Channel>> waiters_;
  std::uint64_t refreshes_ = 0;
};

}  // namespace

std::shared_ptr<CredentialsProvider> make_static_credentials(Credentials credentials) {
  return std::make_shared<StaticProvider>(std::move(credentials));
}

std::shared_ptr<CredentialsProvider> make_caching_credentials(
    std::shared_ptr<CredentialsProvider> inner, std::chrono::seconds refresh_before_expiry) {
  return std::make_shared<CachingProvider>(std::move(inner), refresh_before_expiry);
}

std::shared_ptr<CredentialsProvider> make_default_credentials_chain(
    CredentialsChainOptions options) {
  std::vector<std::shared_ptr<CredentialsProvider>> providers{
      make_environment_credentials(),       make_web_identity_credentials(),
      make_profile_credentials(),           make_container_credentials(),
      make_instance_metadata_credentials(),
  };
  return make_caching_credentials(std::make_shared<ChainProvider>(std::move(providers)),
                                  options.refresh_before_expiry);
}

std::shared_ptr<CredentialsProvider> default_credentials() {
  static const auto chain = make_default_credentials_chain();
  return chain;
}

}  // namespace sluice::aws
