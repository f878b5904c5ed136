#pragma once
// EC2 instance metadata service, version 2 (session token first); internal.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "sluice/aws/http.hpp"

namespace sluice::aws::imds {

bool disabled();  // AWS_EC2_METADATA_DISABLED=true
// AWS_EC2_METADATA_SERVICE_ENDPOINT or http://169.254.169.254
Url endpoint();

struct Options {
  std::chrono::milliseconds timeout{1000};
  int attempts = 2;
};

class Client {
 public:
  Client(boost::asio::any_io_executor executor, Options options);
  // GET a metadata path with a fresh (or cached) session token; throws AwsError.
  boost::asio::awaitable<std::string> get(const std::string& path);

 private:
  boost::asio::awaitable<std::string> token();
  std::shared_ptr<HttpClient> http_;
  Options options_;
  Url endpoint_;
  std::string token_;
  std::chrono::steady_clock::time_point token_expiry_{};
};

}  // namespace sluice::aws::imds
