// Every SQS action against the real emulator, error paths included.
#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <set>

#include "common/crypto.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/run.hpp"

namespace asio = boost::asio;
using namespace sluice;
using namespace std::chrono_literals;
using aws::AwsError;
using aws::ErrorKind;
using test::Emulator;

namespace {

class SqsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sqs::SqsClientOptions options;
    options.endpoint_url = Emulator::shared().endpoint();
    options.region = "us-east-1";
    options.credentials =
        aws::make_static_credentials({"AKIDLOCAL", "local-secret", "", {}, "test"});
    client_ = std::make_shared<sqs::SqsClient>(io_.get_executor(), options);
  }
  template <class T>
  T run(asio::awaitable<T> task) {
    return test::run(io_, std::move(task));
  }
  std::string make_queue(const std::string& prefix, sqs::QueueAttributes attributes = {}) {
    std::string name = test::unique_queue_name(prefix);
    if (attributes.count("FifoQueue")) name += ".fifo";
    run(client_->create_queue(name, attributes));
    return Emulator::shared().queue_url(name);
  }
  std::vector<sqs::Message> receive(const std::string& url, int max = 10, int wait = 1,
                                    std::optional<int> visibility = std::nullopt) {
    sqs::ReceiveMessageRequest r;
    r.queue_url = url;
    r.max_messages = max;
    r.wait_time_seconds = wait;
    r.visibility_timeout = visibility;
    return run(client_->receive_message(r));
  }
  std::string error_code(std::function<void()> f) {
    try {
      f();
    } catch (const AwsError& e) {
      return e.code();
    }
    return "no error";
  }
  asio::io_context io_;
  std::shared_ptr<sqs::SqsClient> client_;
};

sqs::SendMessageEntry message(std::string body) {
  sqs::SendMessageEntry e;
  e.body = std::move(body);
  return e;
}

}  // namespace

TEST_F(SqsClientTest, QueueLifecycle) {
  const std::string name = test::unique_queue_name("life");
  const std::string created = run(client_->create_queue(name, {{"VisibilityTimeout", "45"}}));
  EXPECT_NE(created.find(name), std::string::npos);
  EXPECT_NE(run(client_->get_queue_url(name)).find(name), std::string::npos);
  const auto urls = run(client_->list_queues(name));
  ASSERT_EQ(urls.size(), 1u);
  const std::string url = Emulator::shared().queue_url(name);
  const auto attributes = run(client_->get_queue_attributes(url));
  EXPECT_EQ(attributes.at("VisibilityTimeout"), "45");
  EXPECT_EQ(attributes.at("ApproximateNumberOfMessages"), "0");
  run(client_->delete_queue(url));
  EXPECT_EQ(error_code([&] { run(client_->get_queue_url(name)); }), "QueueDoesNotExist");
}

TEST_F(SqsClientTest, MissingQueueIsATypedClientErrorAndNotRetried) {
  try {
    receive(Emulator::shared().queue_url("does-not-exist"));
    FAIL();
  } catch (const AwsError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::client);
    EXPECT_EQ(e.code(), "QueueDoesNotExist");
    EXPECT_EQ(e.http_status(), 400);
  }
  EXPECT_EQ(client_->stats().retries, 0u);
}

TEST_F(SqsClientTest, SendReceiveDeleteWithAttributes) {
  const std::string url = make_queue("basic");
  sqs::SendMessageEntry e = message(R"({"skuId":"SKU-1","quantity":3})");
  e.message_attributes["trace"] = sqs::MessageAttributeValue::string("abc");
  e.message_attributes["count"] = sqs::MessageAttributeValue::number("42");
  e.message_attributes["blob"] = sqs::MessageAttributeValue::binary(std::string("\x00\x01\xfe", 3));
  const auto sent = run(client_->send_message(url, e));
  EXPECT_FALSE(sent.message_id.empty());

  const auto messages = receive(url);
  ASSERT_EQ(messages.size(), 1u);
  const auto& m = messages[0];
  EXPECT_EQ(m.message_id, sent.message_id);
  EXPECT_EQ(m.body, e.body);
  EXPECT_EQ(m.receive_count(), 1);
  EXPECT_TRUE(m.sent_time());
  EXPECT_EQ(m.message_attributes.at("trace").string_value, "abc");
  EXPECT_EQ(m.message_attributes.at("count").data_type, "Number");
  EXPECT_EQ(m.message_attributes.at("blob").binary_value, std::string("\x00\x01\xfe", 3));
  EXPECT_FALSE(m.md5_of_message_attributes.empty()) << "verified against our own digest";

  run(client_->delete_message(url, m.receipt_handle));
  EXPECT_TRUE(receive(url, 10, 0).empty());
  const auto attributes = run(client_->get_queue_attributes(url));
  EXPECT_EQ(attributes.at("ApproximateNumberOfMessagesNotVisible"), "0");
}

