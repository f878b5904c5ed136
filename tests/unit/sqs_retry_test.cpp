// The SQS client's retry, throttling and clock-skew handling, against a loopback
// server that misbehaves on purpose.
#include <gtest/gtest.h>

#include <atomic>

#include "common/crypto.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/sigv4.hpp"
#include "sluice/container.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/source.hpp"
#include "sqs/large_payload.hpp"
#include "support/http_server.hpp"
#include "support/run.hpp"
#include "support/wait.hpp"

namespace asio = boost::asio;
using namespace sluice;
using namespace std::chrono_literals;
using test::HttpServer;
using test::ServerRequest;
using test::ServerResponse;

namespace {
std::shared_ptr<sqs::SqsClient> client_for(asio::io_context& io, const HttpServer& server) {
  sqs::SqsClientOptions options;
  options.endpoint_url = server.url();
  options.region = "us-east-1";
  options.credentials = aws::make_static_credentials({"AKIDTEST", "secret", "", {}, "test"});
  options.retry.base_delay = 1ms;
  options.retry.throttling_base_delay = 1ms;
  options.http.use_env_proxy = false;
  return std::make_shared<sqs::SqsClient>(io.get_executor(), options);
}
ServerResponse sqs_error(int status, const std::string& type) {
  return {status,
          {{"Content-Type", "application/x-amz-json-1.0"}},
          R"({"__type":"com.amazonaws.sqs#)" + type + R"(","message":"injected"})"};
}
const std::string kEmptyReceive = R"({"Messages":[]})";
}  // namespace

TEST(SqsRetry, ServerErrorsAreRetriedThenSucceed) {
  std::atomic<int> calls{0};
  HttpServer server([&](const ServerRequest&) {
    return ++calls <= 2 ? sqs_error(500, "InternalError") : ServerResponse{200, {}, kEmptyReceive};
  });
  asio::io_context io;
  auto client = client_for(io, server);
  sqs::ReceiveMessageRequest r;
  r.queue_url = "http://q";
  EXPECT_TRUE(test::run(io, client->receive_message(r)).empty());
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(client->stats().retries, 2u);
}

TEST(SqsRetry, GivesUpAfterMaxAttempts) {
  std::atomic<int> calls{0};
  HttpServer server([&](const ServerRequest&) {
    ++calls;
    return sqs_error(503, "ServiceUnavailable");
  });
  asio::io_context io;
  auto client = client_for(io, server);
  try {
    test::run(io, client->purge_queue("http://q"));
    FAIL();
  } catch (const aws::AwsError& e) {
    EXPECT_EQ(e.kind(), aws::ErrorKind::server);
    EXPECT_EQ(e.http_status(), 503);
  }
  EXPECT_EQ(calls.load(), 3);
}

TEST(SqsRetry, ThrottlingIsRetriedAndClientErrorsAreNot) {
  std::atomic<int> calls{0};
  HttpServer server([&](const ServerRequest& r) {
    ++calls;
    if (r.body.find("throttle-me") != std::string::npos && calls == 1)
      return sqs_error(400, "ThrottlingException");
    if (r.body.find("throttle-me") != std::string::npos)
      return ServerResponse{200, {}, kEmptyReceive};
    return sqs_error(400, "InvalidParameterValue");
  });
  asio::io_context io;
  auto client = client_for(io, server);
  sqs::ReceiveMessageRequest r;
  r.queue_url = "http://throttle-me";
  EXPECT_NO_THROW(test::run(io, client->receive_message(r)));
  EXPECT_EQ(calls.load(), 2);
  calls = 0;
  EXPECT_THROW(test::run(io, client->purge_queue("http://other")), aws::AwsError);
  EXPECT_EQ(calls.load(), 1) << "a client error is final";
}

TEST(SqsRetry, ClockSkewIsCorrectedFromTheServersDate) {
  // The server's clock is two hours ahead; it refuses the first signature.
  const auto server_now = std::chrono::system_clock::now() + 2h;
  const std::time_t t = std::chrono::system_clock::to_time_t(server_now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[64];
  std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  std::vector<std::string> amz_dates;
  std::mutex m;
  HttpServer server([&](const ServerRequest& r) {
    std::lock_guard lock(m);
    amz_dates.push_back(r.headers.at("x-amz-date"));
    if (amz_dates.size() == 1) {
      auto res = sqs_error(400, "RequestTimeTooSkewed");
      res.headers["Date"] = date;
      return res;
    }
    return ServerResponse{200, {}, R"({})"};
  });
  asio::io_context io;
  auto client = client_for(io, server);
  test::run(io, client->purge_queue("http://q"));
  ASSERT_EQ(amz_dates.size(), 2u);
  EXPECT_EQ(amz_dates[1].substr(0, 11), aws::amz_date(server_now).substr(0, 11))
      << "the retry is signed with the server's time";
}

TEST(SqsRetry, RequestsAreSignedForSqs) {
  std::vector<ServerRequest> seen;
  std::mutex m;
  HttpServer server([&](const ServerRequest& r) {
    std::lock_guard lock(m);
    seen.push_back(r);
    return ServerResponse{200, {}, R"({"QueueUrl":"http://q"})"};
  });
  asio::io_context io;
  auto client = client_for(io, server);
  test::run(io, client->get_queue_url("q"));
  ASSERT_EQ(seen.size(), 1u);
  const auto& h = seen[0].headers;
  EXPECT_EQ(h.at("x-amz-target"), "AmazonSQS.GetQueueUrl");
  EXPECT_EQ(h.at("content-type"), "application/x-amz-json-1.0");
  EXPECT_NE(h.at("authorization").find("Credential=AKIDTEST/"), std::string::npos);
  EXPECT_NE(h.at("authorization").find("/us-east-1/sqs/aws4_request"), std::string::npos);
  EXPECT_NE(h.at("authorization").find("SignedHeaders=content-type;host;x-amz-date;x-amz-target"),
            std::string::npos);
  EXPECT_EQ(h.at("authorization").find("secret"), std::string::npos);
}

TEST(SqsRetry, CorruptedBodiesAreRejected) {
  HttpServer server([&](const ServerRequest&) {
    return ServerResponse{200,
                          {},
                          R"({"Messages":[{"MessageId":"m","ReceiptHandle":"r","Body":"tampered",)"
                          R"("MD5OfBody":")" +
                              crypto::md5_hex("original") + R"("}]})"};
  });
  asio::io_context io;
  auto client = client_for(io, server);
  sqs::ReceiveMessageRequest r;
  r.queue_url = "http://q";
  try {
    test::run(io, client->receive_message(r));
    FAIL();
  } catch (const aws::AwsError& e) {
    EXPECT_EQ(e.kind(), aws::ErrorKind::integrity);
  }
}

