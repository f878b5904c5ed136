// `sluice autoscale` against the SQS emulator: the in-flight signal for a queue holding a
// known number of messages in flight, the capacity and gate variants, the served
// Prometheus and JSON endpoints, and the CloudWatch/ECS paths against loopback
// servers that answer as AWS does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "../support/http_server.hpp"
#include "../support/local_sqs.hpp"
#include "../support/process.hpp"
#include "../support/run.hpp"
#include "../support/wait.hpp"
#include "sluice/aws/http.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::pair<int, std::string> run(const std::string& command) {
  return test::run_with_status(command);
}

const std::string kEnv =
    "AWS_ACCESS_KEY_ID=AKIDLOCAL AWS_SECRET_ACCESS_KEY=local-secret AWS_REGION=us-east-1 ";

// The last line that is a JSON object.
json last_json(const std::string& text) {
  const auto at = text.rfind("\n{");
  const auto start = text.starts_with("{") && at == std::string::npos ? 0 : at + 1;
  return json::parse(text.substr(start, text.find('\n', start) - start));
}

class AutoscaleTest : public ::testing::Test {
 protected:
  // A queue of 20 messages, 7 of them received and held (in flight for 10 minutes).
  void SetUp() override {
    auto options = test::emulator_client_options();
    client_.emplace(io_.get_executor(), options);
    const std::string name = test::unique_queue_name("autoscale");
    url_ = test::run(io_, client_->create_queue(name, {}));
    for (int i = 0; i < 20; ++i) {
      sqs::SendMessageEntry entry;
      entry.body = "m" + std::to_string(i);
      test::run(io_, client_->send_message(url_, entry));
    }
    int held = 0;
    while (held < 7) {
      sqs::ReceiveMessageRequest receive;
      receive.queue_url = url_;
      receive.max_messages = 7 - held;
      receive.wait_time_seconds = 1;
      receive.visibility_timeout = 600;
      held += static_cast<int>(test::run(io_, client_->receive_message(receive)).size());
    }
    const auto attributes = test::run(io_, client_->get_queue_attributes(url_));
    ASSERT_EQ(attributes.at("ApproximateNumberOfMessagesNotVisible"), "7");
    ASSERT_EQ(attributes.at("ApproximateNumberOfMessages"), "13");
  }
  std::string autoscale(const std::string& flags) const {
    return kEnv + SLUICE_BINARY + " autoscale --queue-url " + url_ + " --endpoint-url " +
           test::Emulator::shared().endpoint() + " " + flags;
  }

  boost::asio::io_context io_;
  std::optional<sqs::SqsClient> client_;
  std::string url_;
};

}  // namespace

