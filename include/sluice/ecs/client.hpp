#pragma once
// Amazon ECS over its JSON 1.1 protocol, signed with SigV4: DescribeServices, for the
// number of tasks a service runs (the autoscale signal's denominator).
// Errors are aws::AwsError with ECS's code (ClusterNotFoundException, ...).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

#include "sluice/aws/credentials.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/aws/retry.hpp"

namespace sluice::ecs {

struct EcsClientOptions {
  std::string region;        // empty: AWS_REGION, AWS_DEFAULT_REGION, profile
  std::string endpoint_url;  // empty: AWS_ENDPOINT_URL_ECS, AWS_ENDPOINT_URL, profile
  std::shared_ptr<aws::CredentialsProvider> credentials;  // null: the default chain
  aws::RetryOptions retry;
  aws::HttpClientOptions http;
};

struct Service {
  std::string name;
  std::string arn;
  std::string status;  // ACTIVE, DRAINING, INACTIVE
  long desired_count = 0;
  long running_count = 0;
  long pending_count = 0;
};

struct Failure {
  std::string arn;
  std::string reason;  // MISSING, ...
  std::string detail;
};

struct DescribeServicesResult {
  std::vector<Service> services;
  std::vector<Failure> failures;
};

class EcsClient {
 public:
  // Throws AwsError{configuration} (no region, a malformed endpoint).
  EcsClient(boost::asio::any_io_executor executor, EcsClientOptions options = {});
  ~EcsClient();

  // 1 to 10 services (names or ARNs) of one cluster (empty: the default cluster).
  boost::asio::awaitable<DescribeServicesResult> describe_services(
      std::string cluster, std::vector<std::string> services);

  const std::string& region() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::ecs