// An empty 200 body is an empty answer, as botocore and the AWS SDKs read it (an
// independent SQS server answers an empty long poll so): no error, no retry. A body
// that is there but not JSON is still refused.
TEST(SqsRetry, AnEmptySuccessIsAnEmptyAnswerAndABodyThatIsNotJsonAnError) {
  std::atomic<int> calls{0};
  std::atomic<bool> garbage{false};
  HttpServer server([&](const ServerRequest&) {
    ++calls;
    return ServerResponse{200, {}, garbage ? "<html>not json</html>" : ""};
  });
  asio::io_context io;
  auto client = client_for(io, server);
  sqs::ReceiveMessageRequest r;
  r.queue_url = "http://q";
  EXPECT_TRUE(test::run(io, client->receive_message(r)).empty());
  std::size_t seen = 0;
  EXPECT_EQ(test::run(io, client->receive_message(r, [&](const sqs::MessageView&) { ++seen; })),
            0u);
  EXPECT_EQ(seen, 0u);
  EXPECT_NO_THROW(test::run(io, client->purge_queue("http://q")));
  EXPECT_EQ(calls.load(), 3) << "each answered once, none retried";
  EXPECT_EQ(client->stats().retries, 0u);
  garbage = true;
  try {
    test::run(io, client->receive_message(r));
    FAIL() << "a body that is not JSON was taken for an answer";
  } catch (const aws::AwsError& e) {
    EXPECT_EQ(e.kind(), aws::ErrorKind::integrity) << e.what();
    EXPECT_NE(std::string(e.what()).find("not JSON"), std::string::npos) << e.what();
  }
}

