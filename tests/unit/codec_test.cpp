#include "sqs/codec.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "common/crypto.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sluice/tracing.hpp"
#include "sqs/group_ids.hpp"
#include "sqs/md5.hpp"

using namespace sluice;
using sluice::aws::AwsError;
using sluice::aws::ErrorKind;

namespace {
std::string code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const AwsError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::client);
    return e.code();
  }
  return "no error";
}
sqs::SendMessageEntry entry(std::string id, std::size_t size) {
  sqs::SendMessageEntry e;
  e.id = std::move(id);
  e.body = std::string(size, 'x');
  return e;
}
}  // namespace

TEST(SqsCodec, LimitsAreEnforcedBeforeSending) {
  std::vector<sqs::SendMessageEntry> eleven;
  for (int i = 0; i < 11; ++i) eleven.push_back(entry("e" + std::to_string(i), 10));
  EXPECT_EQ(code_of([&] { sqs::codec::validate_send_batch(eleven); }),
            "TooManyEntriesInBatchRequest");
  EXPECT_EQ(code_of([] { sqs::codec::validate_send_batch({}); }), "EmptyBatchRequest");
  EXPECT_EQ(code_of([] {
              sqs::codec::validate_send_batch({entry("a", 1), entry("a", 1)});
            }),
            "BatchEntryIdsNotDistinct");
  EXPECT_EQ(code_of([] { sqs::codec::validate_send_batch({entry("bad id", 1)}); }),
            "InvalidBatchEntryId");
  EXPECT_EQ(code_of([] { sqs::codec::validate_send(entry("", sqs::kMaxMessageBytes + 1), false); }),
            "InvalidParameterValue");
  EXPECT_EQ(code_of([] {
              sqs::codec::validate_send_batch({entry("a", 600 * 1024), entry("b", 600 * 1024)});
            }),
            "BatchRequestTooLong");
  sqs::ReceiveMessageRequest receive;
  receive.queue_url = "http://q";
  receive.max_messages = 11;
  EXPECT_EQ(code_of([&] { sqs::codec::validate(receive); }), "InvalidParameterValue");
  receive.max_messages = 10;
  receive.wait_time_seconds = 21;
  EXPECT_EQ(code_of([&] { sqs::codec::validate(receive); }), "InvalidParameterValue");
  // Exactly at the limits is fine.
  EXPECT_NO_THROW(sqs::codec::validate_send(entry("", sqs::kMaxMessageBytes), false));
}

TEST(SqsCodec, DecodesMessagesAndVerifiesDigests) {
  const std::string body = R"({"Messages":[{"MessageId":"m1","ReceiptHandle":"r1","Body":"hi",)"
                           R"("MD5OfBody":"49f68a5c8493ec2c0bf489821c21fc3b",)"
                           R"("MD5OfMessageAttributes":"a512aac9938034acb0b3c3d965944bf1",)"
                           R"("MessageAttributes":{"a":{"DataType":"String","StringValue":"x"}},)"
                           R"("Attributes":{"ApproximateReceiveCount":"3","MessageGroupId":"g",)"
                           R"("SentTimestamp":"1700000000000"}}]})";
  const auto messages = sqs::codec::decode_receive(body, true);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].body, "hi");
  EXPECT_EQ(messages[0].receive_count(), 3);
  EXPECT_EQ(messages[0].group_id(), "g");
  EXPECT_EQ(messages[0].message_attributes.at("a").string_value, "x");
  EXPECT_EQ(messages[0].sent_time()->time_since_epoch(), std::chrono::milliseconds(1700000000000));

  std::string tampered = body;
  tampered.replace(tampered.find("\"hi\""), 4, "\"ho\"");
  try {
    sqs::codec::decode_receive(tampered, true);
    FAIL() << "a body that does not match its MD5 must be rejected";
  } catch (const AwsError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::integrity);
    EXPECT_EQ(e.code(), "MD5Mismatch");
  }
  std::string tampered_attr = body;
  tampered_attr.replace(tampered_attr.find("\"x\""), 3, "\"y\"");
  EXPECT_THROW(sqs::codec::decode_receive(tampered_attr, true), AwsError);
  EXPECT_NO_THROW(sqs::codec::decode_receive(tampered, false));
  EXPECT_TRUE(sqs::codec::decode_receive("{}", true).empty());
  EXPECT_THROW(sqs::codec::decode_receive("{\"Messages\":[1]}", true), AwsError);
  EXPECT_THROW(sqs::codec::decode_receive("not json", true), AwsError);
}

