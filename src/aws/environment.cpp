// Region and endpoint resolution, in the AWS CLI's order.
#include <boost/asio/use_awaitable.hpp>
#include <cstdlib>

#include "aws/imds.hpp"
#include "aws/text.hpp"
#include "sluice/aws/config.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::aws {
namespace {
std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}
}  // namespace

std::optional<std::string> region_from_environment(const std::string& explicit_region) {
  if (!explicit_region.empty()) return explicit_region;
  if (auto v = env("AWS_REGION")) return v;
  if (auto v = env("AWS_DEFAULT_REGION")) return v;
  return load_profile().get("region");
}

boost::asio::awaitable<std::string> resolve_region(boost::asio::any_io_executor executor,
                                                   std::string explicit_region) {
  if (auto region = region_from_environment(explicit_region)) co_return *region;
  std::string imds_note;
  if (imds::disabled()) {
    imds_note = "disabled by AWS_EC2_METADATA_DISABLED";
  } else {
    try {
      imds::Client client(executor, {});
      co_return co_await client.get("/latest/meta-data/placement/region");
    } catch (const AwsError& e) {
      imds_note = e.what();
    }
  }
  const Profile profile = load_profile();
  throw AwsError(ErrorKind::configuration,
                 "no AWS region configured; tried: the explicit setting, AWS_REGION, "
                 "AWS_DEFAULT_REGION, 'region' in profile '" +
                     profile.name + "' (" + profile.sources + "), instance metadata (" + imds_note +
                     ")");
}

Url resolve_endpoint(const std::string& service, const std::string& region,
                     const std::string& explicit_url, const std::string& service_id) {
  auto parse_from = [](const std::string& value, const std::string& origin) {
    try {
      return Url::parse(value);
    } catch (const AwsError& e) {
      throw AwsError(ErrorKind::configuration, origin + ": " + e.what());
    }
  };
  if (!explicit_url.empty()) return parse_from(explicit_url, "endpoint setting");
  std::string service_var = "AWS_ENDPOINT_URL_";
  for (char c : service_id.empty() ? service : service_id)
    service_var += (c == '-' || c == ' ') ? '_' : static_cast<char>(std::toupper(c));
  if (auto v = env(service_var.c_str())) return parse_from(*v, service_var);
  if (auto v = env("AWS_ENDPOINT_URL")) return parse_from(*v, "AWS_ENDPOINT_URL");
  const Profile profile = load_profile();
  if (auto v = profile.get("endpoint_url"))
    return parse_from(*v, "endpoint_url in profile '" + profile.name + "'");
  if (region.empty())
    throw AwsError(ErrorKind::configuration,
                   "cannot derive the " + service + " endpoint without a region");
  return parse_from("https://" + service + "." + region + ".amazonaws.com", "default endpoint");
}

}  // namespace sluice::aws
