// The ceiling of bench_pipeline: a bare client doing no work, in its own process so the
// harness times it from outside like every other contender. LOOPS overlapping receive
// loops ask what the container asks for (10 messages, all attributes); each batch is
// deleted without waiting; it exits once COUNT messages are deleted.
// Usage: bench_sqs_raw ENDPOINT QUEUE_URL COUNT LOOPS
#include <cstdio>
#include <cstdlib>

#include "bench_support.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s ENDPOINT QUEUE_URL COUNT LOOPS\n", argv[0]);
    return 2;
  }
  boost::asio::io_context io;
  sluice::sqs::SqsClientOptions options;
  options.endpoint_url = argv[1];
  options.region = "us-east-1";
  // The emulator accepts any signature; these are placeholders, not secrets.
  options.credentials =
      sluice::aws::make_static_credentials({"AKIDLOCAL", "local-secret", "", {}, "bench"});
  options.http.use_env_proxy = false;
  auto client = std::make_shared<sluice::sqs::SqsClient>(io.get_executor(), options);
  sluice::bench::ceiling(io, client, argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  return 0;
}
