// `sluice health`: one GET of a pipeline's /healthz or /readyz, for container health
// checks.
#include "app/health.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <iostream>

#include "common/redact.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"

namespace sluice::app {
namespace asio = boost::asio;

aws::HttpResponse send_once(const aws::HttpRequest& request) {
  asio::io_context io;
  aws::HttpClientOptions options;
  options.use_env_proxy = false;
  aws::HttpClient client(io.get_executor(), options);
  auto answer = asio::co_spawn(io, client.send(request), asio::use_future);
  io.run();
  return answer.get();
}

int probe(const std::string& url) {
  aws::HttpRequest request;
  try {
    request.url = aws::Url::parse(url);
  } catch (const aws::AwsError&) {
    std::cerr << "sluice health: --url: got '" << common::redact_password(url)
              << "', expected http://host:port/healthz\n";
    return 2;
  }
  request.timeout = std::chrono::seconds(5);
  try {
    const auto response = send_once(request);
    if (response.status == 200) return 0;
    std::cerr << "sluice health: " << common::redact_password(url) << " answered "
              << response.status << "\n";
  } catch (const std::exception& e) {
    std::cerr << "sluice health: " << common::redact_password(url) << ": "
              << common::redact_secret(e.what(), url) << "\n";
  }
  return 1;
}

}  // namespace sluice::app