// The copy-free receive (what the container uses): each message's views hold what the
// copying receive would have returned, attributes and binary values included.
TEST_F(SqsClientTest, ReceiveAsViewsSeesEveryPartOfEachMessage) {
  const std::string url = make_queue("views");
  std::map<std::string, std::string> sent;  // body -> message id
  for (int i = 0; i < 3; ++i) {
    sqs::SendMessageEntry e = message("body-" + std::to_string(i));
    e.message_attributes["n"] = sqs::MessageAttributeValue::number(std::to_string(i));
    e.message_attributes["blob"] = sqs::MessageAttributeValue::binary(std::string("\x00\xff", 2));
    sent[e.body] = run(client_->send_message(url, e)).message_id;
  }
  std::map<std::string, sqs::Message> seen;
  for (int guard = 0; guard < 10 && seen.size() < sent.size(); ++guard) {
    sqs::ReceiveMessageRequest r;
    r.queue_url = url;
    r.wait_time_seconds = 1;
    std::function<void(const sqs::MessageView&)> keep = [&](const sqs::MessageView& m) {
      EXPECT_EQ(m.receive_count(), 1);
      EXPECT_TRUE(m.attribute("SentTimestamp"));
      seen.emplace(std::string(m.body), m.to_message());
    };
    const std::size_t count = run(client_->receive_message(r, std::move(keep)));
    EXPECT_LE(count, sent.size());
  }
  ASSERT_EQ(seen.size(), sent.size());
  sqs::ReceiveMessageRequest r;
  r.queue_url = url;
  std::function<void(const sqs::MessageView&)> none;
  EXPECT_THROW(run(client_->receive_message(r, none)), std::invalid_argument);
  for (const auto& [body, m] : seen) {
    EXPECT_EQ(m.message_id, sent.at(body));
    EXPECT_FALSE(m.receipt_handle.empty());
    EXPECT_EQ(m.md5_of_body, crypto::md5_hex(body));
    EXPECT_EQ(m.message_attributes.at("n").string_value, body.substr(5));
    EXPECT_EQ(m.message_attributes.at("blob").binary_value, std::string("\x00\xff", 2));
    run(client_->delete_message(url, m.receipt_handle));
  }
}

TEST_F(SqsClientTest, VisibilityTimeoutAndRedeliveryWithReceiveCount) {
  const std::string url = make_queue("visibility");
  run(client_->send_message(url, message("again")));
  auto first = receive(url, 1, 1, 30);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(receive(url, 10, 0).empty()) << "hidden while in flight";
  // Release it at once: visibility 0.
  run(client_->change_message_visibility(url, first[0].receipt_handle, 0));
  auto second = receive(url, 1, 1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].message_id, first[0].message_id);
  EXPECT_EQ(second[0].receive_count(), 2);
  EXPECT_NE(second[0].receipt_handle, first[0].receipt_handle);
}

TEST_F(SqsClientTest, BatchSendDeleteAndChangeVisibilityReportPerEntry) {
  const std::string url = make_queue("batch");
  std::vector<sqs::SendMessageEntry> entries;
  for (int i = 0; i < 10; ++i) {
    auto e = message("m" + std::to_string(i));
    e.id = "e" + std::to_string(i);
    entries.push_back(e);
  }
  const auto sent = run(client_->send_message_batch(url, entries));
  EXPECT_EQ(sent.successful.size(), 10u);
  EXPECT_TRUE(sent.all_succeeded());

  std::vector<sqs::Message> got;
  while (got.size() < 10) {
    auto batch = receive(url, 10, 1, 60);
    ASSERT_FALSE(batch.empty());
    got.insert(got.end(), batch.begin(), batch.end());
  }
  std::vector<sqs::ChangeVisibilityEntry> extend;
  for (std::size_t i = 0; i < 9; ++i)
    extend.push_back({"v" + std::to_string(i), got[i].receipt_handle, 120});
  extend.push_back({"bogus", "not-a-receipt-handle", 120});
  const auto changed = run(client_->change_message_visibility_batch(url, extend));
  EXPECT_EQ(changed.successful.size(), 9u);
  ASSERT_EQ(changed.failed.size(), 1u);
  EXPECT_EQ(changed.failed[0].id, "bogus");
  EXPECT_FALSE(changed.failed[0].code.empty());

  std::vector<sqs::DeleteMessageEntry> deletes;
  for (std::size_t i = 0; i < got.size(); ++i)
    deletes.push_back({"d" + std::to_string(i), got[i].receipt_handle});
  const auto deleted = run(client_->delete_message_batch(url, deletes));
  EXPECT_EQ(deleted.successful.size(), 10u);
  EXPECT_EQ(run(client_->get_queue_attributes(url)).at("ApproximateNumberOfMessagesNotVisible"),
            "0");
}

TEST_F(SqsClientTest, ChangeVisibilityOfAnUnknownHandleIsATypedError) {
  const std::string url = make_queue("badhandle");
  const std::string code =
      error_code([&] { run(client_->change_message_visibility(url, "garbage", 10)); });
  EXPECT_NE(code, "no error");
  EXPECT_FALSE(code.empty());
}

