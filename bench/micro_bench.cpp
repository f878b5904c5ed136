// Micro-benchmarks of the AWS layer's hot paths: signing one SQS request and
// decoding a full (10-message) ReceiveMessage response. Peers: a decoder written with
// nlohmann::json (here), botocore's signer (bench/botocore_sign_bench.py) and the JS
// SDK's whole client-side ReceiveMessage (bench/node-peer/micro.mjs).
#include <benchmark/benchmark.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/crypto.hpp"
#include "runtime/clock.hpp"
#include "sluice/aws/sigv4.hpp"
#include "sluice/sqs/types.hpp"
#include "sqs/codec.hpp"
#include "sqs/md5.hpp"

using namespace sluice;

namespace {

// A ReceiveMessage request as the client builds it: the URL, the headers, the JSON.
aws::HttpRequest sqs_request(
    std::string body =
        R"({"QueueUrl":"https://sqs.us-east-1.amazonaws.com/123456789012/inventory-events",)"
        R"("MaxNumberOfMessages":10,"WaitTimeSeconds":20,"MessageSystemAttributeNames":["All"],)"
        R"("MessageAttributeNames":["All"]})") {
  aws::HttpRequest r;
  r.method = "POST";
  r.url = aws::Url::parse("https://sqs.us-east-1.amazonaws.com/");
  r.headers = {{"Host", "sqs.us-east-1.amazonaws.com"},
               {"Content-Type", "application/x-amz-json-1.0"},
               {"X-Amz-Target", "AmazonSQS.ReceiveMessage"}};
  r.body = std::move(body);
  return r;
}

std::string receive_response() {
  nlohmann::json messages = nlohmann::json::array();
  for (int i = 0; i < 10; ++i) {
    const std::string body =
        nlohmann::json{{"eventId", i},          {"skuId", "SKU-" + std::to_string(1000 + i)},
                       {"locationId", "LOC-7"}, {"eventType", "ADJUST"},
                       {"quantity", i * 3},     {"payload", std::string(600, 'x')}}
            .dump();
    sqs::MessageAttributes attrs{
        {"source", sqs::MessageAttributeValue::string("wms")},
        {"traceId", sqs::MessageAttributeValue::string("abc-" + std::to_string(i))}};
    messages.push_back(
        {{"MessageId", "5fea7756-0ea4-451a-a703-a558b933e27" + std::to_string(i)},
         {"ReceiptHandle", std::string(180, 'R') + std::to_string(i)},
         {"MD5OfBody", crypto::md5_hex(body)},
         {"Body", body},
         {"MD5OfMessageAttributes", sqs::md5_of_message_attributes(attrs)},
         {"MessageAttributes",
          {{"source", {{"DataType", "String"}, {"StringValue", "wms"}}},
           {"traceId", {{"DataType", "String"}, {"StringValue", "abc-" + std::to_string(i)}}}}},
         {"Attributes",
          {{"SenderId", "AIDAEXAMPLE"},
           {"SentTimestamp", "1700000000000"},
           {"ApproximateReceiveCount", "1"},
           {"ApproximateFirstReceiveTimestamp", "1700000000100"}}}});
  }
  return nlohmann::json{{"Messages", messages}}.dump();
}

aws::SigV4Signer sqs_signer() {
  aws::SigningOptions o;
  o.region = "us-east-1";
  o.service = "sqs";
  return aws::SigV4Signer(o);
}

aws::Credentials example_credentials() {  // the signing test vectors' example key
  return {"AKIDEXAMPLE",
          "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
          "session-token-example",
          {},
          "bench"};
}

void BM_SignSqsRequest(benchmark::State& state) {
  const aws::SigV4Signer signer = sqs_signer();
  const aws::Credentials creds = example_credentials();
  const aws::HttpRequest base = sqs_request();
  for (auto _ : state) {
    // A fresh timestamp per request, as in production and as botocore signs (the
    // signing key's cache still hits within the day).
    aws::HttpRequest r = base;
    benchmark::DoNotOptimize(signer.sign(r, creds, std::chrono::system_clock::now()));
  }
}
BENCHMARK(BM_SignSqsRequest);

// One ReceiveMessage's client-side work without the network, the figure to set beside
// the JS SDK's (bench/node-peer/micro.mjs, same response bytes): sign a fresh request,
// decode the 10-message answer and verify its digests.
void BM_ReceiveClientWork_Sluice(benchmark::State& state) {
  const aws::SigV4Signer signer = sqs_signer();
  const aws::Credentials creds = example_credentials();
  const std::string body = receive_response();
  for (auto _ : state) {
    sqs::ReceiveMessageRequest request;
    request.queue_url = "https://sqs.us-east-1.amazonaws.com/123456789012/inventory-events";
    request.wait_time_seconds = 20;
    aws::HttpRequest r = sqs_request(sqs::codec::encode_receive(request));
    benchmark::DoNotOptimize(signer.sign(r, creds, std::chrono::system_clock::now()));
    benchmark::DoNotOptimize(sqs::codec::decode_receive(body, true));
  }
}
BENCHMARK(BM_ReceiveClientWork_Sluice);

void BM_DecodeReceive10_Sluice(benchmark::State& state) {
  const std::string body = receive_response();
  for (auto _ : state) benchmark::DoNotOptimize(sqs::codec::decode_receive(body, true));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
  state.SetItemsProcessed(state.iterations() * 10);
}
BENCHMARK(BM_DecodeReceive10_Sluice);

void BM_DecodeReceive10_SluiceNoMd5(benchmark::State& state) {
  const std::string body = receive_response();
  for (auto _ : state) benchmark::DoNotOptimize(sqs::codec::decode_receive(body, false));
  state.SetItemsProcessed(state.iterations() * 10);
}
BENCHMARK(BM_DecodeReceive10_SluiceNoMd5);

// The container's path: the same answer, digests verified, each message seen as views
// (SqsClient::receive_message with a callback) instead of copied into sqs::Message.
void BM_DecodeReceive10_SluiceViews(benchmark::State& state) {
  const std::string body = receive_response();
  std::size_t seen = 0;
  const std::function<void(const sqs::MessageView&)> each = [&](const sqs::MessageView& m) {
    seen += m.body.size() + m.attributes.size();
  };
  for (auto _ : state) benchmark::DoNotOptimize(sqs::codec::decode_receive(body, true, each));
  benchmark::DoNotOptimize(seen);
  state.SetItemsProcessed(state.iterations() * 10);
}
BENCHMARK(BM_DecodeReceive10_SluiceViews);

// The peer: a decoder written with nlohmann::json, MD5 verified the same way.
void BM_DecodeReceive10_Nlohmann(benchmark::State& state) {
  const std::string body = receive_response();
  for (auto _ : state) {
    const auto doc = nlohmann::json::parse(body);
    std::vector<sqs::Message> out;
    for (const auto& m : doc["Messages"]) {
      sqs::Message msg;
      msg.message_id = m["MessageId"];
      msg.receipt_handle = m["ReceiptHandle"];
      msg.body = m["Body"];
      msg.md5_of_body = m["MD5OfBody"];
      for (const auto& [k, v] : m["Attributes"].items()) msg.attributes[k] = v;
      for (const auto& [k, v] : m["MessageAttributes"].items())
        msg.message_attributes[k] = {v["DataType"], v.value("StringValue", ""), {}};
      if (crypto::md5_hex(msg.body) != msg.md5_of_body) std::abort();
      if (sqs::md5_of_message_attributes(msg.message_attributes) != m["MD5OfMessageAttributes"])
        std::abort();
      out.push_back(std::move(msg));
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * 10);
}
BENCHMARK(BM_DecodeReceive10_Nlohmann);

}  // namespace

int main(int argc, char** argv) {
  // BENCH_DUMP_RESPONSE=FILE: the ReceiveMessage answer decoded here, for the JS SDK peer.
  if (const char* path = std::getenv("BENCH_DUMP_RESPONSE"))
    std::ofstream(path) << receive_response();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// The core's clock seam (runtime/clock.hpp) against what it replaced: reading the time,
// and a timer set and waited on (the permits' linger, the heartbeat, the batchers).
static void BM_Now_SteadyClock(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_Now_SteadyClock);
static void BM_Now_CoreClock(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(sluice::runtime::CoreClock::now());
}
BENCHMARK(BM_Now_CoreClock);
template <typename Timer>
static void timer_wait(benchmark::State& state) {
  boost::asio::io_context io;
  Timer timer(io);
  for (auto _ : state) {
    timer.expires_after(std::chrono::nanoseconds(0));
    timer.async_wait([](boost::system::error_code) {});
    io.restart();
    io.run();
  }
}
static void BM_TimerWait_AsioSteadyTimer(benchmark::State& state) {
  timer_wait<boost::asio::steady_timer>(state);
}
BENCHMARK(BM_TimerWait_AsioSteadyTimer);
static void BM_TimerWait_CoreTimer(benchmark::State& state) {
  timer_wait<sluice::runtime::CoreTimer>(state);
}
BENCHMARK(BM_TimerWait_CoreTimer);
