#pragma once
// AWS Signature Version 4, header and query (presigned) forms.

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/aws/credentials.hpp"
#include "sluice/aws/http.hpp"

namespace sluice::aws {

struct SigningOptions {
  std::string region;
  std::string service;
  bool normalize_path = true;       // false only for S3-style services
  bool sign_body = false;           // add x-amz-content-sha256
  bool omit_session_token = false;  // add the token after signing (e.g. IoT)
  // Every service but S3 URI-encodes the (already encoded) path once more in the
  // canonical request; S3 signs the path as it is sent.
  bool encode_path_twice = true;

  // S3's rules: no path normalization, the path encoded once, x-amz-content-sha256.
  static SigningOptions s3(std::string region);
};

// The intermediate artifacts, exposed so that tests can compare them with the
// official vectors step by step.
struct SigningResult {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;
};

class SigV4Signer {
 public:
  explicit SigV4Signer(SigningOptions options);

  // Adds X-Amz-Date, X-Amz-Security-Token (when there is one) and Authorization.
  // An X-Amz-Content-Sha256 header already on the request (S3's "UNSIGNED-PAYLOAD")
  // is signed as the payload hash, as botocore does.
  SigningResult sign(HttpRequest& request, const Credentials& credentials,
                     std::chrono::system_clock::time_point now) const;

  // Adds the X-Amz-* query parameters and X-Amz-Signature to the request target.
  SigningResult presign(HttpRequest& request, const Credentials& credentials,
                        std::chrono::system_clock::time_point now,
                        std::chrono::seconds expires) const;

  const SigningOptions& options() const { return options_; }

 private:
  std::string signature(const std::string& string_to_sign, std::string_view date,
                        const std::string& secret) const;
  struct KeyCache;  // the signing key, derived once per day and secret
  SigningOptions options_;
  std::shared_ptr<KeyCache> key_cache_;
};

// "20150830T123600Z"
std::string amz_date(std::chrono::system_clock::time_point time);

}  // namespace sluice::aws
