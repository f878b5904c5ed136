#pragma once
// Small string helpers shared by the AWS layer.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::text {

// RFC 3986 percent-encoding of everything but unreserved characters (and '/'
// when keep_slash), upper-case hex, as SigV4 requires.
std::string uri_encode(std::string_view in, bool keep_slash);
// The query protocol's body (SNS, CloudWatch): "Action=...&Version=...&..." with every
// name and value percent-encoded (a space as '+', as the AWS SDKs write it), in the
// order given.
std::string encode_form(const std::vector<std::pair<std::string, std::string>>& params);
// Percent-decoding; malformed escapes are kept as they are.
std::string uri_decode(std::string_view in);

std::string to_lower(std::string_view in);
bool iequals(std::string_view a, std::string_view b);
std::string_view trim(std::string_view in);
std::vector<std::string_view> split(std::string_view in, char separator);

}  // namespace sluice::text
