#pragma once
// The AWS query protocol (SNS, CloudWatch): form-encoded POSTs, XML answers, errors
// as <Error><Code/><Message/></Error>.
#include <boost/asio/awaitable.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aws/service_client.hpp"
#include "aws/xml.hpp"

namespace sluice::aws {

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// Action=<action>&Version=<version>, the parameters every call starts with.
QueryParams query_action(const char* action, const char* version);

// The error an answer carries, classified (see classify_response).
AwsError query_error(const HttpResponse& response, std::string_view service_name);

// POSTs the parameters as a form; returns the answer's XML (an integrity error when
// it is not XML). `error_of` makes the service's errors (a function of query_error).
boost::asio::awaitable<XmlElement> query_call(ServiceClient& service, const QueryParams& params,
                                              ServiceClient::ErrorOf error_of, const char* action);

}  // namespace sluice::aws
