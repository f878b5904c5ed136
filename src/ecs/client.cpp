#include "sluice/ecs/client.hpp"

#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "aws/service_client.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::ecs {
namespace asio = boost::asio;
using aws::AwsError;
using aws::ErrorKind;

namespace {

// The body as the AWS SDK for Python writes it (json.dumps: ", " and ": ", non-ASCII
// escaped), so that both send the same bytes.
std::string json_string(const std::string& value) {
  return nlohmann::json(value).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

AwsError error_of(const aws::HttpResponse& response) {
  std::string code, message;
  try {
    const auto body = nlohmann::json::parse(response.body);
    code = body.value("__type", "");
    if (const auto hash = code.rfind('#'); hash != std::string::npos) code.erase(0, hash + 1);
    message = body.value("message", body.value("Message", ""));
  } catch (const nlohmann::json::exception&) {
  }
  return aws::classify_response(response, "ECS", std::move(code), message);
}

}  // namespace

struct EcsClient::Impl {
  Impl(asio::any_io_executor ex, EcsClientOptions opts)
      : options(std::move(opts)), service(ex, aws::service_settings("ecs", "ECS", options)) {}

  asio::awaitable<nlohmann::json> call(const char* action, std::string body) {
    aws::HttpRequest request;
    request.method = "POST";
    request.url = service.endpoint();
    request.headers.emplace_back("Host", service.endpoint().host_header());
    request.headers.emplace_back("Content-Type", "application/x-amz-json-1.1");
    request.headers.emplace_back("X-Amz-Target",
                                 std::string("AmazonEC2ContainerServiceV20141113.") + action);
    request.body = std::move(body);
    auto response = co_await service.send(request, error_of, action);
    try {
      co_return nlohmann::json::parse(response.body);
    } catch (const nlohmann::json::exception&) {
      throw AwsError(ErrorKind::integrity, std::string("ECS ") + action + " answer is not JSON",
                     "MalformedResponse");
    }
  }

  EcsClientOptions options;
  aws::ServiceClient service;
};

EcsClient::EcsClient(asio::any_io_executor executor, EcsClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}
EcsClient::~EcsClient() = default;

const std::string& EcsClient::region() const {
  return impl_->service.region();
}

asio::awaitable<DescribeServicesResult> EcsClient::describe_services(
    std::string cluster, std::vector<std::string> services) {
  if (services.empty() || services.size() > 10)
    throw AwsError(
        ErrorKind::configuration,
        "ECS DescribeServices takes 1 to 10 services, not " + std::to_string(services.size()),
        "InvalidParameterException");
  std::string body = "{";
  if (!cluster.empty()) body += "\"cluster\": " + json_string(cluster) + ", ";
  body += "\"services\": [";
  for (std::size_t i = 0; i < services.size(); ++i)
    body += (i ? ", " : "") + json_string(services[i]);
  body += "]}";
  auto impl = impl_;
  const nlohmann::json answer = co_await impl->call("DescribeServices", std::move(body));
  DescribeServicesResult result;
  try {
    for (const auto& s : answer.value("services", nlohmann::json::array()))
      result.services.push_back({s.value("serviceName", ""), s.value("serviceArn", ""),
                                 s.value("status", ""), s.value("desiredCount", 0L),
                                 s.value("runningCount", 0L), s.value("pendingCount", 0L)});
    for (const auto& f : answer.value("failures", nlohmann::json::array()))
      result.failures.push_back({f.value("arn", ""), f.value("reason", ""), f.value("detail", "")});
  } catch (const nlohmann::json::exception& e) {
    throw AwsError(ErrorKind::integrity,
                   std::string("ECS DescribeServices answer is not what was expected: ") + e.what(),
                   "MalformedResponse");
  }
  co_return result;
}

}  // namespace sluice::ecs
