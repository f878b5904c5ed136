// The providers of the AWS CLI's default credentials chain.
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "aws/credentials_util.hpp"
#include "aws/imds.hpp"
#include "aws/text.hpp"
#include "sluice/aws/config.hpp"
#include "sluice/aws/credentials.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::aws {
namespace asio = boost::asio;

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

[[noreturn]] void not_configured(const std::string& why) {
  throw AwsError(ErrorKind::credentials, why, "NotConfigured");
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw AwsError(ErrorKind::credentials, "cannot read " + what + " file " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return std::string(text::trim(out.str()));
}

Credentials credentials_from_json(const std::string& body, const std::string& provider,
                                  const std::string& token_key) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    throw AwsError(ErrorKind::credentials, provider + " returned a malformed credentials document");
  if (doc.contains("Code") && doc["Code"].is_string() && doc["Code"] != "Success")
    throw AwsError(ErrorKind::credentials,
                   provider + " returned code " + doc["Code"].get<std::string>());
  auto field = [&](const char* key) -> std::string {
    auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  Credentials c;
  c.access_key_id = field("AccessKeyId");
  c.secret_access_key = field("SecretAccessKey");
  c.session_token = field(token_key.c_str());
  c.provider = provider;
  if (const std::string exp = field("Expiration"); !exp.empty()) {
    c.expiration = parse_iso8601(exp);
    if (!c.expiration)
      throw AwsError(ErrorKind::credentials, provider + " returned an unreadable Expiration");
  }
  if (c.empty())
    throw AwsError(ErrorKind::credentials, provider + " returned no access key or secret");
  return c;
}

// ----------------------------------------------------------- environment

class EnvironmentProvider final : public CredentialsProvider {
 public:
  asio::awaitable<Credentials> get() override {
    auto key = env("AWS_ACCESS_KEY_ID");
    auto secret = env("AWS_SECRET_ACCESS_KEY");
    if (!key && !secret) not_configured("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY not set");
    if (!key || !secret)
      throw AwsError(ErrorKind::credentials,
                     std::string(key ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
                         " is not set but " +
                         (key ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") + " is");
    Credentials c;
    c.access_key_id = *key;
    c.secret_access_key = *secret;
    c.session_token = env("AWS_SESSION_TOKEN").value_or("");
    c.provider = "environment";
    if (auto exp = env("AWS_CREDENTIAL_EXPIRATION")) c.expiration = parse_iso8601(*exp);
    co_return c;
  }
  std::string name() const override { return "environment"; }
};

// ----------------------------------------------------------- web identity (STS)

std::string xml_unescape(std::string_view in) {
  std::string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '&') {
      static constexpr std::pair<std::string_view, char> entities[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool matched = false;
      for (auto [entity, ch] : entities) {
        if (in.substr(i, entity.size()) == entity) {
          out += ch;
          i += entity.size() - 1;
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    out += in[i];
  }
  return out;
}

std::string xml_element(std::string_view doc, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const auto start = doc.find(open);
  if (start == std::string_view::npos) return {};
  const auto end = doc.find(close, start);
  if (end == std::string_view::npos) return {};
  return xml_unescape(doc.substr(start + open.size(), end - start - open.size()));
}

class WebIdentityProvider final : public CredentialsProvider {
 public:
  WebIdentityProvider(std::string token_file, std::string role_arn, std::string session_name)
      : token_file_(std::move(token_file)),
        role_arn_(std::move(role_arn)),
        session_name_(std::move(session_name)) {}

  asio::awaitable<Credentials> get() override {
    const std::string token = read_file(token_file_, "web identity token");
    const std::string region = region_from_environment().value_or("");
    HttpRequest request;
    request.method = "POST";
    request.url =
        region.empty() ? resolve_endpoint("sts", "us-east-1") : resolve_endpoint("sts", region);
    if (region.empty() && request.url.host == "sts.us-east-1.amazonaws.com")
      request.url.host = "sts.amazonaws.com";
    request.set_header("Content-Type", "application/x-www-form-urlencoded; charset=utf-8");
    request.body = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" +
                   text::uri_encode(role_arn_, false) +
                   "&RoleSessionName=" + text::uri_encode(session_name_, false) +
                   "&WebIdentityToken=" + text::uri_encode(token, false);
    request.timeout = std::chrono::seconds(10);
    auto http = std::make_shared<HttpClient>(co_await asio::this_coro::executor);
    const HttpResponse response = co_await http->send(std::move(request));
    if (response.status != 200) {
      const std::string code = xml_element(response.body, "Code");
      throw AwsError(ErrorKind::credentials,
                     "STS AssumeRoleWithWebIdentity for " + role_arn_ + " failed with HTTP " +
                         std::to_string(response.status) + " " + code + ": " +
                         xml_element(response.body, "Message"),
                     code, response.status);
    }
    Credentials c;
    c.access_key_id = xml_element(response.body, "AccessKeyId");
    c.secret_access_key = xml_element(response.body, "SecretAccessKey");
    c.session_token = xml_element(response.body, "SessionToken");
    c.expiration = parse_iso8601(xml_element(response.body, "Expiration"));
    c.provider = "web identity (" + role_arn_ + ")";
    if (c.empty())
      throw AwsError(ErrorKind::credentials,
                     "STS AssumeRoleWithWebIdentity returned no credentials");
    co_return c;
  }
  std::string name() const override { return "web identity"; }

 private:
  std::string token_file_, role_arn_, session_name_;
};

class EnvWebIdentityProvider final : public CredentialsProvider {
 public:
  asio::awaitable<Credentials> get() override {
    auto token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE");
    auto role = env("AWS_ROLE_ARN");
    if (!token_file || !role)
      not_configured("AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN not set");
    if (!inner_)
      inner_ = std::make_shared<WebIdentityProvider>(
          *token_file, *role,
          env("AWS_ROLE_SESSION_NAME").value_or("sluice-" + std::to_string(std::time(nullptr))));
    co_return co_await inner_->get();
  }
  std::string name() const override { return "web identity"; }

 private:
  std::shared_ptr<WebIdentityProvider> inner_;
};

// ----------------------------------------------------------- shared files

class ProfileProvider final : public CredentialsProvider {
 public:
  asio::awaitable<Credentials> get() override {
    const Profile profile = load_profile();
    if (auto key = profile.get("aws_access_key_id")) {
      auto secret = profile.get("aws_secret_access_key");
      if (!secret)
        throw AwsError(ErrorKind::credentials, "profile '" + profile.name +
                                                   "' has aws_access_key_id but no "
                                                   "aws_secret_access_key (" +
                                                   profile.sources + ")");
      Credentials c;
      c.access_key_id = *key;
      c.secret_access_key = *secret;
      c.session_token = profile.get("aws_session_token").value_or("");
      c.provider = "profile " + profile.name;
      co_return c;
    }
    auto role = profile.get("role_arn");
    auto token_file = profile.get("web_identity_token_file");
    if (role && token_file) {
      WebIdentityProvider web(*token_file, *role,
                              profile.get("role_session_name").value_or("sluice"));
      co_return co_await web.get();
    }
    if (role)
      throw AwsError(ErrorKind::credentials,
                     "profile '" + profile.name + "' assumes role " + *role +
                         " from a source profile, which Sluice does not support yet; use "
                         "web_identity_token_file, environment credentials or an instance role");
    not_configured("profile '" + profile.name + "' has no credentials (" + profile.sources + ")");
  }
  std::string name() const override { return "shared files"; }
};

// ----------------------------------------------------------- ECS/EKS container

bool allowed_full_uri_host(const Url& url) {
  if (url.tls()) return true;
  const std::string& h = url.host;
  return h == "localhost" || h.starts_with("127.") || h == "::1" || h == "169.254.170.2" ||
         h == "169.254.170.23" || h == "fd00:ec2::23";
}

class ContainerProvider final : public CredentialsProvider {
 public:
  asio::awaitable<Credentials> get() override {
    Url url;
    if (auto relative = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
      url = Url::parse("http://169.254.170.2" + *relative);
    } else if (auto full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
      url = Url::parse(*full);
      if (!allowed_full_uri_host(url))
        throw AwsError(ErrorKind::credentials,
                       "AWS_CONTAINER_CREDENTIALS_FULL_URI host " + url.host +
                           " is not allowed: it must be HTTPS, loopback or the ECS/EKS agent");
    } else {
      not_configured("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI not set");
    }
    HttpRequest request;
    request.url = url;
    request.timeout = std::chrono::seconds(2);
    if (auto file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")) {
      request.set_header("Authorization", read_file(*file, "container authorization token"));
    } else if (auto token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
      request.set_header("Authorization", *token);
    }
    auto http = std::make_shared<HttpClient>(co_await asio::this_coro::executor);
    HttpResponse response;
    for (int attempt = 1;; ++attempt) {
      try {
        response = co_await http->send(request);
        if (response.status < 500 || attempt >= 3) break;
      } catch (const AwsError& e) {
        if (!e.retryable() || attempt >= 3) throw;
      }
    }
    if (response.status != 200)
      throw AwsError(ErrorKind::credentials, "container credentials endpoint " + url.origin() +
                                                 " answered HTTP " +
                                                 std::to_string(response.status));
    co_return credentials_from_json(response.body, "container", "Token");
  }
  std::string name() const override { return "container"; }
};

// ----------------------------------------------------------- EC2 instance metadata

class InstanceMetadataProvider final : public CredentialsProvider {
 public:
  asio::awaitable<Credentials> get() override {
    if (imds::disabled()) not_configured("AWS_EC2_METADATA_DISABLED is true");
    // A session token per refresh (an hour apart at most): nothing kept between them.
    imds::Client client(co_await asio::this_coro::executor, imds::Options{});
    const std::string base = "/latest/meta-data/iam/security-credentials/";
    if (role_.empty()) {
      const std::string roles = co_await client.get(base);
      role_ = std::string(text::trim(text::split(roles, '\n').front()));
      if (role_.empty())
        throw AwsError(ErrorKind::credentials, "instance metadata lists no IAM role");
    }
    co_return credentials_from_json(co_await client.get(base + role_),
                                    "instance metadata (" + role_ + ")", "Token");
  }
  std::string name() const override { return "instance metadata"; }

 private:
  std::string role_;
};

}  // namespace

// ----------------------------------------------------------- IMDS client

namespace imds {

namespace {
HttpClientOptions metadata_http_options(std::chrono::milliseconds timeout) {
  HttpClientOptions options;
  options.connect_timeout = timeout;
  options.request_timeout = timeout;
  options.use_env_proxy = false;  // the metadata service is link-local, never proxied
  return options;
}
}  // namespace

bool disabled() {
  auto v = env("AWS_EC2_METADATA_DISABLED");
  return v && text::iequals(*v, "true");
}

Url endpoint() {
  if (auto v = env("AWS_EC2_METADATA_SERVICE_ENDPOINT")) return Url::parse(*v);
  return Url::parse("http://169.254.169.254");
}

Client::Client(asio::any_io_executor executor, Options options)
    : http_(std::make_shared<HttpClient>(executor, metadata_http_options(options.timeout))),
      options_(options),
      endpoint_(endpoint()) {}

asio::awaitable<std::string> Client::token() {
  if (!token_.empty() && std::chrono::steady_clock::now() < token_expiry_) co_return token_;
  HttpRequest request;
  request.method = "PUT";
  request.url = endpoint_;
  request.url.target = "/latest/api/token";
  request.set_header("X-aws-ec2-metadata-token-ttl-seconds", "21600");
  const HttpResponse response = co_await http_->send(std::move(request));
  if (response.status != 200)
    throw AwsError(ErrorKind::credentials, "instance metadata token request answered HTTP " +
                                               std::to_string(response.status));
  token_ = response.body;
  token_expiry_ = std::chrono::steady_clock::now() + std::chrono::hours(5);
  co_return token_;
}

asio::awaitable<std::string> Client::get(const std::string& path) {
  for (int attempt = 1;; ++attempt) {
    try {
      HttpRequest request;
      request.url = endpoint_;
      request.url.target = path;
      request.set_header("X-aws-ec2-metadata-token", co_await token());
      const HttpResponse response = co_await http_->send(std::move(request));
      if (response.status == 401) {  // token expired or revoked: fetch a new one
        token_.clear();
        if (attempt < options_.attempts) continue;
      }
      if (response.status != 200)
        throw AwsError(ErrorKind::credentials, "instance metadata " + path + " answered HTTP " +
                                                   std::to_string(response.status));
      co_return response.body;
    } catch (const AwsError& e) {
      if (!e.retryable() || attempt >= options_.attempts)
        throw AwsError(ErrorKind::credentials,
                       "instance metadata at " + endpoint_.origin() + " unavailable: " + e.what());
    }
  }
}

}  // namespace imds

std::shared_ptr<CredentialsProvider> make_environment_credentials() {
  return std::make_shared<EnvironmentProvider>();
}
std::shared_ptr<CredentialsProvider> make_profile_credentials() {
  return std::make_shared<ProfileProvider>();
}
std::shared_ptr<CredentialsProvider> make_web_identity_credentials() {
  return std::make_shared<EnvWebIdentityProvider>();
}
std::shared_ptr<CredentialsProvider> make_container_credentials() {
  return std::make_shared<ContainerProvider>();
}
std::shared_ptr<CredentialsProvider> make_instance_metadata_credentials() {
  return std::make_shared<InstanceMetadataProvider>();
}

}  // namespace sluice::aws
