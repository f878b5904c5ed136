// Each provider of the default chain, against files in a temporary HOME and
// loopback servers that play the metadata service, the container endpoint and STS.
#include "sluice/aws/credentials.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "aws/credentials_util.hpp"
#include "sluice/aws/config.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/s3/client.hpp"
#include "sluice/sqs/client.hpp"
#include "support/http_server.hpp"
#include "support/run.hpp"

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace sluice::aws;
using sluice::test::HttpServer;
using sluice::test::ServerRequest;
using sluice::test::ServerResponse;

namespace {

const char* kVars[] = {"AWS_ACCESS_KEY_ID",
                       "AWS_SECRET_ACCESS_KEY",
                       "AWS_SESSION_TOKEN",
                       "AWS_PROFILE",
                       "AWS_SHARED_CREDENTIALS_FILE",
                       "AWS_CONFIG_FILE",
                       "AWS_WEB_IDENTITY_TOKEN_FILE",
                       "AWS_ROLE_ARN",
                       "AWS_ROLE_SESSION_NAME",
                       "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                       "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                       "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                       "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                       "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                       "AWS_EC2_METADATA_DISABLED",
                       "AWS_REGION",
                       "AWS_DEFAULT_REGION",
                       "AWS_ENDPOINT_URL",
                       "AWS_ENDPOINT_URL_SQS",
                       "AWS_ENDPOINT_URL_STS",
                       "AWS_CREDENTIAL_EXPIRATION",
                       "HOME"};

// Isolates every test from the machine's AWS settings: a fresh HOME, no AWS_* vars,
// and the instance metadata service pointed at a closed loopback port.
class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_.emplace_back(v, old);
      unsetenv(v);
    }
    home_ = fs::temp_directory_path() /
            ("sluice-home-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(home_ / ".aws");
    setenv("HOME", home_.c_str(), 1);
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9", 1);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
    fs::remove_all(home_);
  }
  void write(const fs::path& path, const std::string& content) { std::ofstream(path) << content; }
  Credentials get(std::shared_ptr<CredentialsProvider> provider) {
    return sluice::test::run([&](auto) { return provider->get(); });
  }
  template <class Make>
  Credentials get_with(Make make) {
    asio::io_context io;
    auto provider = make(io.get_executor());
    return sluice::test::run(io, provider->get());
  }
  fs::path home_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

std::string json_credentials(const std::string& key, const std::string& expiration) {
  return R"({"Code":"Success","AccessKeyId":")" + key + R"(","SecretAccessKey":"SECRET-)" + key +
         R"(","Token":"TOKEN-)" + key + R"(","Expiration":")" + expiration + "\"}";
}

