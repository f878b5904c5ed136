// deploy/prometheus and deploy/grafana against the real thing: promtool checks and
// unit-tests the rules, then a real Prometheus (Debian's, on a private loopback port)
// scrapes a live `sluice run` of three pipelines (SQS with a dead-letter queue into
// SQLite, RabbitMQ into SQLite, a file into SQLite), evaluates the rules, and answers every
// dashboard query and every rule's expression through its HTTP API. A query that returns no series
// (a misspelled metric, a label that is not there) fails the test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "aws/text.hpp"
#include "cli/publish.hpp"
#include "observe/http_get.hpp"
#include "sluice/aws/http.hpp"
#include "support/pipeline.hpp"
#include "support/process.hpp"
#include "support/rabbitmq.hpp"
#include "support/wait.hpp"

using namespace sluice;
using nlohmann::json;

namespace {

const std::string kDeploy = std::string(SLUICE_SOURCE_DIR) + "/deploy/";

class DeployPrometheus : public test::PipelineFixture {};

// GET url?query=... on Prometheus' API: the parsed answer (an empty object when it
// did not answer, or not in JSON).
json query(const std::string& api, const std::string& promql) {
  const auto local_url =
      observe::parse_local_url(api + "/api/v1/query?query=" + text::uri_encode(promql, false));
  try {
    // A Prometheus still starting answers 503 with a text body.
    auto answer = json::parse(observe::http_request(local_url).body, nullptr, false);
    return answer.is_object() ? answer : json::object();
  } catch (const std::exception&) {
    return json::object();
  }
}

std::size_t series_of(const json& answer) {
  if (answer.value("status", "") != "success") return 0;
  const auto& result = answer["data"]["result"];
  return result.is_array() ? result.size() : 0;
}

// A dashboard query as Grafana sends it, with the variables of this test.
std::string as_sent(std::string expr) {
  expr = std::regex_replace(expr, std::regex(R"(\$__rate_interval)"), "30s");
  return std::regex_replace(expr, std::regex(R"(\$pipeline)"), ".*");
}

// Sluice's metric names in an expression (recorded series are sluice:...).
std::set<std::string> metric_names(const std::string& expr) {
  std::set<std::string> names;
  const std::regex name(R"(\bsluice_[a-z0-9_]+)");
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name); it != std::sregex_iterator();
       ++it)
    names.insert(it->str());
  return names;
}

// An alert's expression without its thresholds: each comparison made a `bool` one (every
// series kept, valued 0 or 1), what follows an `unless` and any `offset` left out (a
// Prometheus a minute old has no half hour of history). It returns series exactly when
// what the alert reads is there with the labels it joins on.
std::string without_thresholds(std::string expr) {
  expr = std::regex_replace(expr, std::regex(R"(\s+offset\s+[0-9]+[smhdwy])"), "");
  if (const auto unless = expr.find(" unless "); unless != std::string::npos) expr.resize(unless);
  std::string out;
  int braces = 0;
  bool quoted = false;
  for (std::size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    out += c;
    if (c == '"') quoted = !quoted;
    if (quoted) continue;
    braces += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (braces > 0 || (c != '=' && c != '!' && c != '>' && c != '<')) continue;
    const bool two = i + 1 < expr.size() && expr[i + 1] == '=';
    if (two) out += expr[++i];
    if (two || c == '>' || c == '<') out += " bool";
  }
  return out;
}

}  // namespace

TEST(DeployPrometheusRules, AnAlertWithoutItsThresholdKeepsEverySeries) {
  EXPECT_EQ(
      without_thresholds(R"(max by (job) (x{state="a"}) > 0 and on (job) y < 0.8 * y offset 30m)"),
      R"(max by (job) (x{state="a"}) > bool 0 and on (job) y < bool 0.8 * y)");
  EXPECT_EQ(without_thresholds(R"(up{job!="a"} == 0 unless on (job) z == 1)"),
            R"(up{job!="a"} == bool 0)");
  EXPECT_EQ(without_thresholds("a >= 1 or b <= 2 or c != 3"),
            "a >= bool 1 or b <= bool 2 or c != bool 3");
}

TEST(DeployPrometheusRules, PromtoolChecksAndUnitTestsEveryAlert) {
  const auto check = test::run_with_status("cd " + kDeploy + "prometheus && promtool check rules " +
                                           "sluice.rules.yml 2>&1");
  EXPECT_EQ(check.first, 0) << check.second;
  const auto unit = test::run_with_status("cd " + kDeploy + "prometheus && promtool test rules " +
                                          "sluice.rules.test.yml 2>&1");
  EXPECT_EQ(unit.first, 0) << unit.second;
  // Every alert has a unit test.
  std::set<std::string> alerts, tested;
  for (const auto& group : YAML::LoadFile(kDeploy + "prometheus/sluice.rules.yml")["groups"])
    for (const auto& rule : group["rules"])
      if (rule["alert"]) {
        alerts.insert(rule["alert"].as<std::string>());
        EXPECT_TRUE(rule["annotations"]["runbook"]) << rule["alert"].as<std::string>();
      }
  for (const auto& t : YAML::LoadFile(kDeploy + "prometheus/sluice.rules.test.yml")["tests"])
    for (const auto& a : t["alert_rule_test"])
      if (a["exp_alerts"].size() > 0) tested.insert(a["alertname"].as<std::string>());
  EXPECT_EQ(alerts, tested) << "an alert without a test that fires it";
}