// The copy-free receive: views of exactly what the copying one returns; nothing of an
// answer with a bad message in it is passed on; a callback that decodes another answer
// on the same thread leaves the views it holds intact.
TEST(SqsCodec, ViewsAreWhatTheCopiesHoldAndNothingOfABadAnswerIsPassedOn) {
  auto message = [](const std::string& id, const std::string& body, const std::string& count) {
    return R"({"MessageId":")" + id + R"(","ReceiptHandle":"r-)" + id + R"(","Body":")" + body +
           R"(","MD5OfBody":")" + crypto::md5_hex(body) +
           R"(","Attributes":{"SentTimestamp":"1700000000000","ApproximateReceiveCount":")" +
           count + R"(","MessageGroupId":"g-)" + id + R"("}})";
  };
  const std::string body =
      R"({"Messages":[)" + message("1", "one", "2") + "," + message("2", "two", "x") + "]}";
  const auto copies = sqs::codec::decode_receive(body, true);
  ASSERT_EQ(copies.size(), 2u);
  std::vector<sqs::Message> seen;
  std::string inner_body;
  const std::size_t count =
      sqs::codec::decode_receive(body, true, [&](const sqs::MessageView& view) {
        // Another answer decoded on this thread meanwhile must not move these views.
        const auto inner = sqs::codec::decode_receive(
            R"({"Messages":[)" + message("9", "nine", "1") + "]}", true,
            [&](const sqs::MessageView& v) { inner_body = std::string(v.body); });
        EXPECT_EQ(inner, 1u);
        seen.push_back(view.to_message());
        EXPECT_EQ(view.attributes.size(), 3u);
        EXPECT_EQ(view.attributes[0].first, "SentTimestamp");  // the answer's order
        EXPECT_EQ(view.attribute("MessageGroupId"), "g-" + std::string(view.message_id));
        EXPECT_FALSE(view.attribute("SequenceNumber"));
        EXPECT_EQ(view.receive_count(), view.message_id == "1" ? 2 : 0);  // "x" is no count
      });
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(inner_body, "nine");
  ASSERT_EQ(seen.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(seen[i].message_id, copies[i].message_id);
    EXPECT_EQ(seen[i].receipt_handle, copies[i].receipt_handle);
    EXPECT_EQ(seen[i].body, copies[i].body);
    EXPECT_EQ(seen[i].md5_of_body, copies[i].md5_of_body);
    EXPECT_EQ(seen[i].attributes, copies[i].attributes);
  }
  EXPECT_EQ(seen[0].body, "one");
  EXPECT_EQ(seen[0].receive_count(), 2);
  EXPECT_EQ(seen[1].receive_count(), 0);  // "x" is not a count

  // The second message's body does not match its digest: the first is not passed on.
  std::string tampered = body;
  tampered.replace(tampered.find("\"two\""), 5, "\"tWo\"");
  int passed = 0;
  EXPECT_THROW(
      sqs::codec::decode_receive(tampered, true, [&](const sqs::MessageView&) { ++passed; }),
      AwsError);
  EXPECT_EQ(passed, 0);
  const std::string no_receipt =
      R"({"Messages":[)" + message("1", "one", "1") + R"(,{"MessageId":"2","Body":""}]})";
  EXPECT_THROW(
      sqs::codec::decode_receive(no_receipt, false, [&](const sqs::MessageView&) { ++passed; }),
      AwsError);
  EXPECT_EQ(passed, 0);

  // "Attributes" given twice: both kept, a lookup finds the first (as the map did).
  const std::string twice =
      R"({"Messages":[{"MessageId":"1","ReceiptHandle":"r","Body":"b","MD5OfBody":")" +
      crypto::md5_hex("b") +
      R"(","Attributes":{"SentTimestamp":"1"},"Attributes":{"SentTimestamp":"2","ApproximateReceiveCount":"4"}}]})";
  ASSERT_EQ(sqs::codec::decode_receive(twice, true,
                                       [&](const sqs::MessageView& view) {
                                         EXPECT_EQ(view.attributes.size(), 3u);
                                         EXPECT_EQ(view.attribute("SentTimestamp"), "1");
                                         EXPECT_EQ(view.receive_count(), 4);
                                       }),
            1u);
  EXPECT_EQ(sqs::codec::decode_receive(twice, true).at(0).attributes.at("SentTimestamp"), "1");
}