// The publisher's S3 threshold is the queue's MaximumMessageSize; when it cannot be
// read (the attribute refused by IAM, say), SQS's default since 2025: 1 MiB.
TEST(SqsRetry, TheS3ThresholdIsTheQueuesMaximumOrOneMebibyte) {
  std::atomic<bool> refuse{false};
  HttpServer server([&](const ServerRequest& r) {
    EXPECT_EQ(r.headers.at("x-amz-target"), "AmazonSQS.GetQueueAttributes");
    return refuse ? sqs_error(400, "AccessDeniedException")
                  : ServerResponse{200, {}, R"({"Attributes":{"MaximumMessageSize":"2048"}})"};
  });
  asio::io_context io;
  auto client = client_for(io, server);
  sqs::LargePayloadOptions options;
  options.enabled = true;
  options.bucket = "b";
  sqs::PayloadOffloader read(client, "http://q", options);
  EXPECT_EQ(test::run(io, read.threshold()), 2048u);
  refuse = true;
  sqs::PayloadOffloader unreadable(client, "http://q", options);
  EXPECT_EQ(test::run(io, unreadable.threshold()), 1048576u);
  EXPECT_EQ(server.requests().size(), 2u);
}

// Issue 9, finding 8: entry ids of a batch answer used to index arrays unchecked
// (std::stoul). An SQS that answers DeleteMessageBatch with ids it was never sent,
// and leaves entries out: the container neither crashes nor loses permits; what the
// answer confirms is acked, what it leaves out is abandoned (delivered again).
TEST(SqsSourceAnswers, DeleteBatchAnswersWithStrangeIdsAreCheckedNotTrusted) {
  std::atomic<int> receives{0}, delete_calls{0};
  test::HttpServer server([&](const test::ServerRequest& r) -> test::ServerResponse {
    const std::string target = r.headers.at("x-amz-target");
    if (target == "AmazonSQS.ReceiveMessage") {
      if (receives++ > 0) return {200, {}, kEmptyReceive, std::chrono::milliseconds(50)};
      std::string messages;
      for (int i = 0; i < 3; ++i)
        messages += std::string(i ? "," : "") + R"({"MessageId":"m)" + std::to_string(i) +
                    R"(","ReceiptHandle":"r)" + std::to_string(i) + R"(","Body":"b)" +
                    std::to_string(i) + R"(","MD5OfBody":")" +
                    crypto::md5_hex("b" + std::to_string(i)) + R"("})";
      return {200, {}, R"({"Messages":[)" + messages + "]}"};
    }
    if (target == "AmazonSQS.DeleteMessageBatch") {
      ++delete_calls;
      return {200,
              {},
              R"({"Successful":[{"Id":"99"},{"Id":"x"},{"Id":"0"},{"Id":"0"}],)"
              R"("Failed":[{"Id":"-1","Code":"X","SenderFault":true,"Message":"m"}]})"};
    }
    return {200, {}, "{}"};
  });
  SqsSourceOptions source;
  source.queue_url = server.url("/000000000000/q");
  source.fifo = FifoMode::off;
  source.poll_wait = std::chrono::seconds(0);
  source.delete_flush_interval = 5ms;
  source.client.endpoint_url = server.url();
  source.client.region = "us-east-1";
  source.client.credentials = aws::make_static_credentials({"AKIDTEST", "secret", "", {}, "test"});
  source.client.http.use_env_proxy = false;
  ContainerOptions options;
  options.name = "strange-ids";
  options.max_in_flight = 3;
  options.min_concurrent_receives = options.max_concurrent_receives = 1;
  Container container(options, make_sqs_source(source), MessageHandler([](Message&) {}));
  container.start();
  EXPECT_TRUE(test::wait_until(
      [&] { return container.stats().acked + container.stats().failed_acks == 3; }, 10s));
  // However the three deletes were batched, each answer confirms only its entry "0"
  // (once) and leaves the others out.
  EXPECT_EQ(container.stats().acked, static_cast<std::uint64_t>(delete_calls.load()));
  EXPECT_EQ(container.stats().failed_acks, static_cast<std::uint64_t>(3 - delete_calls.load()));
  EXPECT_EQ(container.stats().pending_acks, 0) << "every permit came back";
  const int before = receives.load();
  EXPECT_TRUE(test::wait_until([&] { return receives.load() > before + 2; }, 5s))
      << "and the container goes on receiving";
  container.stop();
}
