#include "sluice/s3/client.hpp"

#include <boost/asio/use_awaitable.hpp>

#include "aws/service_client.hpp"
#include "aws/text.hpp"
#include "aws/xml.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::s3 {
namespace asio = boost::asio;
using aws::AwsError;
using aws::ErrorKind;

bool dns_compatible_bucket(const std::string& bucket, bool tls) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(bucket.front()) || !alnum(bucket.back())) return false;
  for (std::size_t i = 0; i < bucket.size(); ++i) {
    const char c = bucket[i];
    if (alnum(c) || c == '-') continue;
    if (c == '.' && !tls && bucket[i - 1] != '.') continue;
    return false;
  }
  return true;
}

namespace {

bool aws_endpoint(const aws::Url& url) {
  return url.host.ends_with(".amazonaws.com") || url.host.ends_with(".amazonaws.com.cn");
}

AwsError error_of(const aws::HttpResponse& response) {
  std::string code, message;
  if (auto doc = aws::parse_xml(response.body); doc && doc->name == "Error") {
    code = doc->child_text("Code");
    message = doc->child_text("Message");
  }
  // HEAD answers carry no body; a bare 404 may not even come from S3 (a wrong
  // endpoint): named, but not taken for a missing object.
  if (code.empty() && response.status == 404) code = "NotFound";
  return aws::classify_response(response, "S3", std::move(code), message);
}

}  // namespace

struct S3Client::Impl {
  Impl(asio::any_io_executor ex, S3ClientOptions opts)
      : options(std::move(opts)),
        service(ex, aws::service_settings("s3", "S3", options, aws::SigningOptions::s3({}))) {}

  bool virtual_hosted(const std::string& bucket) const {
    const aws::Url& ep = service.endpoint();
    switch (options.addressing) {
      case AddressingStyle::path:
        return false;
      case AddressingStyle::virtual_hosted:
        return true;
      case AddressingStyle::auto_detect:
        break;
    }
    return aws_endpoint(ep) && dns_compatible_bucket(bucket, ep.tls());
  }

  aws::HttpRequest request(const std::string& method, const std::string& bucket,
                           const std::string& key) const {
    aws::HttpRequest r;
    r.method = method;
    r.url = service.endpoint();
    const std::string base = r.url.target == "/" ? std::string() : r.url.target;
    const std::string encoded_key = text::uri_encode(key, /*keep_slash=*/true);
    if (virtual_hosted(bucket)) {
      r.url.host = bucket + "." + r.url.host;
      r.url.target = base + "/" + encoded_key;
    } else {
      r.url.target = base + "/" + text::uri_encode(bucket, false) +
                     (key.empty() ? std::string() : "/" + encoded_key);
    }
    r.headers.emplace_back("Host", r.url.host_header());
    if (options.unsigned_payload && r.url.tls())
      r.headers.emplace_back("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD");
    return r;
  }

  S3ClientOptions options;
  aws::ServiceClient service;
};

S3Client::S3Client(asio::any_io_executor executor, S3ClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}
S3Client::~S3Client() = default;

const std::string& S3Client::region() const {
  return impl_->service.region();
}
const aws::Url& S3Client::endpoint() const {
  return impl_->service.endpoint();
}

aws::HttpRequest S3Client::object_request(const std::string& method, const std::string& bucket,
                                          const std::string& key) const {
  return impl_->request(method, bucket, key);
}

asio::awaitable<std::string> S3Client::get_object(std::string bucket, std::string key,
                                                  std::size_t max_bytes) {
  auto impl = impl_;
  aws::HttpRequest request = impl->request("GET", bucket, key);
  request.max_response_bytes = max_bytes;
  const std::string what = "GetObject s3://" + bucket + "/" + key;
  auto response = co_await impl->service.send(request, error_of, what);
  co_return std::move(response.body);
}

asio::awaitable<std::string> S3Client::put_object(std::string bucket, std::string key,
                                                  std::string body, std::string content_type) {
  auto impl = impl_;
  aws::HttpRequest request = impl->request("PUT", bucket, key);
  request.headers.emplace_back("Content-Type", content_type);
  request.body = std::move(body);
  const std::string what = "PutObject s3://" + bucket + "/" + key;
  auto response = co_await impl->service.send(request, error_of, what);
  co_return std::string(response.header("ETag").value_or(""));
}

asio::awaitable<void> S3Client::delete_object(std::string bucket, std::string key) {
  auto impl = impl_;
  const aws::HttpRequest request = impl->request("DELETE", bucket, key);
  const std::string what = "DeleteObject s3://" + bucket + "/" + key;
  co_await impl->service.send(request, error_of, what);
}

asio::awaitable<void> S3Client::create_bucket(std::string bucket) {
  auto impl = impl_;
  aws::HttpRequest request = impl->request("PUT", bucket, "");
  if (impl->service.region() != "us-east-1") {
    request.headers.emplace_back("Content-Type", "application/xml");
    request.body =
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<LocationConstraint>" +
        impl->service.region() + "</LocationConstraint></CreateBucketConfiguration>";
  }
  const std::string what = "CreateBucket " + bucket;
  co_await impl->service.send(request, error_of, what);
}

}  // namespace sluice::s3