TEST_F(AutoscaleTest, OnceGivesTheSeedsNumbers) {
  // Capacity 1: desired = max of the period averages of in-flight + spare = 7 + 2 = 9;
  // utilization = 100 x 9 / 10 running = 90 %.
  auto [code, text] = run(autoscale(
      "--once --period 2s --periods 3 --running 10 --spare 2 --sample-every 250ms --output json"));
  ASSERT_EQ(code, 0) << text;
  const json signal = last_json(text);
  EXPECT_EQ(signal["desired_tasks"], 9) << text;
  EXPECT_DOUBLE_EQ(signal["utilization_percent"].get<double>(), 90.0) << text;
  EXPECT_DOUBLE_EQ(signal["in_flight_max_average"].get<double>(), 7.0) << text;
  EXPECT_EQ(signal["running"], 10);
  EXPECT_EQ(signal["spare"], 2);
  EXPECT_EQ(signal["period_averages"], json::parse("[7.0, 7.0, 7.0]")) << text;
  // 6 s sampled every 250 ms: 24 samples, each 7 in flight and 13 visible.
  ASSERT_EQ(signal["samples"].size(), 24u) << text;
  for (const auto& sample : signal["samples"]) {
    EXPECT_EQ(sample["in_flight"], 7.0);
    EXPECT_EQ(sample["visible"], 13.0);
  }
  EXPECT_LT(signal["samples"].back()["at_s"].get<double>(), 6.0);

  // The text output says the same.
  std::tie(code, text) = run(autoscale("--once --period 1s --periods 1 --running 10 --spare 2"));
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("desired_tasks          9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("utilization_percent    90\n"), std::string::npos) << text;
}

TEST_F(AutoscaleTest, CapacityAndGates) {
  // Three messages per task: 7 / 3 + 1 spare = 3.33 tasks -> 4; 33.3 % of 10.
  auto [code, text] = run(autoscale(
      "--once --period 1s --periods 2 --running 10 --spare 1 --capacity 3 --output json"));
  ASSERT_EQ(code, 0) << text;
  json signal = last_json(text);
  EXPECT_EQ(signal["desired_tasks"], 4) << text;
  EXPECT_NEAR(signal["utilization_percent"].get<double>(), 100.0 * (7.0 / 3 + 1) / 10, 1e-9);
  EXPECT_EQ(signal["capacity"], 3.0);

  // Backlog gate: 13 visible is under 100: no scaling out past the 2 running.
  std::tie(code, text) = run(autoscale(
      "--once --period 1s --periods 1 --running 2 --spare 2 --min-backlog 100 --output json"));
  ASSERT_EQ(code, 0) << text;
  signal = last_json(text);
  EXPECT_TRUE(signal["gated"].get<bool>()) << text;
  EXPECT_EQ(signal["desired_tasks"], 2) << text;
  EXPECT_DOUBLE_EQ(signal["utilization_percent"].get<double>(), 100.0);
  EXPECT_NE(signal["gate"].get<std::string>().find("backlog 13 below 100"), std::string::npos);
  // Past the gate (13 >= 10): the full signal.
  std::tie(code, text) = run(autoscale(
      "--once --period 1s --periods 1 --running 2 --spare 2 --min-backlog 10 --output json"));
  ASSERT_EQ(code, 0) << text;
  signal = last_json(text);
  EXPECT_FALSE(signal["gated"].get<bool>()) << text;
  EXPECT_EQ(signal["desired_tasks"], 9) << text;
  EXPECT_DOUBLE_EQ(signal["utilization_percent"].get<double>(), 450.0);
  // A closed gate still lets it scale in: 2 running, a needed 9, 20 running -> 9.
  std::tie(code, text) = run(autoscale(
      "--once --period 1s --periods 1 --running 20 --spare 2 --min-backlog 100 --output json"));
  signal = last_json(text);
  EXPECT_EQ(signal["desired_tasks"], 9) << text;
  EXPECT_FALSE(signal["gated"].get<bool>()) << text;
}

TEST_F(AutoscaleTest, BadFlagsNameTheFlagAndExitTwo) {
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--once --period 2x --running 1", "--period: got '2x'"},
           {"--once --period 0s --running 1", "--period: got '0s'"},
           {"--once --capacity 0 --running 1", "--capacity"},
           {"--once", "--running N, or --ecs-cluster and --ecs-service"},
           {"--once --running 1 --min-oldest-age 5m", "--min-oldest-age: needs --from cloudwatch"},
           {"--once --running 1 --from cloudwatch --period 90s", "whole minutes"},
           {"--once --serve 127.0.0.1:0 --running 1", "--once and --serve"},
           {"--serve 127.0.0.1 --running 1", "--serve: got '127.0.0.1'"},
       }) {
    const auto [code, text] = run(autoscale(flags));
    EXPECT_EQ(code, 2) << flags << "\n" << text;
    EXPECT_NE(text.find(expected), std::string::npos) << flags << "\n" << text;
  }
  const auto [code, text] =
      run(kEnv + SLUICE_BINARY + " autoscale --once --running 1 --period 1s --periods 1 " +
          "--endpoint-url " + test::Emulator::shared().endpoint() + " --queue-url " +
          test::Emulator::shared().queue_url("no-such-queue-autoscale"));
  EXPECT_EQ(code, 2) << text;
}

