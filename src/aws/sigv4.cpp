#include "sluice/aws/sigv4.hpp"

#include <algorithm>
#include <array>
#include <ctime>
#include <mutex>
#include <string_view>
#include <vector>

#include "aws/text.hpp"
#include "common/crypto.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::aws {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

// Headers that proxies and SDK layers may change; botocore leaves them unsigned too.
bool unsigned_header(std::string_view lower_name) {
  return lower_name == "authorization" || lower_name == "user-agent" || lower_name == "expect" ||
         lower_name == "x-amzn-trace-id";
}

std::string normalize_path(std::string_view path) {
  std::vector<std::string_view> segments;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    std::string_view segment = path.substr(pos, next - pos);
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!segment.empty() && segment != ".") {
      segments.push_back(segment);
    }
    pos = next + 1;
  }
  std::string out = "/";
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (i) out += '/';
    out += segments[i];
  }
  const bool trailing_slash = path.size() > 1 && path.back() == '/';
  if (trailing_slash && !segments.empty()) out += '/';
  return out;
}

std::string canonical_uri(std::string_view path, const SigningOptions& options) {
  if (path.empty()) path = "/";
  const std::string normalized = options.normalize_path ? normalize_path(path) : std::string(path);
  // Non-S3 services encode the path once more, on top of whatever encoding it has.
  return options.encode_path_twice ? text::uri_encode(normalized, /*keep_slash=*/true) : normalized;
}

struct QueryParam {
  std::string key;
  std::string value;
};

std::vector<QueryParam> parse_query(std::string_view query) {
  std::vector<QueryParam> params;
  std::size_t pos = 0;
  while (pos < query.size()) {
    std::size_t amp = query.find('&', pos);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view pair = query.substr(pos, amp - pos);
    if (!pair.empty()) {
      const std::size_t eq = pair.find('=');
      QueryParam param;
      param.key = text::uri_decode(pair.substr(0, eq));
      if (eq != std::string_view::npos) param.value = text::uri_decode(pair.substr(eq + 1));
      params.push_back(std::move(param));
    }
    pos = amp + 1;
  }
  return params;
}

std::string canonical_query(std::vector<QueryParam> params) {
  for (auto& p : params) {
    p.key = text::uri_encode(p.key, false);
    p.value = text::uri_encode(p.value, false);
  }
  std::sort(params.begin(), params.end(), [](const QueryParam& a, const QueryParam& b) {
    return a.key != b.key ? a.key < b.key : a.value < b.value;
  });
  std::string out;
  for (const auto& p : params) {
    if (!out.empty()) out += '&';
    out += p.key;
    out += '=';
    out += p.value;
  }
  return out;
}

// Trims and collapses runs of whitespace (including folded lines) to one space.
std::string canonical_header_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      pending_space = !out.empty();
    } else {
      if (pending_space) out += ' ';
      pending_space = false;
      out += c;
    }
  }
  return out;
}

struct CanonicalHeaders {
  std::string block;         // "name:value\n" lines
  std::string signed_names;  // "a;b;c"
};

