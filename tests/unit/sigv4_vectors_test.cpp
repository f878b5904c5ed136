// The 38 cases of the AWS SigV4 test suite (tests/data/aws-sigv4, Apache-2.0):
// canonical request, string to sign and signature, for header and query signing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "aws/credentials_util.hpp"
#include "sluice/aws/sigv4.hpp"

namespace fs = std::filesystem;
using namespace sluice::aws;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// request.txt: "METHOD target HTTP/1.1", header lines (indented lines continue the
// previous value), a blank line, the body.
HttpRequest parse_request(const std::string& text) {
  HttpRequest request;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  const auto space = line.find(' ');
  request.method = line.substr(0, space);
  std::string target = line.substr(space + 1);
  target = target.substr(0, target.rfind(" HTTP/"));
  request.url.scheme = "https";
  request.url.host = "example.amazonaws.com";
  request.url.port = 443;
  request.url.target = target;
  while (std::getline(in, line)) {
    if (line.empty()) break;
    if ((line[0] == ' ' || line[0] == '\t') && !request.headers.empty()) {
      request.headers.back().second += "\n" + line;
      continue;
    }
    const auto colon = line.find(':');
    request.headers.emplace_back(line.substr(0, colon), line.substr(colon + 1));
  }
  std::ostringstream body;
  body << in.rdbuf();
  request.body = body.str();
  return request;
}

struct Case {
  std::string name;
  fs::path dir;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const auto& entry : fs::directory_iterator(fs::path(SLUICE_TESTDATA) / "aws-sigv4"))
    if (entry.is_directory()) cases.push_back({entry.path().filename().string(), entry.path()});
  std::sort(cases.begin(), cases.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return cases;
}

class SigV4Vectors : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const auto context = nlohmann::json::parse(slurp(GetParam().dir / "context.json"));
    credentials_.access_key_id = context["credentials"]["access_key_id"];
    credentials_.secret_access_key = context["credentials"]["secret_access_key"];
    if (context["credentials"].contains("token"))
      credentials_.session_token = context["credentials"]["token"];
    options_.region = context["region"];
    options_.service = context["service"];
    options_.normalize_path = context["normalize"];
    options_.sign_body = context["sign_body"];
    options_.omit_session_token = context.value("omit_session_token", false);
    time_ = *parse_iso8601(context["timestamp"].get<std::string>());
    expires_ = std::chrono::seconds(context["expiration_in_seconds"].get<int>());
    request_ = parse_request(slurp(GetParam().dir / "request.txt"));
  }
  std::string expected(const char* file) { return slurp(GetParam().dir / file); }

  Credentials credentials_;
  SigningOptions options_;
  std::chrono::system_clock::time_point time_;
  std::chrono::seconds expires_{0};
  HttpRequest request_;
};

TEST_P(SigV4Vectors, HeaderSigning) {
  const SigningResult result = SigV4Signer(options_).sign(request_, credentials_, time_);
  EXPECT_EQ(result.canonical_request, expected("header-canonical-request.txt"));
  EXPECT_EQ(result.string_to_sign, expected("header-string-to-sign.txt"));
  EXPECT_EQ(result.signature, expected("header-signature.txt"));
  const auto authorization = request_.header("Authorization");
  ASSERT_TRUE(authorization);
  EXPECT_NE(authorization->find("Signature=" + result.signature), std::string::npos);
}

TEST_P(SigV4Vectors, QuerySigning) {
  if (!std::filesystem::exists(GetParam().dir / "query-signature.txt")) GTEST_SKIP();
  const SigningResult result =
      SigV4Signer(options_).presign(request_, credentials_, time_, expires_);
  EXPECT_EQ(result.canonical_request, expected("query-canonical-request.txt"));
  EXPECT_EQ(result.string_to_sign, expected("query-string-to-sign.txt"));
  EXPECT_EQ(result.signature, expected("query-signature.txt"));
  EXPECT_NE(request_.url.target.find("X-Amz-Signature=" + result.signature), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Official, SigV4Vectors, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(SigV4VectorsData, AllThirtyEightCasesPresent) {
  EXPECT_EQ(all_cases().size(), 38u);
}

}  // namespace
