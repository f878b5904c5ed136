#pragma once
// Amazon S3, the few object calls Sluice needs (large message payloads): REST over
// HTTP signed with SigV4's S3 rules (the path signed as sent, x-amz-content-sha256,
// optionally UNSIGNED-PAYLOAD over TLS), path-style or virtual-hosted addressing,
// the endpoint from AWS_ENDPOINT_URL_S3 like the AWS CLI. Errors are aws::AwsError
// with S3's code (NoSuchKey, NoSuchBucket, AccessDenied, SlowDown, ...).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>

#include "sluice/aws/credentials.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/aws/retry.hpp"

namespace sluice::s3 {

enum class AddressingStyle {
  // Virtual-hosted (bucket.s3.region.amazonaws.com) on AWS's own endpoints for
  // bucket names that are valid host labels; path-style elsewhere (a custom
  // endpoint such as an emulator, or a bucket name with dots over TLS).
  auto_detect,
  path,            // https://endpoint/bucket/key
  virtual_hosted,  // https://bucket.endpoint/key
};

struct S3ClientOptions {
  std::string region;        // empty: AWS_REGION, AWS_DEFAULT_REGION, profile
  std::string endpoint_url;  // empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, profile, default
  std::shared_ptr<aws::CredentialsProvider> credentials;  // null: the default chain
  aws::RetryOptions retry;
  aws::HttpClientOptions http;  // http.max_response_bytes caps an object's size
  AddressingStyle addressing = AddressingStyle::auto_detect;
  // Sign "UNSIGNED-PAYLOAD" instead of hashing bodies; only over https (TLS already
  // protects the body), plain http always hashes, as botocore does.
  bool unsigned_payload = false;
};

class S3Client {
 public:
  // Throws AwsError{configuration} (no region, a malformed endpoint).
  S3Client(boost::asio::any_io_executor executor, S3ClientOptions options = {});
  ~S3Client();

  // max_bytes > 0: a larger object is refused (AwsError integrity) as it arrives.
  boost::asio::awaitable<std::string> get_object(std::string bucket, std::string key,
                                                 std::size_t max_bytes = 0);
  // Returns the object's ETag.
  boost::asio::awaitable<std::string> put_object(
      std::string bucket, std::string key, std::string body,
      std::string content_type = "application/octet-stream");
  boost::asio::awaitable<void> delete_object(std::string bucket, std::string key);
  // In the client's region (a LocationConstraint outside us-east-1).
  boost::asio::awaitable<void> create_bucket(std::string bucket);

  // The request this client sends for an object, unsigned: method, URL by the
  // addressing style (virtual-hosted or path), Host. For presigning it, or saying where
  // an object lives.
  aws::HttpRequest object_request(const std::string& method, const std::string& bucket,
                                  const std::string& key) const;
  const std::string& region() const;
  const aws::Url& endpoint() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A bucket name usable as a host label (virtual-hosted addressing): 3-63 lower-case
// letters, digits, '-' and (without TLS) '.', starting and ending with a letter or digit.
bool dns_compatible_bucket(const std::string& bucket, bool tls);

}  // namespace sluice::s3
