// The `sluice` command line.
#include <CLI/CLI.hpp>
#include <cstdlib>

#include "app/demo.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "sluice: drain message queues into databases, fast, bounded, exactly once per record"};
  app.require_subcommand(1);

  sluice::app::RoundTripOptions round_trip;
  auto* demo =
      app.add_subcommand("round-trip",
                         "Create a queue, publish events, drain them with overlapping long polls, "
                         "verify and summarize");
  demo->add_option("--endpoint-url", round_trip.endpoint_url,
                   "SQS endpoint (default: AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL, profile, AWS)");
  demo->add_option("--region", round_trip.region, "AWS region (default: AWS_REGION, profile)");
  demo->add_option("--queue", round_trip.queue_name, "queue name")->capture_default_str();
  demo->add_option("--messages", round_trip.messages, "messages to publish")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  demo->add_option("--concurrent-receives", round_trip.concurrent_receives,
                   "long polls in flight at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  demo->add_flag("--keep-queue", round_trip.keep_queue, "do not delete the queue afterwards");

  CLI11_PARSE(app, argc, argv);
  if (*demo) return sluice::app::run_round_trip(round_trip);
  return EXIT_FAILURE;
}
