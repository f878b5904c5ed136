// An independent check of SigV4: 250 randomized SQS-style requests, and 250 S3 object
// requests built by Sluice's S3 client, signed by Sluice and by botocore (Debian's
// python3-botocore, the AWS CLI's signer) must agree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "aws/text.hpp"
#include "sluice/aws/sigv4.hpp"
#include "sluice/s3/client.hpp"

using namespace sluice::aws;
using nlohmann::json;

namespace {

struct Generator {
  std::mt19937_64 rng{20261130};
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

  std::string text(int max_len) {
    static const std::vector<std::string> pieces = {
        "a", "Z", "0",  "9", "-", "_", ".",    "~", " ", "  ",    "\t", "\"",
        "'", "/", "?",  "=", "&", "%", "+",    ",", ";", ":",     "{",  "}",
        "[", "]", "\\", "é", "ß", "ሴ", "中文", "😀", "Ω", "\u00a0"};
    std::string out;
    const int n = pick(max_len + 1);
    for (int i = 0; i < n; ++i) out += pieces[pick(static_cast<int>(pieces.size()))];
    return out;
  }
  // Header values: visible ASCII, spaces and tabs (HTTP header values are not UTF-8).
  std::string header_text(int max_len) {
    std::string out;
    const int n = pick(max_len + 1);
    for (int i = 0; i < n; ++i) {
      const int c = pick(100);
      out += c < 10 ? ' ' : c < 14 ? '\t' : static_cast<char>('!' + pick(94));
    }
    return out;
  }
  std::string token_chars(int len) {
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
    std::string out;
    for (int i = 0; i < len; ++i) out += chars[pick(sizeof chars - 1)];
    return out;
  }
};

const char* kActions[] = {"ReceiveMessage",    "SendMessage",        "SendMessageBatch",
                          "DeleteMessage",     "DeleteMessageBatch", "ChangeMessageVisibility",
                          "GetQueueAttributes"};
const char* kRegions[] = {"us-east-1", "eu-west-1", "ap-south-1", "us-gov-west-1", "cn-north-1"};

void require_botocore() {
  if (access("/usr/bin/python3", X_OK) != 0 ||
      std::system("/usr/bin/python3 -c 'import botocore' 2>/dev/null") != 0)
    FAIL() << "python3-botocore is required (scripts/install-deps.sh installs it)";
}

// Runs botocore over the cases; returns its answers, one per case.
std::vector<json> botocore_sign(const std::vector<json>& cases) {
  const std::string dir = ::testing::TempDir();
  const std::string in_path = dir + "/sluice-botocore-in-" + std::to_string(getpid()) + ".jsonl";
  const std::string out_path = dir + "/sluice-botocore-out-" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream in(in_path);
    for (const auto& c : cases) in << c.dump() << "\n";
  }
  const std::string cmd = "/usr/bin/python3 " + std::string(SLUICE_SOURCE_DIR) +
                          "/tests/tools/botocore_sign.py " + in_path + " " + out_path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<json> answers;
  std::ifstream out(out_path);
  for (std::string line; std::getline(out, line);) answers.push_back(json::parse(line));
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  return answers;
}

}  // namespace