// The answers to deletes and visibility changes: every entry kept, a field that is
// absent or not a string read as empty, SenderFault only when it is a boolean.
TEST(SqsCodec, BatchAnswersKeepEveryEntry) {
  const auto result = sqs::codec::decode_batch(
      R"({"Successful":[{"Id":"0"},{"Id":"1","MessageId":"m","SequenceNumber":"7"},{"Id":2},3],)"
      R"("Failed":[{"Id":"4","Code":"ReceiptHandleIsInvalid","Message":"gone","SenderFault":true},)"
      R"({"Id":"5","Code":"InternalError","SenderFault":"yes"},{"Id":"6"}]})");
  ASSERT_EQ(result.successful.size(), 4u);
  EXPECT_EQ(result.successful[0].id, "0");
  EXPECT_EQ(result.successful[1].message_id, "m");
  EXPECT_EQ(result.successful[1].sequence_number, "7");
  EXPECT_EQ(result.successful[2].id, "");  // not a string
  EXPECT_EQ(result.successful[3].id, "");  // not an object
  ASSERT_EQ(result.failed.size(), 3u);
  EXPECT_EQ(result.failed[0].id, "4");
  EXPECT_EQ(result.failed[0].code, "ReceiptHandleIsInvalid");
  EXPECT_EQ(result.failed[0].message, "gone");
  EXPECT_TRUE(result.failed[0].sender_fault);
  EXPECT_FALSE(result.failed[1].sender_fault);  // not a boolean
  EXPECT_EQ(result.failed[2].code, "");
  // A key given twice: the last counts, as in nlohmann's tree (and decode_send_batch's
  // digest check, which reads one).
  const auto twice =
      sqs::codec::decode_batch(R"({"Successful":[{"Id":"old"}],"Successful":[{"Id":"0","Id":"1"}],)"
                               R"("Failed":[{"Id":"2","SenderFault":true,"SenderFault":"no"}]})");
  ASSERT_EQ(twice.successful.size(), 1u);
  EXPECT_EQ(twice.successful[0].id, "1");
  ASSERT_EQ(twice.failed.size(), 1u);
  EXPECT_FALSE(twice.failed[0].sender_fault);
  // What simdjson refuses and the tree reads is still read: a byte-order mark, an
  // integer beyond 64 bits.
  EXPECT_EQ(
      sqs::codec::decode_batch("\xEF\xBB\xBF{\"Successful\":[{\"Id\":\"0\"}]}").successful.size(),
      1u);
  EXPECT_EQ(sqs::codec::decode_batch(
                R"({"Successful":[{"Id":"0","Extra":123456789012345678901234567890}]})")
                .successful.at(0)
                .id,
            "0");
  const auto empty = sqs::codec::decode_batch(R"({"Successful":{},"Other":[]})");
  EXPECT_TRUE(empty.successful.empty() && empty.failed.empty());
  EXPECT_THROW(sqs::codec::decode_batch("[]"), AwsError);
  EXPECT_THROW(sqs::codec::decode_batch(R"({"Successful":[)"), AwsError);
}

// Deletes and visibility changes are written by hand (one per message): byte for byte
// what nlohmann writes for the same request, whatever UTF-8 the strings hold; and, as
// nlohmann would, they refuse text that is not UTF-8 instead of sending it.
TEST(SqsCodec, ReceiptBatchesAreWhatNlohmannWrites) {
  std::mt19937 random(5);
  const std::vector<std::string> pieces = {
      "a",    "\"",   "\\",   "\n", "\t", "\b", "\f", "\r", std::string(1, '\0'),
      "\x01", "\x1f", "\x7f", "é",  "中", "/",  "+",  "=",  "AQEB"};
  auto text = [&] {
    std::string s;
    for (int n = static_cast<int>(random() % 12); n > 0; --n) s += pieces[random() % pieces.size()];
    return s;
  };
  for (int round = 0; round < 200; ++round) {
    const std::string url = "https://sqs.us-east-1.amazonaws.com/1/" + text();
    std::vector<sqs::DeleteMessageEntry> deletes;
    std::vector<sqs::ChangeVisibilityEntry> changes;
    nlohmann::json delete_list = nlohmann::json::array(), change_list = nlohmann::json::array();
    for (int i = static_cast<int>(random() % 11); i > 0; --i) {
      const std::string id = text(), receipt = text();
      const int timeout = static_cast<int>(random() % 43201);
      deletes.push_back({id, receipt});
      changes.push_back({id, receipt, timeout});
      delete_list.push_back({{"Id", id}, {"ReceiptHandle", receipt}});
      change_list.push_back(
          {{"Id", id}, {"ReceiptHandle", receipt}, {"VisibilityTimeout", timeout}});
    }
    EXPECT_EQ(sqs::codec::encode_delete_batch(url, deletes),
              (nlohmann::json{{"QueueUrl", url}, {"Entries", delete_list}}.dump()));
    EXPECT_EQ(sqs::codec::encode_change_visibility_batch(url, changes),
              (nlohmann::json{{"QueueUrl", url}, {"Entries", change_list}}.dump()));
  }
  for (const std::string bad : {"bad\xff", "trunc\xc3", "\xed\xa0\x80"}) {
    try {
      sqs::codec::encode_delete_batch("https://q", {{"0", "AQEB" + bad}});
      ADD_FAILURE() << "sent a receipt handle that is not UTF-8";
    } catch (const AwsError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::client);
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
    }
    EXPECT_THROW(sqs::codec::encode_change_visibility_batch("https://q" + bad, {{"0", "r", 1}}),
                 AwsError);
  }
}

