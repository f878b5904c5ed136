#include "aws/service_client.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>

#include "sluice/aws/config.hpp"

namespace sluice::aws {
namespace asio = boost::asio;

AwsError classify_response(const HttpResponse& response, std::string_view service_name,
                           std::string code, std::string_view message) {
  const std::string request_id =
      std::string(response.header("x-amzn-RequestId")
                      .value_or(response.header("x-amz-request-id").value_or("")));
  std::string text = std::string(service_name) + " error HTTP " + std::to_string(response.status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + std::string(message);
  ErrorKind kind = ErrorKind::client;
  if (response.status == 429 || is_throttling_code(code) || code == "RequestThrottled" ||
      code == "KmsThrottled" || code == "SlowDown")
    kind = ErrorKind::throttling;
  else if (response.status >= 500 || code == "ServiceUnavailable" || code == "InternalError" ||
           code == "InternalFailure")
    kind = ErrorKind::server;
  return AwsError(kind, std::move(text), std::move(code), response.status, request_id);
}

namespace {
SigV4Signer make_signer(const ServiceSettings& settings, const std::string& region) {
  SigningOptions signing = settings.signing;
  signing.region = region;
  signing.service = settings.service;
  return SigV4Signer(std::move(signing));
}

std::string resolve_region_or_throw(const ServiceSettings& settings) {
  auto region = region_from_environment(settings.region);
  if (!region)
    throw AwsError(ErrorKind::configuration,
                   "no AWS region configured for " + settings.display_name +
                       "; tried the explicit setting, AWS_REGION, AWS_DEFAULT_REGION and the "
                       "profile '" +
                       load_profile().name + "'");
  return *region;
}
}  // namespace

ServiceClient::ServiceClient(asio::any_io_executor executor, ServiceSettings settings)
    : settings_(std::move(settings)),
      http_(executor, settings_.http),
      retry_(settings_.retry),
      signer_(SigningOptions{}),
      region_(resolve_region_or_throw(settings_)),
      endpoint_(resolve_endpoint(settings_.service, region_, settings_.endpoint_url,
                                 settings_.service_id)),
      credentials_(settings_.credentials ? settings_.credentials : default_credentials()),
      skew_(settings_.clock_skew ? settings_.clock_skew : process_clock_skew()) {
  signer_ = make_signer(settings_, region_);
}

ServiceStats ServiceClient::stats() const {
  return {requests_.load(), retries_.load(), errors_.load()};
}

asio::awaitable<HttpResponse> ServiceClient::send(const HttpRequest& prototype, ErrorOf error_of,
                                                  std::string_view what) {
  bool skew_retried = false;
  for (int attempt = 1;; ++attempt) {
    HttpRequest request = prototype;
    const Credentials credentials = co_await credentials_->get();
    const auto signed_with = skew_->offset();
    signer_.sign(request, credentials, skew_->now());
    requests_.fetch_add(1, std::memory_order_relaxed);

    std::optional<AwsError> failure;
    try {
      HttpResponse response = co_await http_.send(std::move(request));
      if (response.status >= 200 && response.status < 300) {
        retry_.on_success(attempt > 1);
        co_return response;
      }
      failure = error_of(response);
      if (is_clock_skew_code(failure->code()) && !skew_retried) {
        // Retried once the offset is corrected, by this answer or (the tracker is the
        // process's) by another client's since this request was signed.
        const auto date = response.header("Date");
        const bool corrected = date && skew_->observe(*date, std::chrono::system_clock::now());
        if (corrected || skew_->offset() != signed_with) {
          skew_retried = true;
          --attempt;  // a corrected clock is a new first attempt
          continue;
        }
      }
    } catch (const AwsError& e) {
      failure = e;
    }
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (failure->kind() == ErrorKind::cancelled) throw *failure;
    const auto delay = retry_.on_failure(*failure, attempt);
    if (!delay) throw *failure;
    retries_.fetch_add(1, std::memory_order_relaxed);
    asio::steady_timer timer(co_await asio::this_coro::executor, *delay);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec)
      throw AwsError(ErrorKind::cancelled, settings_.display_name + " " + std::string(what) +
                                               " cancelled during retry backoff");
  }
}

}  // namespace sluice::aws
