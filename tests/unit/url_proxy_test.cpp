#include <gtest/gtest.h>

#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"

using namespace sluice::aws;

TEST(Url, ParsesEndpointsAndNamesWhatIsWrong) {
  const Url u = Url::parse("http://127.0.0.1:9324");
  EXPECT_EQ(u.scheme, "http");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 9324);
  EXPECT_EQ(u.target, "/");
  EXPECT_EQ(u.host_header(), "127.0.0.1:9324");
  const Url s = Url::parse("HTTPS://sqs.eu-west-1.amazonaws.com/123/q?x=1");
  EXPECT_TRUE(s.tls());
  EXPECT_EQ(s.port, 443);
  EXPECT_EQ(s.host_header(), "sqs.eu-west-1.amazonaws.com");
  EXPECT_EQ(s.target, "/123/q?x=1");
  EXPECT_EQ(Url::parse("http://[::1]:8080").host, "::1");
  for (const char* bad :
       {"127.0.0.1:9324", "ftp://x", "http://", "http://host:99999", "http://host:abc"}) {
    try {
      Url::parse(bad);
      ADD_FAILURE() << bad << " should be rejected";
    } catch (const AwsError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::configuration);
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << "the message names the URL";
    }
  }
}

TEST(ProxySettings, NoProxyMatchesHostsDomainsAndPorts) {
  ProxySettings p;
  p.https_proxy = Url::parse("http://proxy.local:3128");
  p.http_proxy = Url::parse("http://proxy.local:3129");
  p.no_proxy = {"localhost", ".internal.example", "example.org", "10.0.0.1:8080"};
  EXPECT_FALSE(p.proxy_for(Url::parse("http://localhost:9324")));
  EXPECT_FALSE(p.proxy_for(Url::parse("https://a.internal.example")));
  EXPECT_FALSE(p.proxy_for(Url::parse("https://api.example.org")));
  EXPECT_FALSE(p.proxy_for(Url::parse("http://10.0.0.1:8080")));
  EXPECT_EQ(p.proxy_for(Url::parse("http://10.0.0.1:8081"))->port, 3129);
  EXPECT_EQ(p.proxy_for(Url::parse("https://notexample.org"))->port, 3128);
  EXPECT_EQ(p.proxy_for(Url::parse("https://sqs.us-east-1.amazonaws.com"))->port, 3128);
  p.no_proxy = {"*"};
  EXPECT_FALSE(p.proxy_for(Url::parse("https://sqs.us-east-1.amazonaws.com")));
}

TEST(ProxySettings, ReadFromTheEnvironment) {
  setenv("HTTPS_PROXY", "http://127.0.0.1:3128", 1);
  setenv("NO_PROXY", " localhost , .corp ", 1);
  const auto p = ProxySettings::from_environment();
  unsetenv("HTTPS_PROXY");
  unsetenv("NO_PROXY");
  ASSERT_TRUE(p.https_proxy);
  EXPECT_EQ(p.https_proxy->port, 3128);
  EXPECT_EQ(p.no_proxy, (std::vector<std::string>{"localhost", ".corp"}));
}