TEST(SqsCodec, DecodesBinaryAttributesFromBase64) {
  sqs::MessageAttributes attrs{
      {"bin", sqs::MessageAttributeValue::binary(std::string("\x00\xff", 2))}};
  const std::string body =
      std::string(R"({"Messages":[{"MessageId":"m","ReceiptHandle":"r","Body":"b",)") +
      R"("MD5OfBody":")" + crypto::md5_hex("b") + R"(","MD5OfMessageAttributes":")" +
      sqs::md5_of_message_attributes(attrs) +
      R"(","MessageAttributes":{"bin":{"DataType":"Binary","BinaryValue":"AP8="}}}]})";
  const auto messages = sqs::codec::decode_receive(body, true);
  EXPECT_EQ(messages.at(0).message_attributes.at("bin").binary_value, std::string("\x00\xff", 2));
}

TEST(SqsCodec, ErrorsCarryTheServiceCode) {
  auto e = sqs::codec::decode_error(
      R"({"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."})",
      "AWS.SimpleQueueService.NonExistentQueue;Sender");
  EXPECT_EQ(e.code, "QueueDoesNotExist");
  EXPECT_EQ(e.message, "The specified queue does not exist.");
  EXPECT_EQ(
      sqs::codec::decode_error("<html>", "AWS.SimpleQueueService.NonExistentQueue;Sender").code,
      "AWS.SimpleQueueService.NonExistentQueue");
}

TEST(SqsCodec, SendBatchResponseWithWrongDigestBecomesAFailedEntry) {
  std::vector<sqs::SendMessageEntry> sent{entry("a", 3), entry("b", 3)};
  const std::string md5 = crypto::md5_hex(sent[0].body);
  const std::string body = R"({"Successful":[{"Id":"a","MessageId":"1","MD5OfMessageBody":")" +
                           md5 +
                           R"("},{"Id":"b","MessageId":"2","MD5OfMessageBody":"00"}],"Failed":[]})";
  const auto result = sqs::codec::decode_send_batch(body, sent, true);
  ASSERT_EQ(result.successful.size(), 1u);
  EXPECT_EQ(result.successful[0].id, "a");
  ASSERT_EQ(result.failed.size(), 1u);
  EXPECT_EQ(result.failed[0].code, "MD5Mismatch");
}

