#pragma once
// Region, endpoint and shared-file (~/.aws/config, ~/.aws/credentials) lookup,
// following the AWS CLI's rules.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <map>
#include <optional>
#include <string>

#include "sluice/aws/http.hpp"

namespace sluice::aws {

// One profile's settings, merged from the credentials file (first) and the config
// file. Keys are as written in the files (e.g. "aws_access_key_id", "region").
struct Profile {
  std::string name;
  std::map<std::string, std::string> values;
  std::string sources;  // the files that were read, for error messages

  std::optional<std::string> get(const std::string& key) const;
};

// The profile named by AWS_PROFILE (or "default") from AWS_SHARED_CREDENTIALS_FILE /
// ~/.aws/credentials and AWS_CONFIG_FILE / ~/.aws/config. Missing files are empty.
Profile load_profile(std::optional<std::string> name = std::nullopt);

// Region from the explicit value, AWS_REGION, AWS_DEFAULT_REGION, the profile.
// Returns nullopt when none of them has one (see resolve_region for IMDS).
std::optional<std::string> region_from_environment(const std::string& explicit_region = {});

// As above, then EC2 instance metadata; throws AwsError{configuration} naming
// everything that was tried when no region is found.
boost::asio::awaitable<std::string> resolve_region(boost::asio::any_io_executor executor,
                                                   std::string explicit_region = {});

// Endpoint for a service: the explicit URL, AWS_ENDPOINT_URL_<SERVICE ID>,
// AWS_ENDPOINT_URL, the profile's endpoint_url, then https://<service>.<region>.amazonaws.com.
// The service id names the variable when it differs from the endpoint prefix
// (CloudWatch: prefix "monitoring", AWS_ENDPOINT_URL_CLOUDWATCH).
// Throws AwsError{configuration} when the URL is malformed (naming where it came from).
Url resolve_endpoint(const std::string& service, const std::string& region,
                     const std::string& explicit_url = {}, const std::string& service_id = {});

}  // namespace sluice::aws
