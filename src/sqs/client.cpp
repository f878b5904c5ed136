#include "sluice/sqs/client.hpp"

#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "aws/service_client.hpp"
#include "sluice/aws/error.hpp"
#include "sqs/codec.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using aws::AwsError;
using aws::ErrorKind;
using nlohmann::json;

namespace {
// ApproximateReceiveCount, read one way for the copies and the views: 0 if it is not
// a number.
int receive_count_of(std::string_view text) {
  int count = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), count).ec != std::errc()) return 0;
  return count;
}
}  // namespace

int Message::receive_count() const {
  auto it = attributes.find("ApproximateReceiveCount");
  return it == attributes.end() ? 0 : receive_count_of(it->second);
}

std::optional<std::string> Message::group_id() const {
  auto it = attributes.find("MessageGroupId");
  if (it == attributes.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Message::sequence_number() const {
  auto it = attributes.find("SequenceNumber");
  if (it == attributes.end()) return std::nullopt;
  return it->second;
}

std::optional<std::chrono::system_clock::time_point> Message::sent_time() const {
  auto it = attributes.find("SentTimestamp");
  if (it == attributes.end()) return std::nullopt;
  try {
    return std::chrono::system_clock::time_point(std::chrono::milliseconds(std::stoll(it->second)));
  } catch (...) {
    return std::nullopt;
  }
}

namespace {
// Outside the coroutines: GCC 12 mis-compiles braced initializer lists inside them.
std::string encode_object(std::initializer_list<std::pair<const std::string, json>> fields) {
  json out = json::object();
  for (const auto& [key, value] : fields) out[key] = value;
  return out.dump();
}

std::string required_string(const std::string& body, const char* key, const char* action) {
  const json doc = json::parse(body, nullptr, false);
  if (doc.is_object())
    if (auto it = doc.find(key); it != doc.end() && it->is_string()) return it->get<std::string>();
  throw AwsError(ErrorKind::integrity, std::string(action) + " response has no " + key,
                 "MalformedResponse");
}
}  // namespace

struct SqsClient::Impl {
  Impl(asio::any_io_executor ex, SqsClientOptions opts)
      : options(std::move(opts)), service(ex, aws::service_settings("sqs", "SQS", options)) {}

  asio::awaitable<std::string> invoke(std::string_view action, std::string body) {
    aws::HttpRequest request;
    request.method = "POST";
    request.url = service.endpoint();
    request.headers.reserve(6);
    request.headers.emplace_back("Host", service.endpoint().host_header());
    request.headers.emplace_back("Content-Type", "application/x-amz-json-1.0");
    request.headers.emplace_back("X-Amz-Target", "AmazonSQS." + std::string(action));
    request.body = std::move(body);
    if (action == "ReceiveMessage") {
      // A long poll holds the connection for up to 20 s: give it that much more.
      request.timeout = options.http.request_timeout + std::chrono::seconds(kMaxWaitTimeSeconds);
    }
    aws::HttpResponse response = co_await service.send(request, error_of, action);
    // A success with no body is an empty answer, as botocore and the AWS SDKs read it
    // (local-aws-sqs answers an empty receive so); a body that is not JSON stays an error.
    if (response.body.empty()) co_return "{}";
    co_return std::move(response.body);
  }

  static AwsError error_of(const aws::HttpResponse& response) {
    auto error =
        codec::decode_error(response.body, response.header("x-amzn-query-error").value_or(""));
    return aws::classify_response(response, "SQS", std::move(error.code), error.message);
  }

  SqsClientOptions options;
  aws::ServiceClient service;
};

SqsClient::SqsClient(asio::any_io_executor executor, SqsClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}
SqsClient::~SqsClient() = default;

const std::string& SqsClient::region() const {
  return impl_->service.region();
}
const aws::Url& SqsClient::endpoint() const {
  return impl_->service.endpoint();
}
aws::HttpClient& SqsClient::http() {
  return impl_->service.http();
}
SqsClientStats SqsClient::stats() const {
  const auto s = impl_->service.stats();
  return {s.requests, s.retries, s.errors};
}

std::optional<std::string_view> MessageView::attribute(std::string_view name) const {
  for (const auto& [key, value] : attributes)
    if (key == name) return value;
  return std::nullopt;
}

int MessageView::receive_count() const {
  const auto text = attribute("ApproximateReceiveCount");
  return text ? receive_count_of(*text) : 0;
}

Message MessageView::to_message() const {
  Message m{std::string(message_id),
            std::string(receipt_handle),
            std::string(body),
            std::string(md5_of_body),
            std::string(md5_of_message_attributes),
            {},
            message_attributes};
  for (const auto& [key, value] : attributes) m.attributes.emplace(key, value);
  return m;
}

asio::awaitable<std::vector<Message>> SqsClient::receive_message(ReceiveMessageRequest request) {
  codec::validate(request);
  auto impl = impl_;
  const std::string body = co_await impl->invoke("ReceiveMessage", codec::encode_receive(request));
  co_return codec::decode_receive(body, impl->options.verify_md5);
}

asio::awaitable<std::size_t> SqsClient::receive_message(
    ReceiveMessageRequest request, std::function<void(const MessageView&)> each) {
  if (!each) throw std::invalid_argument("receive_message: expected a callback, got an empty one");
  codec::validate(request);
  auto impl = impl_;
  const std::string body = co_await impl->invoke("ReceiveMessage", codec::encode_receive(request));
  co_return codec::decode_receive(body, impl->options.verify_md5, each);
}

asio::awaitable<void> SqsClient::delete_message(std::string queue_url, std::string receipt_handle) {
  auto impl = impl_;
  std::string body = encode_object({{"QueueUrl", queue_url}, {"ReceiptHandle", receipt_handle}});
  co_await impl->invoke("DeleteMessage", std::move(body));
}

asio::awaitable<BatchResult> SqsClient::delete_message_batch(
    std::string queue_url, std::vector<DeleteMessageEntry> entries) {
  codec::validate_batch(entries);
  auto impl = impl_;
  co_return codec::decode_batch(
      co_await impl->invoke("DeleteMessageBatch", codec::encode_delete_batch(queue_url, entries)));
}

asio::awaitable<void> SqsClient::change_message_visibility(std::string queue_url,
                                                           std::string receipt_handle,
                                                           int visibility_timeout) {
  auto impl = impl_;
  std::string body = encode_object({{"QueueUrl", queue_url},
                                    {"ReceiptHandle", receipt_handle},
                                    {"VisibilityTimeout", visibility_timeout}});
  co_await impl->invoke("ChangeMessageVisibility", std::move(body));
}

asio::awaitable<BatchResult> SqsClient::change_message_visibility_batch(
    std::string queue_url, std::vector<ChangeVisibilityEntry> entries) {
  codec::validate_batch(entries);
  auto impl = impl_;
  co_return codec::decode_batch(co_await impl->invoke(
      "ChangeMessageVisibilityBatch", codec::encode_change_visibility_batch(queue_url, entries)));
}

asio::awaitable<SendMessageResult> SqsClient::send_message(std::string queue_url,
                                                           SendMessageEntry entry) {
  codec::validate_send(entry, false);
  auto impl = impl_;
  const std::string body =
      co_await impl->invoke("SendMessage", codec::encode_send(queue_url, entry));
  co_return codec::decode_send(body, entry, impl->options.verify_md5);
}

asio::awaitable<BatchResult> SqsClient::send_message_batch(std::string queue_url,
                                                           std::vector<SendMessageEntry> entries) {
  codec::validate_send_batch(entries);
  auto impl = impl_;
  const std::string body =
      co_await impl->invoke("SendMessageBatch", codec::encode_send_batch(queue_url, entries));
  co_return codec::decode_send_batch(body, entries, impl->options.verify_md5);
}

asio::awaitable<std::string> SqsClient::get_queue_url(std::string queue_name,
                                                      std::string owner_account_id) {
  json request = json::object();
  request["QueueName"] = queue_name;
  if (!owner_account_id.empty()) request["QueueOwnerAWSAccountId"] = owner_account_id;
  auto impl = impl_;
  co_return required_string(co_await impl->invoke("GetQueueUrl", request.dump()), "QueueUrl",
                            "GetQueueUrl");
}

asio::awaitable<QueueAttributes> SqsClient::get_queue_attributes(std::string queue_url,
                                                                 std::vector<std::string> names) {
  auto impl = impl_;
  std::string request = encode_object({{"QueueUrl", queue_url}, {"AttributeNames", names}});
  const std::string body = co_await impl->invoke("GetQueueAttributes", std::move(request));
  const json doc = json::parse(body, nullptr, false);
  if (!doc.is_object())
    throw AwsError(ErrorKind::integrity, "GetQueueAttributes response is not JSON",
                   "MalformedResponse");
  QueueAttributes out;
  if (auto it = doc.find("Attributes"); it != doc.end() && it->is_object())
    for (const auto& [k, v] : it->items())
      out.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
  co_return out;
}

asio::awaitable<QueueAttributes> SqsClient::get_queue_attributes(std::string queue_url) {
  return get_queue_attributes(std::move(queue_url), std::vector<std::string>{"All"});
}

asio::awaitable<std::string> SqsClient::create_queue(std::string queue_name,
                                                     QueueAttributes attributes) {
  json request = json::object();
  request["QueueName"] = queue_name;
  if (!attributes.empty()) request["Attributes"] = attributes;
  auto impl = impl_;
  co_return required_string(co_await impl->invoke("CreateQueue", request.dump()), "QueueUrl",
                            "CreateQueue");
}

asio::awaitable<void> SqsClient::delete_queue(std::string queue_url) {
  auto impl = impl_;
  std::string body = encode_object({{"QueueUrl", queue_url}});
  co_await impl->invoke("DeleteQueue", std::move(body));
}

asio::awaitable<void> SqsClient::purge_queue(std::string queue_url) {
  auto impl = impl_;
  std::string body = encode_object({{"QueueUrl", queue_url}});
  co_await impl->invoke("PurgeQueue", std::move(body));
}

asio::awaitable<std::string> SqsClient::start_message_move_task(std::string source_arn,
                                                                std::string destination_arn,
                                                                int max_per_second) {
  auto impl = impl_;
  json request = json::object();
  request["SourceArn"] = source_arn;
  if (!destination_arn.empty()) request["DestinationArn"] = destination_arn;
  if (max_per_second > 0) request["MaxNumberOfMessagesPerSecond"] = max_per_second;
  const std::string answer = co_await impl->invoke("StartMessageMoveTask", request.dump());
  const auto doc = json::parse(answer, nullptr, false);
  co_return doc.is_object() ? doc.value("TaskHandle", std::string()) : std::string();
}

asio::awaitable<std::vector<MessageMoveTask>> SqsClient::list_message_move_tasks(
    std::string source_arn) {
  auto impl = impl_;
  json request = json::object();
  request["SourceArn"] = source_arn;
  const json doc =
      json::parse(co_await impl->invoke("ListMessageMoveTasks", request.dump()), nullptr, false);
  if (!doc.is_object())
    throw AwsError(ErrorKind::integrity, "ListMessageMoveTasks response is not JSON",
                   "MalformedResponse");
  std::vector<MessageMoveTask> tasks;
  if (auto it = doc.find("Results"); it != doc.end() && it->is_array())
    for (const auto& r : *it) {
      if (!r.is_object()) continue;
      MessageMoveTask task;
      task.status = r.value("Status", std::string());
      if (auto m = r.find("ApproximateNumberOfMessagesMoved"); m != r.end() && m->is_number())
        task.moved = m->get<std::int64_t>();
      if (auto m = r.find("ApproximateNumberOfMessagesToMove"); m != r.end() && m->is_number())
        task.to_move = m->get<std::int64_t>();
      task.failure_reason = r.value("FailureReason", std::string());
      tasks.push_back(std::move(task));
    }
  co_return tasks;
}

asio::awaitable<std::vector<std::string>> SqsClient::list_queues(std::string name_prefix) {
  auto impl = impl_;
  std::vector<std::string> urls;
  std::string next_token;
  do {
    json request = json::object();
    request["MaxResults"] = 1000;
    if (!name_prefix.empty()) request["QueueNamePrefix"] = name_prefix;
    if (!next_token.empty()) request["NextToken"] = next_token;
    const json doc =
        json::parse(co_await impl->invoke("ListQueues", request.dump()), nullptr, false);
    if (!doc.is_object())
      throw AwsError(ErrorKind::integrity, "ListQueues response is not JSON", "MalformedResponse");
    if (auto it = doc.find("QueueUrls"); it != doc.end() && it->is_array())
      for (const auto& u : *it)
        if (u.is_string()) urls.push_back(u.get<std::string>());
    next_token.clear();
    if (auto it = doc.find("NextToken"); it != doc.end() && it->is_string()) next_token = *it;
  } while (!next_token.empty());
  co_return urls;
}

}  // namespace sluice::sqs
