// Pure logic of large payloads and of the S3 and SNS clients: the extended clients'
// pointer, the byte budget, S3 addressing, the query-protocol form, XML answers.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <thread>

#include "aws/text.hpp"
#include "aws/xml.hpp"
#include "pipeline/transform.hpp"
#include "sluice/s3/client.hpp"
#include "sluice/sns/client.hpp"
#include "sluice/sqs/large_payload.hpp"
#include "sqs/large_payload.hpp"

using namespace sluice;

TEST(PayloadPointer, ReadsTheJavaPythonAndLegacyFormsAndWritesTheJavaOne) {
  const std::string java =
      R"(["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b-1","s3Key":"k/1"}])";
  auto p = sqs::parse_payload_pointer(java);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->bucket, "b-1");
  EXPECT_EQ(p->key, "k/1");
  EXPECT_EQ(sqs::format_payload_pointer(*p), java) << "byte for byte the Java client's text";
  auto python = sqs::parse_payload_pointer(
      R"(["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": "b", "s3Key": "k"}])");
  ASSERT_TRUE(python);
  EXPECT_EQ(python->key, "k");
  EXPECT_TRUE(sqs::parse_payload_pointer(
      R"(["com.amazon.sqs.javamessaging.MessageS3Pointer",{"s3BucketName":"b","s3Key":"k"}])"));
  // Keys with quotes and unicode survive the round trip.
  const sqs::PayloadPointer odd{"bucket", "a \"quoted\" é/key"};
  auto back = sqs::parse_payload_pointer(sqs::format_payload_pointer(odd));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->key, odd.key);
}

TEST(PayloadPointer, AnythingElseIsNotAPointer) {
  for (
      const char* body : {
          "",
          "{}",
          R"({"s3BucketName":"b","s3Key":"k"})",
          R"(["some.other.Class",{"s3BucketName":"b","s3Key":"k"}])",
          R"(["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b"}])",
          R"(["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"","s3Key":"k"}])",
          R"(["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":1,"s3Key":"k"}])",
          R"(["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"},1])",
          R"(["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"})",
      })
    EXPECT_FALSE(sqs::parse_payload_pointer(body)) << body;
}

TEST(ByteBudget, ReservationsComeBackWhenReleasedAndNeverOverfill) {
  auto budget = std::make_shared<sqs::ByteBudget>(100);
  auto a = budget->try_take(60);
  ASSERT_TRUE(a);
  EXPECT_EQ(budget->used(), 60u);
  EXPECT_FALSE(budget->try_take(41)) << "over the capacity";
  EXPECT_EQ(budget->used(), 60u) << "a refused take holds nothing";
  auto b = budget->try_take(40);
  ASSERT_TRUE(b);
  EXPECT_FALSE(budget->try_take(1));
  a.reset();
  EXPECT_EQ(budget->used(), 40u);
  auto copy = b;  // shared by two holders: returned once, by the last
  b.reset();
  EXPECT_EQ(budget->used(), 40u);
  copy.reset();
  EXPECT_EQ(budget->used(), 0u);
  EXPECT_FALSE(budget->try_take(101)) << "larger than the whole budget";
}