TEST(Publisher, PacksByCountAndBytes) {
  std::vector<sqs::SendMessageEntry> entries;
  std::vector<std::size_t> all;
  for (int i = 0; i < 25; ++i) {
    entries.push_back(entry("", 10));
    all.push_back(static_cast<std::size_t>(i));
  }
  auto batches = sqs::Publisher::pack(entries, all);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].size(), 10u);
  EXPECT_EQ(batches[2].size(), 5u);

  std::vector<sqs::SendMessageEntry> big{entry("", 400 * 1024), entry("", 400 * 1024),
                                         entry("", 400 * 1024), entry("", 10)};
  batches = sqs::Publisher::pack(big, {0, 1, 2, 3});
  ASSERT_EQ(batches.size(), 2u);  // 800 KiB fits, a third 400 KiB does not
  EXPECT_EQ(batches[0], (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(batches[1], (std::vector<std::size_t>{2, 3}));
}

// A trace context in SQS's AWSTraceHeader system attribute: sent under
// MessageSystemAttributes (none of the 10 message attributes), asked for in every
// receive, read back from a received message's Attributes as X-Ray writes it.
TEST(SqsCodec, AwsTraceHeaderIsSentAsASystemAttributeAndReadBackFromAttributes) {
  const std::string header =
      "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
  auto e = entry("a", 10);
  e.aws_trace_header = header;
  const auto sent = nlohmann::json::parse(sqs::codec::encode_send_batch("http://q", {e}));
  const auto& first = sent.at("Entries").at(0);
  EXPECT_EQ(first.at("MessageSystemAttributes").at("AWSTraceHeader"),
            (nlohmann::json{{"DataType", "String"}, {"StringValue", header}}));
  EXPECT_FALSE(first.contains("MessageAttributes")) << first.dump();
  const auto single = nlohmann::json::parse(sqs::codec::encode_send("http://q", e));
  EXPECT_EQ(single.at("MessageSystemAttributes").at("AWSTraceHeader").at("StringValue"), header);

  sqs::ReceiveMessageRequest request;
  request.queue_url = "http://q";
  const auto receive = nlohmann::json::parse(sqs::codec::encode_receive(request));
  EXPECT_EQ(receive.at("MessageSystemAttributeNames"), nlohmann::json::array({"All"}));

  const std::string body = R"({"Messages":[{"MessageId":"m1","ReceiptHandle":"r1","Body":"hi",)"
                           R"("MD5OfBody":"49f68a5c8493ec2c0bf489821c21fc3b",)"
                           R"("Attributes":{"AWSTraceHeader":")" +
                           header + R"(","ApproximateReceiveCount":"1"}}]})";
  const auto messages = sqs::codec::decode_receive(body, true);
  ASSERT_EQ(messages.size(), 1u);
  ASSERT_TRUE(messages[0].attributes.contains("AWSTraceHeader"));
  const auto context = tracing::parse_aws_trace_header(messages[0].attributes.at("AWSTraceHeader"));
  ASSERT_TRUE(context);
  EXPECT_EQ(context->trace_id_hex(), "5759e988bd862e3fe1be46a994272793");
  EXPECT_EQ(context->span_id_hex(), "53995c3f42cd8ad8");
  EXPECT_TRUE(context->sampled);
  EXPECT_EQ(tracing::format_aws_trace_header(*context), header);
}

