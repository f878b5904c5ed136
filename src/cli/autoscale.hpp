#pragma once
// `sluice autoscale`: the in-flight scaling signal for a queue (the ECS in-flight
// autoscaling pattern: desired tasks from the messages being worked on, not the backlog),
// printed once, served continuously (Prometheus gauges, a JSON document for KEDA's
// metrics-api scaler) or published to CloudWatch (TaskUtilization, for ECS target
// tracking).
#include <string>
#include <vector>

#include "app/autoscale_sampler.hpp"
#include "driver/verbs.hpp"
#include "sluice/scale/in_flight.hpp"

namespace sluice::app {

struct AutoscaleOptions {
  // The queue is the chosen source's (its driver's flags, driver/verbs.hpp); the AWS
  // region serves an SQS queue, ECS and CloudWatch alike.
  std::string region;
  // the signal
  std::string period = "1m";
  int periods = 5;
  int spare = 1;
  double capacity = 1;
  long running = -1;  // -1: read from ECS
  std::string ecs_cluster;
  std::string ecs_service;
  std::string ecs_endpoint_url;
  double min_backlog = 0;
  std::string min_oldest_age = "0s";
  std::string from = "queue";  // or "cloudwatch" (AWS/SQS one-minute statistics)
  std::string sample_every;    // empty: period / 6, from 100ms to 10s
  // outputs
  bool once = false;
  std::string serve;                 // HOST:PORT
  std::string cloudwatch_namespace;  // PutMetricData TaskUtilization
  std::string cloudwatch_endpoint_url;
  std::string output = "text";  // or json
};

// The queue is read by the one source whose flag was given.
int run_autoscale(const AutoscaleOptions& options, const std::vector<driver::SourceVerbs>& sources);

}  // namespace sluice::app