TEST(ByteBudget, TakeWaitsForRoomAndAnOversizedTakeIsHeldAlone) {
  auto budget = std::make_shared<sqs::ByteBudget>(100);
  auto held = budget->try_take(80);
  std::atomic<bool> taken{false};
  std::shared_ptr<void> second;
  std::thread waiter([&] {
    second = budget->take(50);
    taken = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a chance to take them, wrongly
  EXPECT_FALSE(taken.load()) << "50 more do not fit while 80 are held";
  held.reset();
  waiter.join();
  EXPECT_TRUE(taken.load());
  EXPECT_EQ(budget->used(), 50u);
  // More than the capacity: waits until nothing else is held, and meanwhile nobody
  // else gets in (no starvation).
  std::atomic<bool> big_taken{false};
  std::shared_ptr<void> big;
  std::thread oversized([&] {
    big = budget->take(150);
    big_taken = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a chance to take them, wrongly
  EXPECT_FALSE(big_taken.load());
  EXPECT_FALSE(budget->try_take(10)) << "an oversized waiter goes first";
  second.reset();
  oversized.join();
  EXPECT_EQ(budget->used(), 150u);
  EXPECT_FALSE(budget->try_take(1)) << "over the capacity: nothing more until it is returned";
  big.reset();
  EXPECT_EQ(budget->used(), 0u);
}

TEST(S3Addressing, PathStyleVirtualHostedAndAuto) {
  boost::asio::io_context io;
  auto request = [&](const std::string& endpoint, s3::AddressingStyle style,
                     const std::string& bucket, const std::string& key) {
    s3::S3ClientOptions o;
    o.region = "eu-west-1";
    o.endpoint_url = endpoint;
    o.addressing = style;
    o.credentials = aws::make_static_credentials({"AKID", "secret", "", {}, "test"});
    return s3::S3Client(io.get_executor(), o).object_request("GET", bucket, key);
  };
  auto r = request("https://s3.eu-west-1.amazonaws.com", s3::AddressingStyle::auto_detect,
                   "my-bucket", "dir/a b+c.json");
  EXPECT_EQ(r.url.host, "my-bucket.s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(r.url.target, "/dir/a%20b%2Bc.json");
  EXPECT_EQ(*r.header("Host"), "my-bucket.s3.eu-west-1.amazonaws.com");
  // A dotted bucket over TLS would not match the certificate: path-style.
  r = request("https://s3.eu-west-1.amazonaws.com", s3::AddressingStyle::auto_detect, "my.bucket",
              "k");
  EXPECT_EQ(r.url.host, "s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(r.url.target, "/my.bucket/k");
  // A custom endpoint (an emulator): path-style, its port kept.
  r = request("http://127.0.0.1:4566", s3::AddressingStyle::auto_detect, "my-bucket", "k");
  EXPECT_EQ(r.url.target, "/my-bucket/k");
  EXPECT_EQ(*r.header("Host"), "127.0.0.1:4566");
  r = request("http://localhost:4566", s3::AddressingStyle::virtual_hosted, "my-bucket", "k");
  EXPECT_EQ(*r.header("Host"), "my-bucket.localhost:4566");
  r = request("https://s3.eu-west-1.amazonaws.com", s3::AddressingStyle::path, "my-bucket", "k");
  EXPECT_EQ(r.url.target, "/my-bucket/k");
  EXPECT_FALSE(s3::dns_compatible_bucket("My-Bucket", false));
  EXPECT_FALSE(s3::dns_compatible_bucket("ab", false));
  EXPECT_FALSE(s3::dns_compatible_bucket("a..b", false));
  EXPECT_TRUE(s3::dns_compatible_bucket("a.b-c", false));
  EXPECT_FALSE(s3::dns_compatible_bucket("a.b-c", true));
}

TEST(QueryForm, EveryNameAndValuePercentEncoded) {
  EXPECT_EQ(text::encode_form({{"Action", "Publish"},
                               {"Message", "{\"a\": 1} & é+="},
                               {"MessageAttributes.entry.1.Name", "k"}}),
            "Action=Publish&Message=%7B%22a%22%3A+1%7D+%26+%C3%A9%2B%3D&"
            "MessageAttributes.entry.1.Name=k");
}

TEST(XmlAnswers, ParsesS3ErrorsAndSnsResultsAndRefusesTheRest) {
  auto error = aws::parse_xml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
      "<Message>The specified key &amp; more</Message></Error>");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->name, "Error");
  EXPECT_EQ(error->child_text("Code"), "NoSuchKey");
  EXPECT_EQ(error->child_text("Message"), "The specified key & more");
  auto sns = aws::parse_xml(
      "<PublishResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><PublishResult>"
      "<MessageId>abc</MessageId></PublishResult></PublishResponse>");
  ASSERT_TRUE(sns);
  ASSERT_TRUE(sns->find("MessageId"));
  EXPECT_EQ(sns->find("MessageId")->text, "abc");
  EXPECT_FALSE(aws::parse_xml("<a><b></a>"));
  EXPECT_FALSE(aws::parse_xml(""));
  EXPECT_FALSE(aws::parse_xml("not xml"));
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "<a>";
  for (int i = 0; i < 100; ++i) deep += "</a>";
  EXPECT_FALSE(aws::parse_xml(deep)) << "nested past the limit";
}

TEST(SnsEnvelope, MetaFieldsComeFromTheEnvelopeAndNeedIt) {
  pipeline::TransformSpec spec;
  spec.unwrap_sns = true;
  spec.fields.push_back(pipeline::field("sku", "/sku", pipeline::FieldType::string, true));
  spec.fields.push_back(pipeline::meta_field("topic", pipeline::FieldType::string,
                                             pipeline::MetaField::sns_topic_arn));
  spec.fields.push_back(pipeline::meta_field("subject", pipeline::FieldType::string,
                                             pipeline::MetaField::sns_subject));
  spec.hash_versions["V1"] = {"sku"};
  spec.hash_version = "V1";
  pipeline::Transformer t(spec);
  const std::string body =
      R"({"Type":"Notification","MessageId":"m-1","TopicArn":"arn:aws:sns:us-east-1:1:t",)"
      R"("Message":"{\"sku\":\"S-1\"}","Timestamp":"2026-12-01T00:00:00.000Z"})";
  pipeline::MessageView view;
  view.body = body;
  view.message_id = "id";
  view.source = "q";
  auto result = t.transform(view);
  ASSERT_TRUE(std::holds_alternative<pipeline::Record>(result));
  const auto& doc = std::get<pipeline::Record>(result).document;
  EXPECT_EQ(doc["sku"], "S-1");
  EXPECT_EQ(doc["topic"], "arn:aws:sns:us-east-1:1:t");
  EXPECT_TRUE(doc["subject"].is_null()) << "absent from the envelope";
  spec.unwrap_sns = false;
  EXPECT_THROW(pipeline::validate(spec), std::invalid_argument);
}