std::string iso_in(std::chrono::seconds from_now) {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + from_now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

TEST_F(CredentialsTest, EnvironmentVariablesWithSessionToken) {
  setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
  setenv("AWS_SESSION_TOKEN", "env-token", 1);
  const auto c = get_with([](auto) { return make_default_credentials_chain(); });
  EXPECT_EQ(c.access_key_id, "AKIAENV");
  EXPECT_EQ(c.secret_access_key, "env-secret");
  EXPECT_EQ(c.session_token, "env-token");
  EXPECT_EQ(c.provider, "environment");
}

TEST_F(CredentialsTest, HalfConfiguredEnvironmentIsAnErrorNamingTheMissingVariable) {
  setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
  try {
    get(make_environment_credentials());
    FAIL();
  } catch (const AwsError& e) {
    EXPECT_NE(std::string(e.what()).find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
  }
}

TEST_F(CredentialsTest, SharedFilesWithProfiles) {
  write(home_ / ".aws/credentials",
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = default-secret\n"
        "# comment\n[work]\naws_access_key_id=AKIAWORK\naws_secret_access_key=work-secret\n"
        "aws_session_token = work-token\n");
  write(home_ / ".aws/config",
        "[default]\nregion = eu-west-1\n[profile work]\nregion = ap-south-1\n"
        "endpoint_url = http://127.0.0.1:4566\n");
  auto c = get_with([](auto) { return make_default_credentials_chain(); });
  EXPECT_EQ(c.access_key_id, "AKIADEFAULT");
  EXPECT_EQ(region_from_environment(), "eu-west-1");

  setenv("AWS_PROFILE", "work", 1);
  c = get_with([](auto) { return make_profile_credentials(); });
  EXPECT_EQ(c.access_key_id, "AKIAWORK");
  EXPECT_EQ(c.session_token, "work-token");
  EXPECT_EQ(region_from_environment(), "ap-south-1");
  EXPECT_EQ(resolve_endpoint("sqs", "ap-south-1").port, 4566);
  setenv("AWS_REGION", "us-west-2", 1);
  EXPECT_EQ(region_from_environment(), "us-west-2") << "the environment wins over the profile";
}

TEST_F(CredentialsTest, SharedFileLocationsFromTheEnvironment) {
  write(home_ / "creds", "[p]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n");
  write(home_ / "conf", "[profile p]\nregion = sa-east-1\n");
  setenv("AWS_SHARED_CREDENTIALS_FILE", (home_ / "creds").c_str(), 1);
  setenv("AWS_CONFIG_FILE", (home_ / "conf").c_str(), 1);
  setenv("AWS_PROFILE", "p", 1);
  EXPECT_EQ(get_with([](auto) { return make_profile_credentials(); }).access_key_id, "AKIAFILE");
  EXPECT_EQ(region_from_environment(), "sa-east-1");
}

TEST_F(CredentialsTest, EndpointOverridesInOrder) {
  EXPECT_EQ(resolve_endpoint("sqs", "eu-west-1").origin(), "https://sqs.eu-west-1.amazonaws.com");
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1000", 1);
  EXPECT_EQ(resolve_endpoint("sqs", "eu-west-1").port, 1000);
  setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:2000", 1);
  EXPECT_EQ(resolve_endpoint("sqs", "eu-west-1").port, 2000);
  EXPECT_EQ(resolve_endpoint("sqs", "eu-west-1", "http://127.0.0.1:3000").port, 3000);
  setenv("AWS_ENDPOINT_URL_SQS", "127.0.0.1:2000", 1);
  try {
    resolve_endpoint("sqs", "eu-west-1");
    FAIL();
  } catch (const AwsError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::configuration);
    EXPECT_NE(std::string(e.what()).find("AWS_ENDPOINT_URL_SQS"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:2000"), std::string::npos);
  }
}

TEST_F(CredentialsTest, ContainerCredentialsWithAuthorizationToken) {
  HttpServer server([](const ServerRequest& r) {
    if (r.target != "/creds" || r.headers.count("authorization") == 0 ||
        r.headers.at("authorization") != "Bearer container-auth")
      return ServerResponse{403, {}, "forbidden"};
    return ServerResponse{200,
                          {{"Content-Type", "application/json"}},
                          json_credentials("AKIACONTAINER", iso_in(std::chrono::hours(6)))};
  });
  setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", server.url("/creds").c_str(), 1);
  write(home_ / "token", "Bearer container-auth\n");
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (home_ / "token").c_str(), 1);
  const auto c = get_with([](auto) { return make_default_credentials_chain(); });
  EXPECT_EQ(c.access_key_id, "AKIACONTAINER");
  EXPECT_EQ(c.session_token, "TOKEN-AKIACONTAINER");
  ASSERT_TRUE(c.expiration);
  EXPECT_GT(*c.expiration, std::chrono::system_clock::now() + std::chrono::hours(5));

  unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong", 1);
  EXPECT_THROW(get_with([](auto) { return make_container_credentials(); }), AwsError);
}

TEST_F(CredentialsTest, ContainerFullUriMustBeLoopbackOrHttps) {
  setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://203.0.113.5/creds", 1);
  try {
    get_with([](auto) { return make_container_credentials(); });
    FAIL();
  } catch (const AwsError& e) {
    EXPECT_NE(std::string(e.what()).find("not allowed"), std::string::npos);
  }
}

TEST_F(CredentialsTest, InstanceMetadataV2TokenThenRoleThenCredentials) {
  HttpServer server([](const ServerRequest& r) {
    if (r.method == "PUT" && r.target == "/latest/api/token") {
      if (r.headers.count("x-aws-ec2-metadata-token-ttl-seconds") == 0) return ServerResponse{400};
      return ServerResponse{200, {}, "imds-token"};
    }
    if (r.headers.count("x-aws-ec2-metadata-token") == 0 ||
        r.headers.at("x-aws-ec2-metadata-token") != "imds-token")
      return ServerResponse{401};
    if (r.target == "/latest/meta-data/iam/security-credentials/")
      return ServerResponse{200, {}, "ingest-role\n"};
    if (r.target == "/latest/meta-data/iam/security-credentials/ingest-role")
      return ServerResponse{200, {}, json_credentials("AKIAIMDS", iso_in(std::chrono::hours(1)))};
    if (r.target == "/latest/meta-data/placement/region")
      return ServerResponse{200, {}, "ca-central-1"};
    return ServerResponse{404};
  });
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url().c_str(), 1);
  const auto c = get_with([](auto) { return make_default_credentials_chain(); });
  EXPECT_EQ(c.access_key_id, "AKIAIMDS");
  EXPECT_EQ(c.provider, "instance metadata (ingest-role)");
  const auto region = sluice::test::run([](auto ex) { return resolve_region(ex); });
  EXPECT_EQ(region, "ca-central-1");
  bool saw_put = false;
  for (const auto& r : server.requests()) saw_put |= r.method == "PUT";
  EXPECT_TRUE(saw_put) << "IMDSv2 asks for a session token first";
}

// Clients without credentials of their own, of two services and on two executors (as
// a source's receive, settle and heartbeat clients and its S3 client are), share the
// process's one chain: the metadata service is asked once, not once per client.
TEST_F(CredentialsTest, EveryClientSharesTheProcessChainSoTheMetadataServiceIsAskedOnce) {
  HttpServer imds([](const ServerRequest& r) {
    if (r.method == "PUT" && r.target == "/latest/api/token")
      return ServerResponse{200, {}, "imds-token"};
    if (r.target == "/latest/meta-data/iam/security-credentials/")
      return ServerResponse{200, {}, "ingest-role\n"};
    if (r.target == "/latest/meta-data/iam/security-credentials/ingest-role")
      return ServerResponse{200, {}, json_credentials("AKIASHARED", iso_in(std::chrono::hours(1)))};
    return ServerResponse{404};
  });
  HttpServer service([](const ServerRequest& r) {
    if (r.method == "GET") return ServerResponse{200, {}, "payload"};  // S3 GetObject
    return ServerResponse{200,
                          {{"Content-Type", "application/x-amz-json-1.0"}},
                          R"({"QueueUrl":"http://127.0.0.1/000000000000/q"})"};
  });
  setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url().c_str(), 1);
  setenv("AWS_REGION", "us-east-1", 1);
  auto sqs_calls = [&](int n) {
    return sluice::test::run([&](auto ex) -> asio::awaitable<int> {
      sluice::sqs::SqsClientOptions options;
      options.endpoint_url = service.url();
      sluice::sqs::SqsClient a(ex, options), b(ex, options);
      int done = 0;
      const std::string queue = "q", owner;
      for (int i = 0; i < n; ++i) {
        co_await a.get_queue_url(queue, owner);
        co_await b.get_queue_url(queue, owner);
        done += 2;
      }
      co_return done;
    });
  };
  std::thread other([&] {
    sluice::test::run([&](auto ex) -> asio::awaitable<int> {
      sluice::s3::S3ClientOptions options;
      options.endpoint_url = service.url();
      sluice::s3::S3Client s3(ex, options);
      const std::string bucket = "bucket", key = "key";
      EXPECT_EQ(co_await s3.get_object(bucket, key, 0), "payload");
      co_return 0;
    });
  });
  EXPECT_EQ(sqs_calls(3), 6);
  other.join();
  int credential_reads = 0, token_requests = 0;
  for (const auto& r : imds.requests()) {
    credential_reads += r.target == "/latest/meta-data/iam/security-credentials/ingest-role";
    token_requests += r.method == "PUT";
  }
  EXPECT_EQ(credential_reads, 1) << "one chain for the process";
  EXPECT_EQ(token_requests, 1);
  const auto requests = service.requests();
  ASSERT_EQ(requests.size(), 7u);
  for (const auto& r : requests)
    EXPECT_NE(r.headers.at("authorization").find("Credential=AKIASHARED/"), std::string::npos);
}

TEST_F(CredentialsTest, WebIdentityCallsStsAssumeRoleWithWebIdentity) {
  std::string expiration = iso_in(std::chrono::hours(1));
  HttpServer sts([&](const ServerRequest& r) {
    if (r.method != "POST" ||
        r.body.find("Action=AssumeRoleWithWebIdentity") == std::string::npos ||
        r.body.find("WebIdentityToken=eks-jwt-token") == std::string::npos ||
        r.body.find("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fingest") ==
            std::string::npos)
      return ServerResponse{400,
                            {},
                            "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                            "<Message>bad</Message></Error></ErrorResponse>"};
    return ServerResponse{
        200,
        {{"Content-Type", "text/xml"}},
        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
        "<AccessKeyId>AKIAWEB</AccessKeyId><SecretAccessKey>web&amp;secret</SecretAccessKey>"
        "<SessionToken>web-token</SessionToken><Expiration>" +
            expiration +
            "</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
            "</AssumeRoleWithWebIdentityResponse>"};
  });
  write(home_ / "jwt", "eks-jwt-token\n");
  setenv("AWS_WEB_IDENTITY_TOKEN_FILE", (home_ / "jwt").c_str(), 1);
  setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ingest", 1);
  setenv("AWS_ENDPOINT_URL_STS", sts.url().c_str(), 1);
  const auto c = get_with([](auto) { return make_default_credentials_chain(); });
  EXPECT_EQ(c.access_key_id, "AKIAWEB");
  EXPECT_EQ(c.secret_access_key, "web&secret");
  EXPECT_EQ(c.session_token, "web-token");
  ASSERT_TRUE(c.expiration);
  EXPECT_EQ(*c.expiration, *parse_iso8601(expiration));
}

TEST_F(CredentialsTest, NothingFoundNamesEveryProviderTried) {
  try {
    get_with([](auto) { return make_default_credentials_chain(); });
    FAIL();
  } catch (const AwsError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::credentials);
    for (const char* tried :
         {"environment", "web identity", "shared files", "container", "instance metadata"})
      EXPECT_NE(message.find(tried), std::string::npos) << tried << " missing from: " << message;
  }
  try {
    sluice::test::run([](auto ex) { return resolve_region(ex); });
    FAIL();
  } catch (const AwsError& e) {
    EXPECT_NE(std::string(e.what()).find("AWS_REGION"), std::string::npos);
  }
}

namespace {
// Counts calls; each call takes a while so that concurrent callers overlap.
class SlowCountingProvider : public CredentialsProvider {
 public:
  explicit SlowCountingProvider(std::chrono::seconds lifetime) : lifetime_(lifetime) {}
  asio::awaitable<Credentials> get() override {
    const int n = ++calls;
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
    co_await t.async_wait(asio::use_awaitable);
    Credentials c{"AKIA" + std::to_string(n), "secret", "", {}, "counting"};
    c.expiration = std::chrono::system_clock::now() + lifetime_;
    co_return c;
  }
  std::string name() const override { return "counting"; }
  std::atomic<int> calls{0};
  std::chrono::seconds lifetime_;
};
}  // namespace

TEST_F(CredentialsTest, CachedCredentialsRefreshOnceForManyConcurrentCallers) {
  auto inner = std::make_shared<SlowCountingProvider>(std::chrono::hours(1));
  auto cached = make_caching_credentials(inner, std::chrono::seconds(300));
  asio::io_context io;
  std::vector<std::string> keys;
  // Two threads, many coroutines: all start before the first refresh completes.
  for (int i = 0; i < 64; ++i)
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto c = co_await cached->get();
          static std::mutex m;
          std::lock_guard lock(m);
          keys.push_back(c.access_key_id);
        },
        asio::detached);
  std::thread second([&] { io.run(); });
  io.run();
  second.join();
  EXPECT_EQ(inner->calls.load(), 1) << "one refresh for all callers";
  ASSERT_EQ(keys.size(), 64u);
  for (const auto& k : keys) EXPECT_EQ(k, "AKIA1");
  // Still fresh: no new call.
  EXPECT_EQ(get(cached).access_key_id, "AKIA1");
  EXPECT_EQ(inner->calls.load(), 1);
}

