#include "sluice/sns/client.hpp"

#include <boost/asio/use_awaitable.hpp>

#include "aws/query_protocol.hpp"
#include "aws/service_client.hpp"
#include "aws/xml.hpp"
#include "common/crypto.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::sns {
namespace asio = boost::asio;
using aws::AwsError;
using aws::ErrorKind;
using Params = std::vector<std::pair<std::string, std::string>>;

namespace {

constexpr const char* kVersion = "2010-03-31";

AwsError error_of(const aws::HttpResponse& response) {
  return aws::query_error(response, "SNS");
}

std::string required(const aws::XmlElement& doc, const char* name, const char* action) {
  const aws::XmlElement* e = doc.find(name);
  if (!e || e->text.empty())
    throw AwsError(ErrorKind::integrity, std::string("SNS ") + action + " answer has no " + name,
                   "MalformedResponse");
  return e->text;
}

void add_map(Params& params, const std::string& prefix,
             const std::map<std::string, std::string>& values) {
  int n = 0;
  for (const auto& [key, value] : values) {
    const std::string entry = prefix + ".entry." + std::to_string(++n);
    params.emplace_back(entry + ".key", key);
    params.emplace_back(entry + ".value", value);
  }
}

void add_entry(Params& params, const std::string& prefix, const PublishEntry& entry) {
  params.emplace_back(prefix + "Message", entry.message);
  if (!entry.subject.empty()) params.emplace_back(prefix + "Subject", entry.subject);
  if (!entry.message_group_id.empty())
    params.emplace_back(prefix + "MessageGroupId", entry.message_group_id);
  if (!entry.message_deduplication_id.empty())
    params.emplace_back(prefix + "MessageDeduplicationId", entry.message_deduplication_id);
  int n = 0;
  for (const auto& [name, attribute] : entry.attributes) {
    const std::string at = prefix + "MessageAttributes.entry." + std::to_string(++n);
    params.emplace_back(at + ".Name", name);
    params.emplace_back(at + ".Value.DataType", attribute.data_type);
    if (attribute.data_type.starts_with("Binary"))
      params.emplace_back(at + ".Value.BinaryValue", crypto::base64_encode(attribute.value));
    else
      params.emplace_back(at + ".Value.StringValue", attribute.value);
  }
}

Params action(const char* name) {
  return aws::query_action(name, kVersion);
}

}  // namespace

struct SnsClient::Impl {
  Impl(asio::any_io_executor ex, SnsClientOptions opts)
      : options(std::move(opts)), service(ex, aws::service_settings("sns", "SNS", options)) {}

  asio::awaitable<aws::XmlElement> call(const char* name, const Params& params) {
    co_return co_await aws::query_call(service, params, error_of, name);
  }

  SnsClientOptions options;
  aws::ServiceClient service;
};

SnsClient::SnsClient(asio::any_io_executor executor, SnsClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}
SnsClient::~SnsClient() = default;

const std::string& SnsClient::region() const {
  return impl_->service.region();
}

asio::awaitable<std::string> SnsClient::create_topic(
    std::string name, std::map<std::string, std::string> attributes) {
  Params params = action("CreateTopic");
  params.emplace_back("Name", name);
  add_map(params, "Attributes", attributes);
  auto impl = impl_;
  co_return required(co_await impl->call("CreateTopic", params), "TopicArn", "CreateTopic");
}

asio::awaitable<void> SnsClient::delete_topic(std::string topic_arn) {
  Params params = action("DeleteTopic");
  params.emplace_back("TopicArn", topic_arn);
  auto impl = impl_;
  co_await impl->call("DeleteTopic", params);
}

asio::awaitable<std::string> SnsClient::subscribe(std::string topic_arn, std::string protocol,
                                                  std::string endpoint,
                                                  std::map<std::string, std::string> attributes) {
  Params params = action("Subscribe");
  params.emplace_back("TopicArn", topic_arn);
  params.emplace_back("Protocol", protocol);
  params.emplace_back("Endpoint", endpoint);
  params.emplace_back("ReturnSubscriptionArn", "true");
  add_map(params, "Attributes", attributes);
  auto impl = impl_;
  co_return required(co_await impl->call("Subscribe", params), "SubscriptionArn", "Subscribe");
}

asio::awaitable<std::string> SnsClient::publish(std::string topic_arn, PublishEntry entry) {
  Params params = action("Publish");
  params.emplace_back("TopicArn", topic_arn);
  add_entry(params, "", entry);
  auto impl = impl_;
  co_return required(co_await impl->call("Publish", params), "MessageId", "Publish");
}

asio::awaitable<PublishBatchResult> SnsClient::publish_batch(std::string topic_arn,
                                                             std::vector<PublishEntry> entries) {
  if (entries.empty() || entries.size() > kMaxBatchEntries)
    throw AwsError(ErrorKind::configuration,
                   "SNS PublishBatch takes 1 to 10 entries, not " + std::to_string(entries.size()),
                   "TooManyEntriesInBatchRequest");
  Params params = action("PublishBatch");
  params.emplace_back("TopicArn", topic_arn);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string prefix = "PublishBatchRequestEntries.member." + std::to_string(i + 1) + ".";
    params.emplace_back(prefix + "Id", entries[i].id);
    add_entry(params, prefix, entries[i]);
  }
  auto impl = impl_;
  const aws::XmlElement doc = co_await impl->call("PublishBatch", params);
  PublishBatchResult result;
  const aws::XmlElement* body = doc.find("PublishBatchResult");
  if (!body)
    throw AwsError(ErrorKind::integrity, "SNS PublishBatch answer has no PublishBatchResult",
                   "MalformedResponse");
  if (const aws::XmlElement* ok = body->child("Successful"))
    for (const auto& m : ok->children)
      result.successful.push_back({m.child_text("Id"), m.child_text("MessageId")});
  if (const aws::XmlElement* failed = body->child("Failed"))
    for (const auto& m : failed->children)
      result.failed.push_back({m.child_text("Id"), m.child_text("Code"), m.child_text("Message"),
                               m.child_text("SenderFault") == "true"});
  co_return result;
}

}  // namespace sluice::sns