CanonicalHeaders canonical_headers(const HeaderList& headers) {
  std::vector<std::pair<std::string, std::string>> lowered;
  lowered.reserve(headers.size());
  for (const auto& [name, value] : headers) {
    std::string lower = text::to_lower(name);
    if (unsigned_header(lower)) continue;
    lowered.emplace_back(std::move(lower), canonical_header_value(value));
  }
  // Stable: repeated headers keep their order when their values are joined.
  std::stable_sort(lowered.begin(), lowered.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  CanonicalHeaders out;
  for (std::size_t i = 0; i < lowered.size(); ++i) {
    if (i > 0 && lowered[i].first == lowered[i - 1].first) {
      out.block.back() = ',';  // replace the newline: join repeated values
      out.block += lowered[i].second;
      out.block += '\n';
      continue;
    }
    out.block += lowered[i].first;
    out.block += ':';
    out.block += lowered[i].second;
    out.block += '\n';
    if (!out.signed_names.empty()) out.signed_names += ';';
    out.signed_names += lowered[i].first;
  }
  return out;
}

std::string scope_of(std::string_view date, const SigningOptions& options) {
  std::string scope;
  scope.reserve(64);
  scope.append(date).append("/").append(options.region).append("/");
  scope.append(options.service).append("/aws4_request");
  return scope;
}

crypto::Sha256 derive_signing_key(std::string_view date, const std::string& secret,
                                  const SigningOptions& options) {
  auto view = [](const crypto::Sha256& k) {
    return std::string_view(reinterpret_cast<const char*>(k.data()), k.size());
  };
  const auto k_date = crypto::hmac_sha256("AWS4" + secret, date);
  const auto k_region = crypto::hmac_sha256(view(k_date), options.region);
  const auto k_service = crypto::hmac_sha256(view(k_region), options.service);
  return crypto::hmac_sha256(view(k_service), "aws4_request");
}

std::pair<std::string_view, std::string_view> split_target(std::string_view target) {
  const std::size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

void require(const Credentials& credentials, const SigningOptions& options) {
  if (credentials.empty())
    throw AwsError(ErrorKind::credentials, "cannot sign a request without credentials");
  if (options.region.empty())
    throw AwsError(ErrorKind::configuration, "cannot sign a request without a region");
}

}  // namespace

std::string amz_date(std::chrono::system_clock::time_point time) {
  const std::time_t t = std::chrono::system_clock::to_time_t(time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[17];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

struct SigV4Signer::KeyCache {
  std::mutex mutex;
  std::string date;
  std::string secret;
  std::array<std::uint8_t, 32> key{};
};

SigningOptions SigningOptions::s3(std::string region) {
  SigningOptions options;
  options.region = std::move(region);
  options.service = "s3";
  options.normalize_path = false;
  options.encode_path_twice = false;
  options.sign_body = true;
  return options;
}

SigV4Signer::SigV4Signer(SigningOptions options)
    : options_(std::move(options)), key_cache_(std::make_shared<KeyCache>()) {}

// The signing key changes once a day per secret: derive it once, not per request.
std::string SigV4Signer::signature(const std::string& string_to_sign, std::string_view date,
                                   const std::string& secret) const {
  crypto::Sha256 key;
  {
    std::lock_guard lock(key_cache_->mutex);
    if (key_cache_->date != date || key_cache_->secret != secret) {
      key_cache_->key = derive_signing_key(date, secret, options_);
      key_cache_->date = std::string(date);
      key_cache_->secret = secret;
    }
    key = key_cache_->key;
  }
  return crypto::hex(crypto::hmac_sha256(
      std::string_view(reinterpret_cast<const char*>(key.data()), key.size()), string_to_sign));
}

SigningResult SigV4Signer::sign(HttpRequest& request, const Credentials& credentials,
                                std::chrono::system_clock::time_point now) const {
  require(credentials, options_);
  const std::string timestamp = amz_date(now);
  const std::string_view date = std::string_view(timestamp).substr(0, 8);
  const auto given_hash = request.header("X-Amz-Content-Sha256");
  const std::string payload_hash =
      given_hash ? std::string(*given_hash) : crypto::sha256_hex(request.body);

  request.set_header("X-Amz-Date", timestamp);
  const bool has_token = !credentials.session_token.empty();
  if (has_token && !options_.omit_session_token)
    request.set_header("X-Amz-Security-Token", credentials.session_token);
  if (options_.sign_body && !given_hash) request.set_header("X-Amz-Content-Sha256", payload_hash);

  const auto [path, query] = split_target(request.url.target);
  const CanonicalHeaders headers = canonical_headers(request.headers);

  SigningResult result;
  result.canonical_request.reserve(256 + headers.block.size());
  result.canonical_request.append(request.method).append("\n");
  result.canonical_request.append(canonical_uri(path, options_)).append("\n");
  result.canonical_request.append(canonical_query(parse_query(query))).append("\n");
  result.canonical_request.append(headers.block).append("\n");
  result.canonical_request.append(headers.signed_names).append("\n");
  result.canonical_request.append(payload_hash);

  const std::string scope = scope_of(date, options_);
  result.string_to_sign.append(kAlgorithm).append("\n").append(timestamp).append("\n");
  result.string_to_sign.append(scope).append("\n");
  result.string_to_sign.append(crypto::sha256_hex(result.canonical_request));
  result.signature = signature(result.string_to_sign, date, credentials.secret_access_key);

  std::string authorization;
  authorization.reserve(200);
  authorization.append(kAlgorithm).append(" Credential=").append(credentials.access_key_id);
  authorization.append("/").append(scope).append(", SignedHeaders=");
  authorization.append(headers.signed_names).append(", Signature=").append(result.signature);
  request.set_header("Authorization", std::move(authorization));
  if (has_token && options_.omit_session_token)
    request.set_header("X-Amz-Security-Token", credentials.session_token);
  return result;
}

SigningResult SigV4Signer::presign(HttpRequest& request, const Credentials& credentials,
                                   std::chrono::system_clock::time_point now,
                                   std::chrono::seconds expires) const {
  require(credentials, options_);
  const std::string timestamp = amz_date(now);
  const std::string_view date = std::string_view(timestamp).substr(0, 8);
  const std::string scope = scope_of(date, options_);
  const auto [path, query] = split_target(request.url.target);
  const std::string path_copy(path);
  const CanonicalHeaders headers = canonical_headers(request.headers);

  std::vector<QueryParam> params = parse_query(query);
  params.push_back({"X-Amz-Algorithm", std::string(kAlgorithm)});
  params.push_back({"X-Amz-Credential", credentials.access_key_id + "/" + scope});
  params.push_back({"X-Amz-Date", timestamp});
  params.push_back({"X-Amz-Expires", std::to_string(expires.count())});
  params.push_back({"X-Amz-SignedHeaders", headers.signed_names});
  const bool has_token = !credentials.session_token.empty();
  if (has_token && !options_.omit_session_token)
    params.push_back({"X-Amz-Security-Token", credentials.session_token});

  SigningResult result;
  result.canonical_request.append(request.method).append("\n");
  result.canonical_request.append(canonical_uri(path_copy, options_)).append("\n");
  result.canonical_request.append(canonical_query(params)).append("\n");
  result.canonical_request.append(headers.block).append("\n");
  result.canonical_request.append(headers.signed_names).append("\n");
  result.canonical_request.append(crypto::sha256_hex(request.body));

  result.string_to_sign.append(kAlgorithm).append("\n").append(timestamp).append("\n");
  result.string_to_sign.append(scope).append("\n");
  result.string_to_sign.append(crypto::sha256_hex(result.canonical_request));
  result.signature = signature(result.string_to_sign, date, credentials.secret_access_key);

  params.push_back({"X-Amz-Signature", result.signature});
  if (has_token && options_.omit_session_token)
    params.push_back({"X-Amz-Security-Token", credentials.session_token});
  std::string target = path_copy;
  for (std::size_t i = 0; i < params.size(); ++i) {
    target += i == 0 ? '?' : '&';
    target += text::uri_encode(params[i].key, false);
    target += '=';
    target += text::uri_encode(params[i].value, false);
  }
  request.url.target = std::move(target);
  return result;
}

}  // namespace sluice::aws