TEST_F(CredentialsTest, CredentialsNearExpiryAreRefreshed) {
  auto inner = std::make_shared<SlowCountingProvider>(std::chrono::seconds(200));
  auto cached = make_caching_credentials(inner, std::chrono::seconds(300));
  EXPECT_EQ(get(cached).access_key_id, "AKIA1");
  EXPECT_EQ(get(cached).access_key_id, "AKIA2") << "within the refresh window: refreshed";
}

TEST_F(CredentialsTest, SecretsNeverReachStreamsOrErrors) {
  Credentials c{"AKIAIOSFODNN7EXAMPLE",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "FwoGZXIvYXdzEXAMPLETOKEN",
                {},
                "test"};
  std::ostringstream out;
  out << c;
  EXPECT_EQ(out.str().find(c.secret_access_key), std::string::npos);
  EXPECT_EQ(out.str().find(c.session_token), std::string::npos);
  EXPECT_EQ(out.str().find(c.access_key_id), std::string::npos) << "only a prefix of the key id";

  // A profile with a key but no secret: the error names the problem, not the key.
  write(home_ / ".aws/credentials",
        "[default]\naws_access_key_id = AKIAHALF\naws_session_token = TOPSECRETTOKEN\n");
  try {
    get_with([](auto) { return make_profile_credentials(); });
    FAIL();
  } catch (const AwsError& e) {
    EXPECT_EQ(std::string(e.what()).find("TOPSECRETTOKEN"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("aws_secret_access_key"), std::string::npos);
  }
}
