#pragma once
// Amazon CloudWatch over its query protocol, signed with SigV4 (signing name
// "monitoring"): publishing a custom metric (PutMetricData, for ECS target tracking)
// and reading one-minute statistics (GetMetricData, for the autoscale signal in AWS).
// Errors are aws::AwsError with CloudWatch's code.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sluice/aws/credentials.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/aws/retry.hpp"

namespace sluice::cloudwatch {

struct CloudWatchClientOptions {
  std::string region;        // empty: AWS_REGION, AWS_DEFAULT_REGION, profile
  std::string endpoint_url;  // empty: AWS_ENDPOINT_URL_CLOUDWATCH, AWS_ENDPOINT_URL, profile
  std::shared_ptr<aws::CredentialsProvider> credentials;  // null: the default chain
  aws::RetryOptions retry;
  aws::HttpClientOptions http;
};

struct Dimension {
  std::string name;
  std::string value;
};

struct MetricDatum {
  std::string metric_name;
  std::vector<Dimension> dimensions;
  double value = 0;
  std::string unit;  // "Percent", "Count", ...; empty: none sent
};

// One statistic of one metric, e.g. AWS/SQS ApproximateNumberOfMessagesNotVisible,
// Average over 60 s.
struct MetricQuery {
  std::string id;  // starts with a lower-case letter
  std::string metric_namespace;
  std::string metric_name;
  std::vector<Dimension> dimensions;
  int period_seconds = 60;
  std::string stat = "Average";
};

struct MetricSeries {
  std::string id;
  std::vector<std::string> timestamps;  // ISO 8601, oldest first
  std::vector<double> values;           // one per timestamp
  std::string status_code;              // Complete, PartialData, ...
};

class CloudWatchClient {
 public:
  // Throws AwsError{configuration} (no region, a malformed endpoint).
  CloudWatchClient(boost::asio::any_io_executor executor, CloudWatchClientOptions options = {});
  ~CloudWatchClient();

  // At most 1000 data; values must be finite.
  boost::asio::awaitable<void> put_metric_data(std::string metric_namespace,
                                               std::vector<MetricDatum> data);
  // Every page of the answer, series in the order of `queries`, points oldest first.
  boost::asio::awaitable<std::vector<MetricSeries>> get_metric_data(
      std::vector<MetricQuery> queries, std::chrono::system_clock::time_point start,
      std::chrono::system_clock::time_point end);

  const std::string& region() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A double as the AWS SDKs for Python put it in a query request: the shortest text
// that reads back the same ("90.0", "0.1", "1e+16"). Throws std::invalid_argument
// for NaN and infinities (CloudWatch refuses them).
std::string format_double(double value);
// "2026-11-30T10:00:00Z": whole seconds, UTC.
std::string format_timestamp(std::chrono::system_clock::time_point at);

}  // namespace sluice::cloudwatch