TEST_F(SqsClientTest, FifoQueuesKeepOrderAndDeduplicate) {
  const std::string url = make_queue("fifo", {{"FifoQueue", "true"}});
  for (int i = 0; i < 5; ++i) {
    auto e = message("g1-" + std::to_string(i));
    e.message_group_id = "g1";
    e.message_deduplication_id = "d" + std::to_string(i);
    const auto r = run(client_->send_message(url, e));
    EXPECT_FALSE(r.sequence_number.empty());
  }
  auto duplicate = message("g1-0 again");
  duplicate.message_group_id = "g1";
  duplicate.message_deduplication_id = "d0";
  run(client_->send_message(url, duplicate));  // accepted, then dropped by deduplication

  // A batch entry without a group id fails on its own; the others succeed.
  std::vector<sqs::SendMessageEntry> batch{message("g2-0"), message("no group")};
  batch[0].id = "ok";
  batch[0].message_group_id = "g2";
  batch[0].message_deduplication_id = "g2-0";
  batch[1].id = "bad";
  const auto result = run(client_->send_message_batch(url, batch));
  ASSERT_EQ(result.successful.size(), 1u);
  ASSERT_EQ(result.failed.size(), 1u);
  EXPECT_EQ(result.failed[0].id, "bad");
  EXPECT_TRUE(result.failed[0].sender_fault);

  std::vector<std::string> g1;
  for (int guard = 0; guard < 20 && g1.size() < 5; ++guard) {
    sqs::ReceiveMessageRequest r;
    r.queue_url = url;
    r.wait_time_seconds = 1;
    r.receive_request_attempt_id = "attempt-" + std::to_string(guard);
    for (const auto& m : run(client_->receive_message(r))) {
      if (m.group_id() == "g1") g1.push_back(m.body);
      run(client_->delete_message(url, m.receipt_handle));
    }
  }
  EXPECT_EQ(g1, (std::vector<std::string>{"g1-0", "g1-1", "g1-2", "g1-3", "g1-4"}));
}

TEST_F(SqsClientTest, PurgeEmptiesTheQueue) {
  const std::string url = make_queue("purge");
  for (int i = 0; i < 3; ++i) run(client_->send_message(url, message("x")));
  run(client_->purge_queue(url));
  EXPECT_TRUE(receive(url, 10, 0).empty());
}

TEST_F(SqsClientTest, ALongPollIsCancellableAtOnce) {
  const std::string url = make_queue("cancel");
  asio::cancellation_signal cancel;
  std::optional<ErrorKind> outcome;
  const auto start = std::chrono::steady_clock::now();
  asio::co_spawn(
      io_,
      [&]() -> asio::awaitable<void> {
        try {
          sqs::ReceiveMessageRequest r;
          r.queue_url = url;
          r.wait_time_seconds = 20;
          co_await client_->receive_message(r);
        } catch (const AwsError& e) {
          outcome = e.kind();
        }
      },
      asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  asio::steady_timer timer(io_, 200ms);
  timer.async_wait([&](auto) { cancel.emit(asio::cancellation_type::terminal); });
  io_.restart();
  io_.run();
  ASSERT_TRUE(outcome);
  EXPECT_EQ(*outcome, ErrorKind::cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "the 20 s poll was not waited out";
}

TEST_F(SqsClientTest, PublisherSendsTypedValuesAndLargeBatches) {
  const std::string url = make_queue("publisher");
  sqs::Publisher publisher(client_, url);
  const auto single = run(publisher.publish(nlohmann::json{{"skuId", "SKU-9"}, {"quantity", 7}}));
  EXPECT_FALSE(single.message_id.empty());

  std::vector<sqs::SendMessageEntry> many;
  for (int i = 0; i < 95; ++i) many.push_back(message("event-" + std::to_string(i)));
  many.push_back(message(std::string(sqs::kMaxMessageBytes + 1, 'x')));  // too large: refused alone
  const auto outcomes = run(publisher.send_batch(many));
  ASSERT_EQ(outcomes.size(), 96u);
  for (int i = 0; i < 95; ++i)
    EXPECT_TRUE(outcomes[i].ok) << i << ": " << outcomes[i].error_message;
  EXPECT_FALSE(outcomes[95].ok);
  EXPECT_EQ(outcomes[95].attempts, 0) << "never sent";

  std::set<std::string> bodies;
  for (int guard = 0; guard < 50 && bodies.size() < 96; ++guard)
    for (const auto& m : receive(url, 10, 1)) {
      bodies.insert(m.body);
      run(client_->delete_message(url, m.receipt_handle));
    }
  EXPECT_EQ(bodies.size(), 96u);
  EXPECT_TRUE(bodies.count(R"({"quantity":7,"skuId":"SKU-9"})"));
}