TEST_F(AutoscaleTest, ServesPrometheusAndKedaJson) {
  const int port = test::free_port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::string command =
      autoscale("--serve " + address + " --period 1s --periods 2 --running 10 --spare 2");
  const pid_t pid = test::spawn_child({"/bin/sh", "-c", "exec env " + command}, -1, -1, -1);
  boost::asio::io_context io;
  aws::HttpClient http(io.get_executor());
  auto get = [&](const std::string& path) {
    aws::HttpRequest request;
    request.url = aws::Url::parse("http://" + address + path);
    try {
      return test::run(io, http.send(request));
    } catch (const std::exception&) {
      return aws::HttpResponse{};
    }
  };
  json doc;
  EXPECT_TRUE(test::wait_until(
      [&] {
        const auto response = get("/autoscale");
        if (response.status != 200) return false;
        doc = json::parse(response.body);
        return doc.contains("desired_tasks") && doc["samples"].size() >= 4;
      },
      20s))
      << doc.dump();
  EXPECT_EQ(doc["desired_tasks"], 9) << doc.dump();
  EXPECT_DOUBLE_EQ(doc["utilization_percent"].get<double>(), 90.0);
  const auto metrics = get("/metrics");
  EXPECT_NE(metrics.body.find("sluice_autoscale_desired_tasks 9\n"), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("sluice_autoscale_task_utilization_percent 90\n"), std::string::npos)
      << metrics.body;
  EXPECT_EQ(get("/readyz").status, 200);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(AutoscaleTest, RunningFromEcsAndUtilizationToCloudWatch) {
  test::HttpServer aws_endpoint([](const test::ServerRequest& r) -> test::ServerResponse {
    if (r.headers.count("x-amz-target"))
      return {
          200,
          {{"Content-Type", "application/x-amz-json-1.1"}},
          R"({"services":[{"serviceName":"consumer","runningCount":10,"desiredCount":10}],"failures":[]})"};
    if (r.body.find("Action=GetMetricData") != std::string::npos)
      return {200,
              {{"Content-Type", "text/xml"}},
              "<GetMetricDataResponse><GetMetricDataResult><MetricDataResults>"
              "<member><Id>inflight</Id><Timestamps><member>t1</member><member>t2</member>"
              "<member>t3</member></Timestamps><Values><member>4.5</member><member>7.0</member>"
              "<member>6.0</member></Values><StatusCode>Complete</StatusCode></member>"
              "<member><Id>visible</Id><Timestamps><member>t3</member></Timestamps><Values>"
              "<member>300</member></Values><StatusCode>Complete</StatusCode></member>"
              "<member><Id>oldest</Id><Timestamps><member>t3</member></Timestamps><Values>"
              "<member>42</member></Values><StatusCode>Complete</StatusCode></member>"
              "</MetricDataResults></GetMetricDataResult></GetMetricDataResponse>"};
    return {200, {{"Content-Type", "text/xml"}}, "<PutMetricDataResponse/>"};
  });
  const std::string aws_flags = " --ecs-cluster prod --ecs-service consumer --ecs-endpoint-url " +
                                aws_endpoint.url() + " --cloudwatch-endpoint-url " +
                                aws_endpoint.url();
  auto [code, text] = run(autoscale(
      "--once --period 1s --periods 2 --spare 2 --cloudwatch Sluice/Scaling" + aws_flags));
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("running                10\n"), std::string::npos) << text;
  auto requests = aws_endpoint.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].headers.at("x-amz-target"),
            "AmazonEC2ContainerServiceV20141113.DescribeServices");
  EXPECT_EQ(requests[0].body, R"({"cluster": "prod", "services": ["consumer"]})");
  const std::string queue_name = url_.substr(url_.rfind('/') + 1);
  EXPECT_EQ(requests[1].body,
            "Action=PutMetricData&Version=2010-08-01&Namespace=Sluice%2FScaling&"
            "MetricData.member.1.MetricName=TaskUtilization&"
            "MetricData.member.1.Dimensions.member.1.Name=QueueName&"
            "MetricData.member.1.Dimensions.member.1.Value=" +
                queue_name +
                "&MetricData.member.1.Dimensions.member.2.Name=ClusterName&"
                "MetricData.member.1.Dimensions.member.2.Value=prod&"
                "MetricData.member.1.Dimensions.member.3.Name=ServiceName&"
                "MetricData.member.1.Dimensions.member.3.Value=consumer&"
                "MetricData.member.1.Value=90.0&MetricData.member.1.Unit=Percent");

  // From CloudWatch's statistics: averages 4.5, 7, 6 -> 7 + 2 = 9 of 10; the age gate
  // (42 s) is past 30 s.
  std::tie(code, text) =
      run(autoscale("--once --from cloudwatch --period 1m --periods 3 "
                    "--spare 2 --min-oldest-age 30s --output json" +
                    aws_flags));
  ASSERT_EQ(code, 0) << text;
  json signal = last_json(text);
  EXPECT_EQ(signal["desired_tasks"], 9) << text;
  EXPECT_EQ(signal["period_averages"], json::parse("[4.5, 7.0, 6.0]")) << text;
  EXPECT_FALSE(signal["gated"].get<bool>());
  // Under a 60 s age gate: held at the 10 running... which is above 9: not gated either;
  // with spare 5 (12 needed) it is.
  std::tie(code, text) =
      run(autoscale("--once --from cloudwatch --period 1m --periods 3 "
                    "--spare 5 --min-oldest-age 1m --output json" +
                    aws_flags));
  ASSERT_EQ(code, 0) << text;
  signal = last_json(text);
  EXPECT_TRUE(signal["gated"].get<bool>()) << text;
  EXPECT_EQ(signal["desired_tasks"], 10) << text;
  EXPECT_NE(signal["gate"].get<std::string>().find("oldest message age 42s below 60s"),
            std::string::npos)
      << text;
}