TEST(SigV4Botocore, RandomizedRequestsMatchBotocore) {
  require_botocore();
  Generator gen;
  const int kCases = 250;
  std::vector<json> cases;
  std::vector<std::string> ours;
  {
    for (int i = 0; i < kCases; ++i) {
      HttpRequest request;
      const bool get = gen.pick(5) == 0;
      request.method = get ? "GET" : "POST";
      const std::string host = gen.pick(3) == 0
                                   ? "127.0.0.1:" + std::to_string(1024 + gen.pick(60000))
                                   : "sqs." + std::string(kRegions[gen.pick(5)]) + ".amazonaws.com";
      std::string target =
          gen.pick(2) ? "/" : "/123456789012/queue-" + std::to_string(gen.pick(1000));
      if (get) {
        target += "?Action=" + std::string(kActions[gen.pick(7)]);
        for (int q = gen.pick(4); q > 0; --q)
          target += "&" + sluice::text::uri_encode("k" + gen.text(3), false) + "=" +
                    sluice::text::uri_encode(gen.text(6), false);
      }
      request.url = Url::parse("https://" + host + target);
      request.headers.emplace_back("Host", request.url.host_header());
      request.headers.emplace_back("Content-Type", "application/x-amz-json-1.0");
      request.headers.emplace_back("X-Amz-Target",
                                   "AmazonSQS." + std::string(kActions[gen.pick(7)]));
      if (gen.pick(3) == 0)
        request.headers.emplace_back("X-Custom-Meta",
                                     "  spaced   value " + gen.header_text(12) + "  ");
      if (gen.pick(4) == 0) request.headers.emplace_back("User-Agent", "sluice/0.1 random");
      if (!get) {
        json body = {{"QueueUrl", "https://" + host + "/123456789012/q"},
                     {"MessageBody", gen.text(40)},
                     {"DelaySeconds", gen.pick(900)}};
        request.body = body.dump();
      }
      Credentials creds;
      creds.access_key_id = "AKIA" + gen.token_chars(16);
      creds.secret_access_key = gen.token_chars(40);
      if (gen.pick(2)) creds.session_token = gen.token_chars(200 + gen.pick(400));
      SigningOptions options;
      options.region = kRegions[gen.pick(5)];
      options.service = "sqs";
      const auto when =
          std::chrono::system_clock::from_time_t(1'400'000'000 + gen.pick(600'000'000));

      json line = {
          {"method", request.method},          {"url", request.url.origin() + request.url.target},
          {"headers", request.headers},        {"body", request.body},
          {"access_key", creds.access_key_id}, {"secret_key", creds.secret_access_key},
          {"token", creds.session_token},      {"region", options.region},
          {"service", options.service},        {"timestamp", amz_date(when)}};
      cases.push_back(std::move(line));
      SigV4Signer(options).sign(request, creds, when);
      ours.emplace_back(*request.header("Authorization"));
    }
  }
  const auto answers = botocore_sign(cases);
  int compared = 0;
  for (const auto& answer : answers) {
    EXPECT_EQ(ours.at(compared), answer["authorization"].get<std::string>()) << "case " << compared;
    ++compared;
  }
  EXPECT_EQ(compared, kCases);
}

// S3: the path signed as sent (encoded once, never normalized), x-amz-content-sha256
// (the body's hash, or UNSIGNED-PAYLOAD over TLS), path-style and virtual-hosted
// hosts, keys with every kind of character, PUT bodies, session tokens.
TEST(SigV4Botocore, RandomizedS3RequestsMatchBotocore) {
  require_botocore();
  Generator gen;
  gen.rng.seed(20261201);
  boost::asio::io_context io;
  const int kCases = 250;
  std::vector<json> cases;
  std::vector<std::pair<std::string, std::string>> ours;  // authorization, content hash
  for (int i = 0; i < kCases; ++i) {
    const std::string region = kRegions[gen.pick(5)];
    const bool tls = gen.pick(4) != 0;
    const int endpoint_kind = gen.pick(3);
    sluice::s3::S3ClientOptions options;
    options.region = region;
    options.endpoint_url =
        endpoint_kind == 0 ? std::string(tls ? "https" : "http") +
                                 "://127.0.0.1:" + std::to_string(1024 + gen.pick(60000))
        : endpoint_kind == 1
            ? std::string(tls ? "https" : "http") + "://s3." + region + ".amazonaws.com"
            : std::string(tls ? "https" : "http") + "://storage.example.test:9000";
    options.addressing = static_cast<sluice::s3::AddressingStyle>(gen.pick(3));
    options.unsigned_payload = gen.pick(2) == 0;
    Credentials creds;
    creds.access_key_id = "AKIA" + gen.token_chars(16);
    creds.secret_access_key = gen.token_chars(40);
    if (gen.pick(2)) creds.session_token = gen.token_chars(300);
    options.credentials = make_static_credentials(creds);
    options.http.use_env_proxy = false;
    sluice::s3::S3Client client(io.get_executor(), options);
    std::string bucket = "bucket-" + std::to_string(gen.pick(100000));
    if (gen.pick(5) == 0) bucket = "my.dotted.bucket" + std::to_string(gen.pick(10));
    std::string key = gen.text(12);
    if (key.empty()) key = "k";
    if (gen.pick(3) == 0) key = "prefix/" + key + "/" + gen.text(4) + ".json";
    static const char* kMethods[] = {"GET", "PUT", "DELETE", "HEAD"};
    HttpRequest request = client.object_request(kMethods[gen.pick(4)], bucket, key);
    if (request.method == "PUT") {
      request.body = gen.text(200);
      request.headers.emplace_back("Content-Type", "application/octet-stream");
    }
    if (gen.pick(4) == 0)
      request.url.target +=
          "?versionId=" + sluice::text::uri_encode(gen.token_chars(8), false) + "&x-id=GetObject";
    const auto when = std::chrono::system_clock::from_time_t(1'400'000'000 + gen.pick(600'000'000));
    const bool sign_payload = !request.header("X-Amz-Content-Sha256").has_value();
    json line = {{"method", request.method},
                 {"url", request.url.origin() + request.url.target},
                 {"headers", request.headers},
                 {"body", request.body},
                 {"access_key", creds.access_key_id},
                 {"secret_key", creds.secret_access_key},
                 {"token", creds.session_token},
                 {"region", region},
                 {"service", "s3"},
                 {"s3", true},
                 {"sign_payload", sign_payload},
                 {"timestamp", amz_date(when)}};
    SigV4Signer(SigningOptions::s3(region)).sign(request, creds, when);
    cases.push_back(std::move(line));
    ours.emplace_back(*request.header("Authorization"),
                      std::string(*request.header("X-Amz-Content-Sha256")));
  }
  const auto answers = botocore_sign(cases);
  ASSERT_EQ(answers.size(), cases.size());
  for (std::size_t i = 0; i < answers.size(); ++i) {
    EXPECT_EQ(ours[i].first, answers[i]["authorization"].get<std::string>())
        << "case " << i << ": " << cases[i]["method"] << " " << cases[i]["url"];
    EXPECT_EQ(ours[i].second, answers[i]["content_sha256"].get<std::string>()) << "case " << i;
  }
}
