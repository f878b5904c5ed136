// The autoscale signal's AWS calls (CloudWatch PutMetricData and GetMetricData, ECS
// DescribeServices), built by Sluice's clients and by botocore for the same randomized
// inputs, sent to one loopback server: every request must be the same bytes (method,
// path, content type, target, body) and signed for the same service and region.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cmath>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "../support/http_server.hpp"
#include "../support/run.hpp"
#include "sluice/cloudwatch/client.hpp"
#include "sluice/ecs/client.hpp"

using namespace sluice;
using nlohmann::json;

namespace {

std::shared_ptr<aws::CredentialsProvider> test_credentials() {
  return aws::make_static_credentials(
      {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "", {}, "test"});
}

// Answers every call as AWS would, so that both clients go on.
test::ServerResponse answer(const test::ServerRequest& r) {
  auto target = r.headers.find("x-amz-target");
  if (target != r.headers.end())
    return {
        200,
        {{"Content-Type", "application/x-amz-json-1.1"}},
        R"({"services":[{"serviceName":"consumer","serviceArn":"arn:aws:ecs:us-east-1:1:service/c/consumer","status":"ACTIVE","desiredCount":12,"runningCount":10,"pendingCount":2}],"failures":[]})"};
  if (r.body.find("Action=GetMetricData") != std::string::npos)
    return {200,
            {{"Content-Type", "text/xml"}},
            "<GetMetricDataResponse xmlns=\"http://monitoring.amazonaws.com/doc/2010-08-01/\">"
            "<GetMetricDataResult><MetricDataResults><member><Id>inflight</Id><Label>x</Label>"
            "<Timestamps><member>2026-12-01T10:00:00Z</member><member>2026-12-01T10:01:00Z</member>"
            "</Timestamps><Values><member>6.5</member><member>7.0</member></Values>"
            "<StatusCode>Complete</StatusCode></member></MetricDataResults><Messages/>"
            "</GetMetricDataResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>"
            "</GetMetricDataResponse>"};
  return {200,
          {{"Content-Type", "text/xml"}},
          "<PutMetricDataResponse xmlns=\"http://monitoring.amazonaws.com/doc/2010-08-01/\">"
          "<ResponseMetadata><RequestId>2</RequestId></ResponseMetadata></PutMetricDataResponse>"};
}

struct Generator {
  std::mt19937_64 rng{20261201};
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  std::string name(int max_len) {
    static const std::vector<std::string> pieces = {"a", "Z", "0",  "-", "_", ".", " ", "/",
                                                    ":", "é", "中", "&", "=", "+", "%", "\""};
    std::string out = "m";
    for (int n = pick(max_len); n > 0; --n) out += pieces[pick(static_cast<int>(pieces.size()))];
    return out;
  }
  double value() {
    switch (pick(6)) {
      case 0:
        return pick(200);  // whole numbers: 90.0
      case 1:
        return pick(10000) / 100.0;  // 12.34
      case 2:
        return std::ldexp(std::uniform_real_distribution<double>(1, 2)(rng), pick(120) - 60);
      case 3:
        return -std::uniform_real_distribution<double>(0, 1e6)(rng);
      case 4:
        return std::pow(10.0, pick(40) - 20);  // 1e-05, 1e+16, ...
      default:
        return std::uniform_real_distribution<double>(0, 1)(rng);
    }
  }
};

}  // namespace

