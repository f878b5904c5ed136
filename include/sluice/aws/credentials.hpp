#pragma once
// AWS credentials and the providers that find them, in the AWS CLI's order.

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

namespace sluice::aws {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;  // never logged; see operator<<
  std::string session_token;      // never logged
  std::optional<std::chrono::system_clock::time_point> expiration;
  std::string provider;  // which provider found them, for diagnostics

  bool empty() const { return access_key_id.empty() || secret_access_key.empty(); }
};

// Prints the provider and a redacted key id only; secrets never reach a stream.
std::ostream& operator<<(std::ostream& out, const Credentials& credentials);

class CredentialsProvider {
 public:
  virtual ~CredentialsProvider() = default;
  // Throws AwsError{ErrorKind::credentials} when this provider has nothing.
  virtual boost::asio::awaitable<Credentials> get() = 0;
  virtual std::string name() const = 0;
};

// A provider that always returns the same credentials.
std::shared_ptr<CredentialsProvider> make_static_credentials(Credentials credentials);

// The providers of the default chain, each usable on its own. A provider that is
// not configured at all throws AwsError{credentials} with code "NotConfigured". Those
// that call a service (STS, the container endpoint, the instance metadata service) do
// so on the executor of the coroutine that asks: a provider belongs to no executor and
// may be shared by clients on several.
std::shared_ptr<CredentialsProvider> make_environment_credentials();
std::shared_ptr<CredentialsProvider> make_profile_credentials();
std::shared_ptr<CredentialsProvider> make_web_identity_credentials();
std::shared_ptr<CredentialsProvider> make_container_credentials();
std::shared_ptr<CredentialsProvider> make_instance_metadata_credentials();

// Wraps a provider: keeps its credentials until `refresh_before_expiry` before they
// expire, then refreshes once for all concurrent callers. Callers keep getting the
// old credentials during a refresh while those are still valid.
std::shared_ptr<CredentialsProvider> make_caching_credentials(
    std::shared_ptr<CredentialsProvider> inner,
    std::chrono::seconds refresh_before_expiry = std::chrono::seconds(300));

struct CredentialsChainOptions {
  // Refresh temporary credentials this long before they expire.
  std::chrono::seconds refresh_before_expiry{300};
};

// The AWS CLI's default chain: environment, web identity, shared files (profile),
// ECS container, EC2 instance metadata (IMDSv2). The result is cached and refreshed
// before expiry; concurrent callers share one refresh (no stampede).
std::shared_ptr<CredentialsProvider> make_default_credentials_chain(
    CredentialsChainOptions options = {});

// The process's one default chain, made on first use: every client without
// credentials of its own (SQS, S3, SNS, CloudWatch, ECS, on any executor) signs with
// it, so STS or the metadata service is asked once per refresh, not once per client.
std::shared_ptr<CredentialsProvider> default_credentials();

}  // namespace sluice::aws
