#pragma once
// What every AWS service client shares: the region and endpoint resolved as the AWS
// CLI does, credentials, one HTTP pool, SigV4 with a fresh timestamp per attempt
// (corrected once for a skewed clock), and the standard retry mode. The service
// clients (SQS, S3, SNS) only encode requests and decode answers.

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/aws/credentials.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/aws/retry.hpp"
#include "sluice/aws/sigv4.hpp"

namespace sluice::aws {

struct ServiceSettings {
  std::string service;       // signing name and endpoint key: "sqs", "s3", "sns"
  std::string display_name;  // in errors: "SQS"
  std::string service_id;    // AWS_ENDPOINT_URL_<ID> when not the signing name ("cloudwatch")
  std::string region;        // empty: AWS_REGION, AWS_DEFAULT_REGION, profile
  std::string endpoint_url;  // empty: AWS_ENDPOINT_URL_<SERVICE>, AWS_ENDPOINT_URL, profile
  std::shared_ptr<CredentialsProvider> credentials;  // null: the process's default chain
  std::shared_ptr<ClockSkew> clock_skew;             // null: the process's
  RetryOptions retry;
  HttpClientOptions http;
  SigningOptions signing;  // region and service are filled in
};

// The settings every client's options carry (region, endpoint_url, credentials, retry,
// http), for the service `service` ("s3") named `display_name` ("S3") in errors.
template <class ClientOptions>
ServiceSettings service_settings(std::string service, std::string display_name,
                                 const ClientOptions& options, SigningOptions signing = {}) {
  ServiceSettings s;
  s.service = std::move(service);
  s.display_name = std::move(display_name);
  s.region = options.region;
  s.endpoint_url = options.endpoint_url;
  s.credentials = options.credentials;
  s.retry = options.retry;
  s.http = options.http;
  s.signing = std::move(signing);
  return s;
}

struct ServiceStats {
  std::uint64_t requests = 0;
  std::uint64_t retries = 0;
  std::uint64_t errors = 0;
};

// The error a failed response makes: throttling (429 or a throttling code), server
// (5xx or an internal code), otherwise client; the message names the service.
AwsError classify_response(const HttpResponse& response, std::string_view service_name,
                           std::string code, std::string_view message);

class ServiceClient {
 public:
  // Throws AwsError{configuration} when no region is found or the endpoint is malformed.
  ServiceClient(boost::asio::any_io_executor executor, ServiceSettings settings);

  // Signs and sends `request` (copied per attempt) until it gets a 2xx answer,
  // retrying what the standard mode retries. A non-2xx answer becomes the error
  // `error_of` makes of it (see classify_response); thrown once retries are spent.
  // (A function pointer, not a std::function: no temporary in the callers' co_await.)
  using ErrorOf = AwsError (*)(const HttpResponse&);
  boost::asio::awaitable<HttpResponse> send(const HttpRequest& request, ErrorOf error_of,
                                            std::string_view what);

  const std::string& region() const { return region_; }
  const Url& endpoint() const { return endpoint_; }
  HttpClient& http() { return http_; }
  ServiceStats stats() const;

 private:
  ServiceSettings settings_;
  HttpClient http_;
  RetryStrategy retry_;
  SigV4Signer signer_;
  std::string region_;
  Url endpoint_;
  std::shared_ptr<CredentialsProvider> credentials_;
  std::shared_ptr<ClockSkew> skew_;
  std::atomic<std::uint64_t> requests_{0}, retries_{0}, errors_{0};
};

}  // namespace sluice::aws
