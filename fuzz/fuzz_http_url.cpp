// libFuzzer target: endpoint URLs (AWS's and a Sluice endpoint's), credential
// timestamps and SigV4 canonicalization of arbitrary request targets and headers.
#include <cstdint>
#include <string>

#include "aws/credentials_util.hpp"
#include "observe/http_get.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/sigv4.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    sluice::aws::Url::parse(input);
  } catch (const sluice::aws::AwsError&) {
  }
  try {
    const auto local = sluice::observe::parse_local_url(input);
    if (local.host.empty() || local.target.empty() || local.target[0] != '/') __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  sluice::aws::parse_iso8601(input);
  sluice::aws::HttpRequest request;
  request.url.scheme = "https";
  request.url.host = "example.amazonaws.com";
  request.url.port = 443;
  const auto newline = input.find('\n');
  request.url.target = "/" + input.substr(0, newline);
  if (newline != std::string::npos)
    request.headers.emplace_back("X-Fuzz", input.substr(newline + 1));
  request.body = input;
  sluice::aws::SigningOptions options;
  options.region = "us-east-1";
  options.service = "sqs";
  sluice::aws::Credentials creds{"AKID", "secret", "token", {}, "fuzz"};
  sluice::aws::SigV4Signer(options).sign(request, creds, std::chrono::system_clock::now());
  return 0;
}
