#include "aws/query_protocol.hpp"

#include "aws/text.hpp"

namespace sluice::aws {

QueryParams query_action(const char* action, const char* version) {
  QueryParams params;
  params.emplace_back("Action", action);
  params.emplace_back("Version", version);
  return params;
}

AwsError query_error(const HttpResponse& response, std::string_view service_name) {
  std::string code, message;
  if (auto doc = parse_xml(response.body))
    if (const XmlElement* error = doc->find("Error")) {
      code = error->child_text("Code");
      message = error->child_text("Message");
    }
  return classify_response(response, service_name, std::move(code), message);
}

boost::asio::awaitable<XmlElement> query_call(ServiceClient& service, const QueryParams& params,
                                              ServiceClient::ErrorOf error_of, const char* action) {
  HttpRequest request;
  request.method = "POST";
  request.url = service.endpoint();
  request.headers.emplace_back("Host", service.endpoint().host_header());
  request.headers.emplace_back("Content-Type", "application/x-www-form-urlencoded; charset=utf-8");
  request.body = text::encode_form(params);
  const HttpResponse response = co_await service.send(request, error_of, action);
  auto doc = parse_xml(response.body);
  if (!doc)
    throw AwsError(
        ErrorKind::integrity,
        std::string(action) + " answer is not XML (" + std::to_string(response.status) + ")",
        "MalformedResponse");
  co_return std::move(*doc);
}

}  // namespace sluice::aws