TEST_F(AutoscaleTest, NoCloudWatchDataIsNoValueAndASignalDuringOnceIsNotASuccess) {
  // CloudWatch answering with no data points (a wrong queue name or region): an error,
  // not "nothing in flight" (which would scale the service in).
  test::HttpServer empty([](const test::ServerRequest&) -> test::ServerResponse {
    return {200,
            {{"Content-Type", "text/xml"}},
            "<GetMetricDataResponse><GetMetricDataResult><MetricDataResults>"
            "<member><Id>inflight</Id><Timestamps/><Values/><StatusCode>Complete</StatusCode>"
            "</member></MetricDataResults></GetMetricDataResult></GetMetricDataResponse>"};
  });
  auto [code, text] =
      run(autoscale("--once --from cloudwatch --period 1m --running 4 "
                    "--cloudwatch-endpoint-url " +
                    empty.url()));
  EXPECT_EQ(code, 1) << text;
  EXPECT_NE(text.find("no ApproximateNumberOfMessagesNotVisible data"), std::string::npos) << text;
  EXPECT_EQ(text.find("desired_tasks"), std::string::npos) << text;

  // SIGTERM while --once samples: exit 128 + 15, no value printed. A fake SQS counts
  // the samples taken, proving the work had started.
  test::HttpServer sqs([](const test::ServerRequest&) -> test::ServerResponse {
    return {
        200,
        {{"Content-Type", "application/x-amz-json-1.0"}},
        R"({"Attributes":{"ApproximateNumberOfMessages":"3","ApproximateNumberOfMessagesNotVisible":"2"}})"};
  });
  const std::string command = kEnv + SLUICE_BINARY + " autoscale --queue-url " +
                              sqs.url("/000000000000/q") + " --endpoint-url " + sqs.url() +
                              " --once --period 20s --periods 1 --running 1 --sample-every 100ms";
  const int out = ::open("/dev/null", O_WRONLY);
  const pid_t pid = test::spawn_child({"/bin/sh", "-c", "exec env " + command}, -1, out, out);
  ::close(out);
  ASSERT_TRUE(test::wait_until([&] { return sqs.requests().size() >= 3; }, 10s));
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

namespace {

// The verbs that take their queue from a source (publish, queue stats, queue create,
// autoscale) are answered by the source whose flag was given, with that source's
// checks; with none (or two, for autoscale) the usage error names every source's flag.
TEST(AutoscaleAndOtherVerbs, EachTakesItsQueueFromTheSourceWhoseFlagWasGiven) {
  const std::string sluice = SLUICE_BINARY;
  auto [code, text] = run(sluice + " publish --generate 1 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("give --queue-url (SQS), --topic-arn (SNS), or --amqp-url (or "
                      "SLUICE_AMQP_URL) with --routing-key (RabbitMQ)"),
            std::string::npos)
      << text;
  std::tie(code, text) = run("env -u SLUICE_AMQP_URL " + sluice + " queue stats 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("give --queue-url (SQS), or --amqp-url (or SLUICE_AMQP_URL) with --queue "
                      "(RabbitMQ)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("--topic-arn"), std::string::npos) << "only this verb's flags: " << text;
  std::tie(code, text) = run(sluice +
                             " autoscale --running 1 --once --queue-url "
                             "http://127.0.0.1:9/000000000000/q --amqp-url amqp://127.0.0.1 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("give one queue"), std::string::npos) << text;
  EXPECT_NE(text.find("not several"), std::string::npos) << text;
  // The chosen source's own checks.
  std::tie(code, text) =
      run(sluice + " autoscale --running 1 --once --amqp-url amqp://127.0.0.1 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("--queue and --management-url are needed"), std::string::npos) << text;
  std::tie(code, text) = run(sluice + " publish --amqp-url amqp://127.0.0.1 --generate 1 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("--routing-key: missing"), std::string::npos) << text;
  std::tie(code, text) = run(sluice +
                             " publish --amqp-url amqp://127.0.0.1 --routing-key q "
                             "--large-payload-bucket b --generate 1 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("--large-payload-bucket: only with --queue-url"), std::string::npos) << text;
  std::tie(code, text) = run(sluice +
                             " autoscale --running 1 --once --from cloudwatch "
                             "--period 1m --amqp-url amqp://127.0.0.1 --queue q "
                             "--management-url http://127.0.0.1:9 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("this queue has no CloudWatch statistics"), std::string::npos) << text;
  // A password in a URL typed without its scheme is not echoed.
  std::tie(code, text) = run(sluice +
                             " publish --amqp-url 'bob:S3CRET@127.0.0.1' --routing-key q "
                             "--generate 1 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_EQ(text.find("S3CRET"), std::string::npos) << text;
  // An SQS queue's name and --fifo agree, or it is bad usage before any request.
  std::tie(code, text) = run(sluice +
                             " queue create --name plain --fifo --endpoint-url "
                             "http://127.0.0.1:9 --region us-east-1 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("ends in .fifo"), std::string::npos) << text;
  // A source's own verbs are on the command line beside the shared ones.
  std::tie(code, text) = run(sluice + " --help 2>&1");
  EXPECT_EQ(code, 0);
  for (const char* verb : {"round-trip", "topic", "bucket", "publish", "queue", "autoscale"})
    EXPECT_NE(text.find(verb), std::string::npos) << verb;
}

}  // namespace