TEST_F(DeployPrometheus, EveryDashboardQueryAndRuleExpressionHasSeries) {
  auto& rabbit = test::RabbitMq::shared();
  const std::string queue = make_queue("obs-orders"), dlq = make_queue("obs-orders-dlq");
  const std::string amqp_queue = "obs-events-" + std::to_string(getpid());
  const std::string bin = SLUICE_BINARY,
                    dir = ::testing::TempDir() + "/sluice-obs-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  test::run_command(bin + " queue create --amqp-url '" + rabbit.uri() + "' --name " + amqp_queue);
  const int metrics_port = test::free_port(), prometheus_port = test::free_port();
  std::ofstream(dir + "/pipelines.yaml")
      << "metrics:\n  listen: 127.0.0.1:" << metrics_port
      << "\nlogging:\n  level: warn\n"
      // Traces to a collector that is not there: every span dropped, the traces panel
      // and the dropped-spans alert have their series.
      << "tracing:\n  otlp_endpoint: http://127.0.0.1:" << test::free_port() << "\n"
      << test::kInventoryNormalizeYaml << "sink:\n  type: sqlite\npipelines:\n"
      << "  orders:\n    source:\n      sqs:\n        queue_url: " << queue
      << "\n        endpoint_url: " << test::Emulator::shared().endpoint()
      << "\n        region: us-east-1\n        poll_wait: 1s\n        dead_letter_queue_url: "
      << dlq << "\n    sink:\n      sqlite:\n        path: " << dir << "/orders.db\n"
      << "  events:\n    source:\n      type: rabbitmq\n      rabbitmq:\n        url: "
      << rabbit.uri() << "\n        queue: " << amqp_queue
      << "\n    sink:\n      sqlite:\n        path: " << dir << "/events.db\n"
      << "  lines:\n    source:\n      type: file\n      file:\n        path: " << dir
      << "/lines.jsonl\n    sink:\n      sqlite:\n        path: " << dir << "/lines.db\n";
  {
    std::ofstream lines(dir + "/lines.jsonl");
    for (const auto& body : app::generate_events(100, 0.0, 0.0, 73).bodies) lines << body << "\n";
  }
  const pid_t sluice = test::spawn_quiet({bin, "run", "--config", dir + "/pipelines.yaml"});
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "rule_files:\n  - " << kDeploy << "prometheus/sluice.rules.yml\n"
      << "scrape_configs:\n  - job_name: sluice\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << metrics_port << "']\n";
  const pid_t prometheus = test::spawn_quiet(
      {"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml",
       "--storage.tsdb.path=" + dir + "/data",
       "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port), "--log.level=warn"});
  struct Stop {
    pid_t a, b;
    std::string dir;
    ~Stop() {
      for (pid_t p : {a, b}) {
        ::kill(p, SIGTERM);
        test::wait_exit(p);
      }
      std::filesystem::remove_all(dir);
    }
  } stop{sluice, prometheus, dir};
  const std::string api = "http://127.0.0.1:" + std::to_string(prometheus_port);

  auto value_of = [&](const std::string& promql) {
    const auto answer = query(api, promql);
    return series_of(answer) ? std::stod(answer["data"]["result"][0]["value"][1].get<std::string>())
                             : -1.0;
  };
  // Scraping first, then the work: its rates are seen while they happen.
  test::wait_until([&] { return value_of(R"(count_over_time(up{job="sluice"}[1m]))") >= 3; },
                   std::chrono::seconds(60));
  ASSERT_GE(value_of(R"(count_over_time(up{job="sluice"}[1m]))"), 3) << "Prometheus scrapes sluice";
  // Valid events, a tenth without the fields the pipeline requires (rejected, to the
  // dead-letter queue), a fifth repeated (duplicates).
  auto events = app::generate_events(300, 0.2, 0.0, 71);
  std::vector<sqs::SendMessageEntry> entries;
  for (std::size_t i = 0; i < events.bodies.size(); ++i) {
    sqs::SendMessageEntry e;
    e.body = i % 10 == 0 ? std::string(R"({"unexpected":true})") : events.bodies[i];
    entries.push_back(std::move(e));
  }
  sqs::Publisher publisher(client_, queue);
  for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
    ASSERT_TRUE(o.ok) << o.error_message;
  {
    std::ofstream out(dir + "/events.jsonl");
    for (const auto& body : app::generate_events(200, 0.2, 0.0, 72).bodies) out << body << "\n";
  }
  test::run_command(bin + " publish --amqp-url '" + rabbit.uri() + "' --routing-key " + amqp_queue +
                    " --file " + dir + "/events.jsonl 2>&1");

  // The work done while it watched: every record stored, the bad ones dead-lettered.
  test::wait_until(
      [&] {
        return value_of(R"(sum(sluice_records_written_total{pipeline="orders"}))") > 0 &&
               value_of(R"(sum(sluice_records_written_total{pipeline="events"}))") > 0 &&
               value_of("max(sluice_dead_letter_backlog_messages)") >= 30 &&
               value_of("count(sluice:messages_received:rate5m)") >= 2;
      },
      std::chrono::seconds(90));
  ASSERT_GT(value_of(R"(sum(sluice_records_written_total{pipeline="events"}))"), 0)
      << "Prometheus scraped the live pipelines";
  // The gauges the alerts read, with the values this run gives them.
  EXPECT_EQ(value_of("max(sluice_dead_letter_backlog_messages)"), 30) << "the 30 rejected";
  EXPECT_EQ(value_of("min(sluice_ready)"), 1) << "both pipelines ready";
  EXPECT_GE(value_of("max(max_over_time(sluice_oldest_message_age_seconds[1m]))"), 0);
  EXPECT_LT(value_of("max(max_over_time(sluice_oldest_message_age_seconds[1m]))"), 60)
      << "sent seconds before they were received";
  // Every dashboard query answers with series (waited for: the recording rules' next
  // round gives the last of them).
  const auto dashboard = json::parse(std::ifstream(kDeploy + "grafana/sluice.json"));
  EXPECT_TRUE(test::wait_until(
      [&] {
        for (const auto& panel : dashboard["panels"])
          for (const auto& target : panel["targets"])
            if (series_of(query(api, as_sent(target["expr"].get<std::string>()))) == 0)
              return false;
        return true;
      },
      std::chrono::seconds(60)))
      << "a dashboard query never answered";
  std::size_t queries = 0;
  for (const auto& panel : dashboard["panels"])
    for (const auto& target : panel["targets"]) {
      const auto expr = as_sent(target["expr"].get<std::string>());
      ++queries;
      EXPECT_GT(series_of(query(api, expr)), 0u)
          << panel["title"].get<std::string>() << ": " << expr << "\n"
          << query(api, expr).dump();
    }
  EXPECT_GE(queries, 25u);
  const auto variable = dashboard["templating"]["list"][1]["query"]["query"].get<std::string>();
  EXPECT_EQ(variable, "label_values(sluice_messages_received_total, pipeline)");
  EXPECT_EQ(series_of(query(api, "sluice_messages_received_total")), 3u) << "one per pipeline";

  // promtool, Prometheus' own linter, finds nothing to say of the live exposition of a
  // pipeline of each source; a NaN sample (no held message near its lease) among it.
  const auto exposition =
      observe::http_request(
          observe::parse_local_url("http://127.0.0.1:" + std::to_string(metrics_port) + "/metrics"))
          .body;
  EXPECT_NE(exposition.find("} NaN\n"), std::string::npos) << exposition;
  for (const char* pipeline : {"orders", "events", "lines"})
    EXPECT_NE(exposition.find("sluice_records_written_total{pipeline=\"" + std::string(pipeline)),
              std::string::npos)
        << pipeline;
  std::ofstream(dir + "/exposition.txt") << exposition;
  const auto lint = test::run_with_status("promtool check metrics < " + dir + "/exposition.txt");
  EXPECT_EQ(lint.first, 0) << lint.second;
  EXPECT_EQ(lint.second, "") << lint.second;

  // Every recording rule has series; every alert's expression parses, each metric it
  // reads has series, and so does the expression without its thresholds (but the alert
  // on a missing target, which has none while the target is up).
  const auto rules = YAML::LoadFile(kDeploy + "prometheus/sluice.rules.yml");
  EXPECT_TRUE(test::wait_until(
      [&] {
        for (const auto& group : rules["groups"])
          for (const auto& rule : group["rules"])
            if (rule["record"] && series_of(query(api, rule["record"].as<std::string>())) == 0)
              return false;
        return true;
      },
      std::chrono::seconds(60)))
      << "a recording rule never recorded";
  for (const auto& group : rules["groups"])
    for (const auto& rule : group["rules"]) {
      const auto expr = rule["expr"].as<std::string>();
      if (rule["record"]) {
        const auto name = rule["record"].as<std::string>();
        EXPECT_GT(series_of(query(api, name)), 0u)
            << name << ": " << expr << "\n"
            << query(api, expr).dump() << "\n"
            << query(api, "sluice_messages_rejected_total").dump();
        continue;
      }
      const auto alert = rule["alert"].as<std::string>();
      EXPECT_EQ(query(api, expr).value("status", ""), "success") << alert << ": " << expr;
      for (const auto& name : metric_names(expr))
        EXPECT_GT(series_of(query(api, "group(" + name + ")")), 0u) << alert << " reads " << name;
      const auto unconditional = without_thresholds(expr);
      if (alert == "SluiceAbsent")
        EXPECT_EQ(series_of(query(api, expr)), 0u) << alert << ": " << expr;
      else
        EXPECT_GT(series_of(query(api, unconditional)), 0u)
            << alert << ": " << unconditional << "\n"
            << query(api, unconditional).dump();
    }
}
