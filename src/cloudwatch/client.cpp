#include "sluice/cloudwatch/client.hpp"

#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "aws/query_protocol.hpp"
#include "aws/service_client.hpp"
#include "aws/xml.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::cloudwatch {
namespace asio = boost::asio;
using aws::AwsError;
using aws::ErrorKind;
using Params = std::vector<std::pair<std::string, std::string>>;

std::string format_double(double value) {
  if (!std::isfinite(value))
    throw std::invalid_argument("a CloudWatch value must be a finite number");
  // The shortest digits that read back the same, laid out as Python's repr does:
  // positional for exponents -4 to 15, else d.ddde+XX.
  char buffer[64];
  const auto end =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific).ptr;
  std::string text(buffer, end);
  const auto e_at = text.find('e');
  const int exponent = std::stoi(text.substr(e_at + 1));
  if (exponent < -4 || exponent >= 16) return text;
  std::string sign, digits;
  for (char c : std::string_view(text).substr(0, e_at)) {
    if (c == '-')
      sign = "-";
    else if (c != '.')
      digits += c;
  }
  if (exponent < 0)
    return sign + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  const auto whole = static_cast<std::size_t>(exponent) + 1;
  if (digits.size() <= whole) return sign + digits + std::string(whole - digits.size(), '0') + ".0";
  return sign + digits.substr(0, whole) + "." + digits.substr(whole);
}

std::string format_timestamp(std::chrono::system_clock::time_point at) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(at);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

namespace {

constexpr const char* kVersion = "2010-08-01";

AwsError error_of(const aws::HttpResponse& response) {
  return aws::query_error(response, "CloudWatch");
}

Params action(const char* name) {
  return aws::query_action(name, kVersion);
}

void add_dimensions(Params& params, const std::string& prefix,
                    const std::vector<Dimension>& dimensions) {
  for (std::size_t i = 0; i < dimensions.size(); ++i) {
    const std::string at = prefix + "Dimensions.member." + std::to_string(i + 1) + ".";
    params.emplace_back(at + "Name", dimensions[i].name);
    params.emplace_back(at + "Value", dimensions[i].value);
  }
}

double parse_value(const std::string& text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size())
    throw AwsError(ErrorKind::integrity,
                   "CloudWatch GetMetricData answer has a value that is not a number: '" +
                       text.substr(0, 40) + "'",
                   "MalformedResponse");
  return value;
}

}  // namespace

struct CloudWatchClient::Impl {
  static aws::ServiceSettings settings(const CloudWatchClientOptions& options) {
    auto s = aws::service_settings("monitoring", "CloudWatch", options);
    s.service_id = "cloudwatch";
    return s;
  }
  Impl(asio::any_io_executor ex, CloudWatchClientOptions opts)
      : options(std::move(opts)), service(ex, settings(options)) {}

  asio::awaitable<aws::XmlElement> call(const char* name, const Params& params) {
    co_return co_await aws::query_call(service, params, error_of, name);
  }

  CloudWatchClientOptions options;
  aws::ServiceClient service;
};

CloudWatchClient::CloudWatchClient(asio::any_io_executor executor, CloudWatchClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}
CloudWatchClient::~CloudWatchClient() = default;

const std::string& CloudWatchClient::region() const {
  return impl_->service.region();
}

asio::awaitable<void> CloudWatchClient::put_metric_data(std::string metric_namespace,
                                                        std::vector<MetricDatum> data) {
  if (data.empty() || data.size() > 1000)
    throw AwsError(
        ErrorKind::configuration,
        "CloudWatch PutMetricData takes 1 to 1000 data, not " + std::to_string(data.size()),
        "InvalidParameterValue");
  Params params = action("PutMetricData");
  params.emplace_back("Namespace", metric_namespace);
  for (std::size_t i = 0; i < data.size(); ++i) {
    const std::string at = "MetricData.member." + std::to_string(i + 1) + ".";
    params.emplace_back(at + "MetricName", data[i].metric_name);
    add_dimensions(params, at, data[i].dimensions);
    params.emplace_back(at + "Value", format_double(data[i].value));
    if (!data[i].unit.empty()) params.emplace_back(at + "Unit", data[i].unit);
  }
  auto impl = impl_;
  co_await impl->call("PutMetricData", params);
}

asio::awaitable<std::vector<MetricSeries>> CloudWatchClient::get_metric_data(
    std::vector<MetricQuery> queries, std::chrono::system_clock::time_point start,
    std::chrono::system_clock::time_point end) {
  auto impl = impl_;
  std::vector<MetricSeries> series(queries.size());
  for (std::size_t i = 0; i < queries.size(); ++i) series[i].id = queries[i].id;
  std::string next_token;
  for (int page = 0; page < 100; ++page) {  // a bound against an answer that never ends
    Params params = action("GetMetricData");
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const MetricQuery& q = queries[i];
      const std::string at = "MetricDataQueries.member." + std::to_string(i + 1) + ".";
      params.emplace_back(at + "Id", q.id);
      params.emplace_back(at + "MetricStat.Metric.Namespace", q.metric_namespace);
      params.emplace_back(at + "MetricStat.Metric.MetricName", q.metric_name);
      add_dimensions(params, at + "MetricStat.Metric.", q.dimensions);
      params.emplace_back(at + "MetricStat.Period", std::to_string(q.period_seconds));
      params.emplace_back(at + "MetricStat.Stat", q.stat);
    }
    params.emplace_back("StartTime", format_timestamp(start));
    params.emplace_back("EndTime", format_timestamp(end));
    if (!next_token.empty()) params.emplace_back("NextToken", next_token);
    params.emplace_back("ScanBy", "TimestampAscending");
    const aws::XmlElement doc = co_await impl->call("GetMetricData", params);
    const aws::XmlElement* results = doc.find("MetricDataResults");
    if (!results)
      throw AwsError(ErrorKind::integrity,
                     "CloudWatch GetMetricData answer has no MetricDataResults",
                     "MalformedResponse");
    for (const auto& member : results->children) {
      const std::string id = member.child_text("Id");
      auto it = std::find_if(series.begin(), series.end(),
                             [&](const MetricSeries& s) { return s.id == id; });
      if (it == series.end()) continue;
      it->status_code = member.child_text("StatusCode");
      if (const aws::XmlElement* t = member.child("Timestamps"))
        for (const auto& m : t->children) it->timestamps.push_back(m.text);
      if (const aws::XmlElement* v = member.child("Values"))
        for (const auto& m : v->children) it->values.push_back(parse_value(m.text));
      if (it->timestamps.size() != it->values.size())
        throw AwsError(ErrorKind::integrity,
                       "CloudWatch GetMetricData answer has " +
                           std::to_string(it->timestamps.size()) + " timestamps and " +
                           std::to_string(it->values.size()) + " values for " + id,
                       "MalformedResponse");
    }
    next_token = doc.find("NextToken") ? doc.find("NextToken")->text : std::string();
    if (next_token.empty()) break;
  }
  co_return series;
}

}  // namespace sluice::cloudwatch