// Where a publisher puts the caller's context: AWSTraceHeader by default; traceparent
// (and tracestate) as message attributes when asked, unless they would take the
// message past SQS's 10 attributes; nothing over a context the caller set itself.
TEST(Publisher, InjectsTheTraceWhereItFits) {
  using Carrier = sqs::PublisherOptions::TraceCarrier;
  const auto context = *tracing::parse_traceparent(
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor=x");
  const auto with_attributes = [](int n) {
    auto e = entry("a", 10);
    for (int i = 0; i < n; ++i)
      e.message_attributes["a" + std::to_string(i)] = sqs::MessageAttributeValue::string("v");
    return e;
  };

  auto e = with_attributes(3);
  sqs::inject_trace(e, context, Carrier::aws_trace_header);
  EXPECT_EQ(e.aws_trace_header,
            "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=1");
  EXPECT_EQ(e.message_attributes.size(), 3u);

  e = with_attributes(8);  // traceparent and tracestate fit: 10
  sqs::inject_trace(e, context, Carrier::traceparent);
  EXPECT_TRUE(e.aws_trace_header.empty());
  EXPECT_EQ(e.message_attributes.at("traceparent").string_value,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(e.message_attributes.at("tracestate").string_value, "vendor=x");
  EXPECT_NO_THROW(sqs::codec::validate_send(e, true));

  e = with_attributes(9);  // both would make 11: the system attribute instead
  sqs::inject_trace(e, context, Carrier::traceparent);
  EXPECT_FALSE(e.aws_trace_header.empty());
  EXPECT_EQ(e.message_attributes.size(), 9u);
  EXPECT_NO_THROW(sqs::codec::validate_send(e, true));

  e = with_attributes(1);
  e.message_attributes["traceparent"] = sqs::MessageAttributeValue::string("the caller's");
  sqs::inject_trace(e, context, Carrier::aws_trace_header);
  EXPECT_TRUE(e.aws_trace_header.empty()) << "the caller's own context is kept alone";
  e = with_attributes(1);
  sqs::inject_trace(e, context, Carrier::none);
  EXPECT_TRUE(e.aws_trace_header.empty());
  EXPECT_EQ(e.message_attributes.size(), 1u);
}

TEST(SqsCodec, GroupAndDeduplicationIdsFollowSqsRules) {
  auto with_group = [](std::string id) {
    auto e = entry("", 10);
    e.message_group_id = std::move(id);
    return e;
  };
  EXPECT_NO_THROW(
      sqs::codec::validate_send(with_group("tenant-7!#$%&'()*+,./:;<=>?@[]^_`{|}~"), false));
  EXPECT_NO_THROW(sqs::codec::validate_send(with_group(std::string(128, 'g')), false));
  for (const std::string& bad : {std::string(129, 'g'), std::string("has space"),
                                 std::string("caf\xC3\xA9"), std::string("tab\there")})
    EXPECT_EQ(code_of([&] { sqs::codec::validate_send(with_group(bad), false); }),
              "InvalidParameterValue")
        << bad;
  auto e = entry("", 10);
  e.message_deduplication_id = "two words";
  EXPECT_EQ(code_of([&] { sqs::codec::validate_send(e, false); }), "InvalidParameterValue");
}

// `sluice publish --group-id / --group-id-from`: one id for all, one from each event's
// field, or (FIFO, neither given) g0..g15 in turn; a standard queue takes an event
// without the field (no group), a FIFO queue does not.
TEST(PublishGroupIds, FromAFlagAFieldOrInTurn) {
  const std::string event = R"({"tenant":"acme","n":42,"f":1.5,"o":{}})";
  EXPECT_EQ(sqs::GroupIds("all", "", false).of(event, 3).id, "all");
  EXPECT_EQ(sqs::GroupIds("", "", false).of(event, 3).id, "") << "a standard queue: none";
  EXPECT_EQ(sqs::GroupIds("", "", true).of(event, 17).id, "g1");
  EXPECT_EQ(sqs::GroupIds("", "/tenant", false).of(event, 0).id, "acme");
  EXPECT_EQ(sqs::GroupIds("", "/n", true).of(event, 0).id, "42");
  const auto absent_standard = sqs::GroupIds("", "/missing", false).of(event, 0);
  EXPECT_EQ(absent_standard.id, "");
  EXPECT_EQ(absent_standard.error, "");
  EXPECT_NE(sqs::GroupIds("", "/missing", true).of(event, 0).error.find("no /missing"),
            std::string::npos);
  EXPECT_NE(sqs::GroupIds("", "/f", false).of(event, 0).error.find("string or an integer"),
            std::string::npos);
  EXPECT_NE(sqs::GroupIds("", "/o", false).of(event, 0).error.find("string or an integer"),
            std::string::npos);
  EXPECT_NE(sqs::GroupIds("", "/tenant", false).of("{not json", 0).error.find("not JSON"),
            std::string::npos);
  EXPECT_NE(sqs::GroupIds("", "/t", false).of(R"({"t":"two words"})", 0).error.find("'two words'"),
            std::string::npos);
  // The flags.
  EXPECT_FALSE(sqs::GroupIds("tenant-1", "", false).check());
  EXPECT_FALSE(sqs::GroupIds("", "/tenant", false).check());
  EXPECT_EQ(sqs::GroupIds("a", "/b", false).check().value_or(""),
            "give --group-id or --group-id-from, not both");
  EXPECT_EQ(sqs::GroupIds("a b", "", false).check().value_or(""),
            "--group-id: got 'a b' (3 characters), expected 1 to 128 letters, digits or "
            "punctuation (no spaces)");
  EXPECT_NE(sqs::GroupIds(std::string(6000, 'g'), "", false)
                .check()
                .value_or("")
                .find("...' (6000 characters)"),
            std::string::npos)
      << "a long value is cut, its length said";
  EXPECT_FALSE(sqs::GroupIds("", "/a~1b/c~0", false).check()) << "RFC 6901 escapes";
  EXPECT_NE(sqs::GroupIds("", "/t~x", false).check().value_or("").find("~0"), std::string::npos);
  EXPECT_EQ(sqs::GroupIds("", "/a~1b", false).of(R"({"a/b":"slash"})", 0).id, "slash");
  EXPECT_EQ(sqs::GroupIds("", "tenant", false).check().value_or(""),
            "--group-id-from: got 'tenant', expected a JSON pointer to a field of the event, such "
            "as /tenantId (a '~' written ~0, a '/' in a name ~1)");
}