TEST(SigV4Botocore, CloudWatchAndEcsRequestsAreBotocoresBytes) {
  if (access("/usr/bin/python3", X_OK) != 0 ||
      std::system("/usr/bin/python3 -c 'import botocore' 2>/dev/null") != 0)
    FAIL() << "python3-botocore is required (scripts/install-deps.sh installs it)";
  test::HttpServer server(answer);
  Generator gen;
  std::vector<json> cases;
  boost::asio::io_context io;
  cloudwatch::CloudWatchClientOptions cw_options;
  cw_options.region = "us-east-1";
  cw_options.endpoint_url = server.url();
  cw_options.credentials = test_credentials();
  ecs::EcsClientOptions ecs_options;
  ecs_options.region = "us-east-1";
  ecs_options.endpoint_url = server.url();
  ecs_options.credentials = test_credentials();
  cloudwatch::CloudWatchClient cloudwatch(io.get_executor(), cw_options);
  ecs::EcsClient ecs(io.get_executor(), ecs_options);
  static const char* kUnits[] = {"", "Percent", "Count", "Seconds", "None"};
  static const char* kStats[] = {"Average", "Maximum", "Minimum", "Sum", "SampleCount", "p99"};

  for (int i = 0; i < 40; ++i) {
    std::vector<cloudwatch::MetricDatum> data;
    json args = {{"Namespace", "Sluice/" + gen.name(6)}};
    json& metric_data = args["MetricData"] = json::array();
    for (int d = 1 + gen.pick(3); d > 0; --d) {
      cloudwatch::MetricDatum datum;
      datum.metric_name = gen.name(10);
      json item = {{"MetricName", datum.metric_name}};
      const int dims = gen.pick(4);
      if (dims > 0) item["Dimensions"] = json::array();
      for (int k = 0; k < dims; ++k) {
        datum.dimensions.push_back({gen.name(5), gen.name(12)});
        item["Dimensions"].push_back(
            {{"Name", datum.dimensions.back().name}, {"Value", datum.dimensions.back().value}});
      }
      datum.value = gen.value();
      item["Value"] = datum.value;
      datum.unit = kUnits[gen.pick(5)];
      if (!datum.unit.empty()) item["Unit"] = datum.unit;
      metric_data.push_back(item);
      data.push_back(datum);
    }
    cases.push_back({{"call", "put_metric_data"}, {"args", args}});
    test::run(io, cloudwatch.put_metric_data(args["Namespace"], data));
  }
  for (int i = 0; i < 15; ++i) {
    std::vector<cloudwatch::MetricQuery> queries;
    json list = json::array();
    for (int q = 1 + gen.pick(3); q > 0; --q) {
      cloudwatch::MetricQuery query{"q" + std::to_string(q) + "x" + std::to_string(gen.pick(99)),
                                    "AWS/SQS",
                                    gen.name(8),
                                    {{"QueueName", gen.name(10)}},
                                    60 * (1 + gen.pick(5)),
                                    kStats[gen.pick(6)]};
      queries.push_back(query);
      list.push_back(
          {{"Id", query.id},
           {"MetricStat",
            {{"Metric",
              {{"Namespace", query.metric_namespace},
               {"MetricName", query.metric_name},
               {"Dimensions", {{{"Name", "QueueName"}, {"Value", query.dimensions[0].value}}}}}},
             {"Period", query.period_seconds},
             {"Stat", query.stat}}}});
    }
    const long start = 1'796'000'000 + gen.pick(1'000'000);
    const long end = start + 60 * (1 + gen.pick(60));
    cases.push_back({{"call", "get_metric_data"},
                     {"args",
                      {{"MetricDataQueries", list},
                       {"StartTime", start},
                       {"EndTime", end},
                       {"ScanBy", "TimestampAscending"}}}});
    const auto series = test::run(
        io, cloudwatch.get_metric_data(queries, std::chrono::system_clock::from_time_t(start),
                                       std::chrono::system_clock::from_time_t(end)));
    ASSERT_EQ(series.size(), queries.size());
  }
  for (int i = 0; i < 15; ++i) {
    const std::string cluster = gen.pick(4) == 0 ? "" : gen.name(12);
    std::vector<std::string> services;
    for (int s = 1 + gen.pick(3); s > 0; --s) services.push_back(gen.name(14));
    json args = json::object();
    if (!cluster.empty()) args["cluster"] = cluster;
    args["services"] = services;
    cases.push_back({{"call", "describe_services"}, {"args", args}});
    const auto result = test::run(io, ecs.describe_services(cluster, services));
    ASSERT_EQ(result.services.size(), 1u);
    EXPECT_EQ(result.services[0].running_count, 10);
    EXPECT_EQ(result.services[0].desired_count, 12);
  }
  const std::size_t ours = server.requests().size();
  ASSERT_EQ(ours, cases.size());

  // nlohmann keeps object keys sorted; botocore keeps the caller's order: the cases are
  // written with keys in the order Sluice sends them (ordered_json below).
  const std::string path =
      ::testing::TempDir() + "/sluice-botocore-calls-" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    for (const auto& c : cases) {
      // Re-emit each case with the member order of the wire (json sorts keys).
      nlohmann::ordered_json ordered;
      ordered["call"] = c["call"];
      const json& a = c["args"];
      nlohmann::ordered_json args;
      if (c["call"] == "put_metric_data") {
        args["Namespace"] = a["Namespace"];
        args["MetricData"] = nlohmann::ordered_json::array();
        for (const auto& d : a["MetricData"]) {
          nlohmann::ordered_json item;
          item["MetricName"] = d["MetricName"];
          if (d.contains("Dimensions")) {
            item["Dimensions"] = nlohmann::ordered_json::array();
            for (const auto& dim : d["Dimensions"])
              item["Dimensions"].push_back({{"Name", dim["Name"]}, {"Value", dim["Value"]}});
          }
          item["Value"] = d["Value"];
          if (d.contains("Unit")) item["Unit"] = d["Unit"];
          args["MetricData"].push_back(item);
        }
      } else if (c["call"] == "get_metric_data") {
        args["MetricDataQueries"] = nlohmann::ordered_json::array();
        for (const auto& q : a["MetricDataQueries"]) {
          nlohmann::ordered_json metric;
          metric["Namespace"] = q["MetricStat"]["Metric"]["Namespace"];
          metric["MetricName"] = q["MetricStat"]["Metric"]["MetricName"];
          metric["Dimensions"] = nlohmann::ordered_json::array();
          for (const auto& dim : q["MetricStat"]["Metric"]["Dimensions"])
            metric["Dimensions"].push_back({{"Name", dim["Name"]}, {"Value", dim["Value"]}});
          nlohmann::ordered_json stat;
          stat["Metric"] = metric;
          stat["Period"] = q["MetricStat"]["Period"];
          stat["Stat"] = q["MetricStat"]["Stat"];
          nlohmann::ordered_json query;
          query["Id"] = q["Id"];
          query["MetricStat"] = stat;
          args["MetricDataQueries"].push_back(query);
        }
        args["StartTime"] = a["StartTime"];
        args["EndTime"] = a["EndTime"];
        args["ScanBy"] = a["ScanBy"];
      } else {
        if (a.contains("cluster")) args["cluster"] = a["cluster"];
        args["services"] = a["services"];
      }
      ordered["args"] = args;
      out << ordered.dump() << "\n";
    }
  }
  const std::string cmd = "/usr/bin/python3 " + std::string(SLUICE_SOURCE_DIR) +
                          "/tests/tools/botocore_calls.py " + server.url() + " " + path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::remove(path.c_str());

  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2 * ours);
  auto header = [](const test::ServerRequest& r, const char* name) {
    auto it = r.headers.find(name);
    return it == r.headers.end() ? std::string("<none>") : it->second;
  };
  // "Credential=AKID/20261201/us-east-1/monitoring/aws4_request": the scope without the date.
  auto scope = [&](const test::ServerRequest& r) {
    const std::string auth = header(r, "authorization");
    const auto at = auth.find("Credential=");
    const auto end = auth.find(',', at);
    std::string credential = auth.substr(at, end - at);
    const auto first = credential.find('/'), second = credential.find('/', first + 1);
    return credential.substr(0, first) + credential.substr(second);
  };
  for (std::size_t i = 0; i < ours; ++i) {
    const auto& mine = requests[i];
    const auto& theirs = requests[ours + i];
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].dump());
    EXPECT_EQ(mine.method, theirs.method);
    EXPECT_EQ(mine.target, theirs.target);
    EXPECT_EQ(header(mine, "content-type"), header(theirs, "content-type"));
    EXPECT_EQ(header(mine, "x-amz-target"), header(theirs, "x-amz-target"));
    EXPECT_EQ(scope(mine), scope(theirs));
    EXPECT_EQ(mine.body, theirs.body);
  }
}

TEST(SigV4Botocore, CloudWatchValuesAreWrittenAsPythonWritesThem) {
  EXPECT_EQ(cloudwatch::format_double(90), "90.0");
  EXPECT_EQ(cloudwatch::format_double(0.1), "0.1");
  EXPECT_EQ(cloudwatch::format_double(1e16), "1e+16");
  EXPECT_EQ(cloudwatch::format_double(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(cloudwatch::format_double(0.0001), "0.0001");
  EXPECT_EQ(cloudwatch::format_double(0.00001), "1e-05");
  EXPECT_EQ(cloudwatch::format_double(-2.5), "-2.5");
  EXPECT_THROW(cloudwatch::format_double(std::nan("")), std::invalid_argument);
}
