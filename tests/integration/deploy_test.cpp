// deploy/: every manifest parses, and each option, port, path, command and metric it
// names exists in Sluice (no cluster runs here). Commands are checked by the binary's
// own parser (SLUICE_CHECK_COMMAND_LINE=1), pipeline files by the configuration loader.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "../support/process.hpp"
#include "app/run.hpp"
#include "cli/autoscale.hpp"
#include "config/config.hpp"

using namespace sluice;
using nlohmann::json;

namespace {

const std::string kDeploy = std::string(SLUICE_SOURCE_DIR) + "/deploy/";

std::string read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The binary's own parser accepts this command line (subcommand, options, values).
void expect_command_parses(const std::vector<std::string>& args, const std::string& where) {
  std::string command = "SLUICE_CHECK_COMMAND_LINE=1 " + std::string(SLUICE_BINARY);
  for (const auto& a : args) command += " " + quote(a);
  const auto [code, text] = test::run_with_status(command);
  EXPECT_EQ(code, 0) << where << ": " << command << "\n" << text;
  EXPECT_NE(text.find("command line ok"), std::string::npos) << where << "\n" << text;
}

std::vector<std::string> strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const auto& n : list) out.push_back(n.as<std::string>());
  return out;
}
std::vector<std::string> strings(const json& list) {
  std::vector<std::string> out;
  for (const auto& n : list) out.push_back(n.get<std::string>());
  return out;
}

std::string flag(const std::vector<std::string>& args, const std::string& name) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == name) return args[i + 1];
  ADD_FAILURE() << name << " not in the command";
  return {};
}

std::map<std::string, YAML::Node> documents_by_kind(const std::string& path) {
  std::map<std::string, YAML::Node> kinds;
  for (const auto& doc : YAML::LoadAllFromFile(path)) {
    EXPECT_TRUE(doc["apiVersion"] && doc["kind"] && doc["metadata"]["name"]) << path;
    kinds[doc["kind"].as<std::string>() + "/" + doc["metadata"]["name"].as<std::string>()] = doc;
  }
  return kinds;
}

}  // namespace

TEST(Deploy, KubernetesDeploymentMatchesTheBinaryAndItsConfiguration) {
  auto k = documents_by_kind(kDeploy + "kubernetes/sluice.yaml");
  ASSERT_TRUE(k.count("ConfigMap/sluice-pipeline") && k.count("Deployment/sluice") &&
              k.count("Service/sluice-metrics"));
  // The pipeline file loads (with the Secret's DSN in its variable).
  setenv("SLUICE_POSTGRES_DSN", "host=127.0.0.1 dbname=x", 1);
  const auto config = app::parse_config(
      k["ConfigMap/sluice-pipeline"]["data"]["pipeline.yaml"].as<std::string>(), "configmap");
  unsetenv("SLUICE_POSTGRES_DSN");
  EXPECT_EQ(config.sink_type, "postgres");

  const auto pod = k["Deployment/sluice"]["spec"]["template"]["spec"];
  const auto container = pod["containers"][0];
  const auto args = strings(container["args"]);
  expect_command_parses(args, "Deployment/sluice args");
  EXPECT_EQ(flag(args, "--config"),
            container["volumeMounts"][0]["mountPath"].as<std::string>() + "/pipeline.yaml");
  // The metrics port is the one the pipeline listens on, and the probes are its paths.
  const int port = std::stoi(config.metrics_listen.substr(config.metrics_listen.rfind(':') + 1));
  EXPECT_EQ(container["ports"][0]["containerPort"].as<int>(), port);
  EXPECT_EQ(container["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
  EXPECT_EQ(container["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
  EXPECT_EQ(k["Service/sluice-metrics"]["spec"]["ports"][0]["port"].as<int>(), port);
  EXPECT_EQ(pod["securityContext"]["runAsUser"].as<int>(), 10001);
  // The grace period outlasts the whole stop: shutdown_deadline.
  EXPECT_GT(pod["terminationGracePeriodSeconds"].as<long>() * 1000,
            config.container.shutdown_deadline.count());
  // Every SLUICE_* variable it sets is one the configuration reads.
  const std::string docs = app::configuration_markdown();
  for (const auto& env : container["env"])
    EXPECT_NE(docs.find(env["name"].as<std::string>()), std::string::npos)
        << env["name"].as<std::string>();
}

TEST(Deploy, KedaScalersReadWhatSluiceServes) {
  auto app_docs = documents_by_kind(kDeploy + "kubernetes/sluice.yaml");
  const auto pipeline =
      YAML::Load(app_docs["ConfigMap/sluice-pipeline"]["data"]["pipeline.yaml"].as<std::string>());
  const std::string queue_url = pipeline["source"]["sqs"]["queue_url"].as<std::string>();

  // KEDA's own SQS scaler: the same queue, one replica per max_in_flight.
  auto sqs = documents_by_kind(kDeploy + "kubernetes/keda-sqs.yaml");
  const auto trigger = sqs["ScaledObject/sluice-sqs"]["spec"]["triggers"][0];
  EXPECT_EQ(trigger["type"].as<std::string>(), "aws-sqs-queue");
  EXPECT_EQ(trigger["metadata"]["queueURL"].as<std::string>(), queue_url);
  EXPECT_EQ(trigger["metadata"]["queueLength"].as<std::string>(),
            pipeline["source"]["max_in_flight"].as<std::string>());
  EXPECT_EQ(sqs["ScaledObject/sluice-sqs"]["spec"]["scaleTargetRef"]["name"].as<std::string>(),
            "sluice");

  // metrics-api: the URL's port and path are what `sluice autoscale --serve` serves, and
  // valueLocation names a field of its document.
  auto api = documents_by_kind(kDeploy + "kubernetes/keda-metrics-api.yaml");
  const auto container =
      api["Deployment/sluice-autoscale"]["spec"]["template"]["spec"]["containers"][0];
  const auto args = strings(container["args"]);
  expect_command_parses(args, "Deployment/sluice-autoscale args");
  EXPECT_EQ(args[0], "autoscale");
  EXPECT_EQ(flag(args, "--queue-url"), queue_url);
  EXPECT_EQ(flag(args, "--capacity"), pipeline["source"]["max_in_flight"].as<std::string>());
  const std::string serve = flag(args, "--serve");
  const std::string port = serve.substr(serve.rfind(':') + 1);
  EXPECT_EQ(container["ports"][0]["containerPort"].as<std::string>(), port);
  const auto metrics_api = api["ScaledObject/sluice-in-flight"]["spec"]["triggers"][0];
  EXPECT_EQ(metrics_api["type"].as<std::string>(), "metrics-api");
  const std::string url = metrics_api["metadata"]["url"].as<std::string>();
  EXPECT_TRUE(url.starts_with("http://sluice-autoscale.")) << url;
  EXPECT_TRUE(url.ends_with(":" + port + "/autoscale")) << url;
  const auto document = json::parse(app::signal_json(scale::compute_signal({3}, 2, {}), {}));
  EXPECT_TRUE(document.contains(metrics_api["metadata"]["valueLocation"].as<std::string>()));
  EXPECT_EQ(container["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
}

TEST(Deploy, EcsTaskDefinitionsAndTheTargetTrackingPolicyAgree) {
  const auto task = json::parse(read(kDeploy + "ecs/task-definition.json"));
  const auto& c = task["containerDefinitions"][0];
  expect_command_parses(strings(c["command"]), "ecs task command");
  std::map<std::string, std::string> env;
  for (const auto& e : c["environment"]) env[e["name"]] = e["value"];
  const std::string docs = app::configuration_markdown();
  for (const auto& [name, value] : env) EXPECT_NE(docs.find(name), std::string::npos) << name;
  for (const auto& s : c["secrets"])
    EXPECT_NE(docs.find(s["name"].get<std::string>()), std::string::npos);
  const std::string listen = env.at("SLUICE_METRICS_LISTEN");
  EXPECT_EQ(c["portMappings"][0]["containerPort"].get<int>(),
            std::stoi(listen.substr(listen.rfind(':') + 1)));
  // The health check is a sluice command against that port: /healthz (the process
  // answers), not /readyz (a database outage must not have ECS replace every task).
  auto health = strings(c["healthCheck"]["command"]);
  ASSERT_EQ(health.front(), "CMD");
  health.erase(health.begin(), health.begin() + 2);  // CMD, the binary
  expect_command_parses(health, "ecs health check");
  EXPECT_NE(flag(health, "--url").find(listen.substr(listen.rfind(':')) + "/healthz"),
            std::string::npos);
  EXPECT_GT(c["stopTimeout"].get<long>() * 1000, ContainerOptions{}.shutdown_deadline.count());

  // The autoscale task publishes the metric the policy tracks, with the same dimensions.
  const auto scaler = json::parse(read(kDeploy + "ecs/autoscale-task-definition.json"));
  const auto args = strings(scaler["containerDefinitions"][0]["command"]);
  expect_command_parses(args, "ecs autoscale command");
  const auto policy = json::parse(read(kDeploy + "ecs/scaling-policy.json"));
  const auto& metric =
      policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"];
  EXPECT_EQ(metric["MetricName"], "TaskUtilization");
  EXPECT_EQ(metric["Namespace"], flag(args, "--cloudwatch"));
  EXPECT_EQ(metric["Unit"], "Percent");
  const std::string queue_url = flag(args, "--queue-url");
  const json dimensions =
      json::array({{{"Name", "QueueName"}, {"Value", queue_url.substr(queue_url.rfind('/') + 1)}},
                   {{"Name", "ClusterName"}, {"Value", flag(args, "--ecs-cluster")}},
                   {{"Name", "ServiceName"}, {"Value", flag(args, "--ecs-service")}}});
  EXPECT_EQ(metric["Dimensions"], dimensions);
  EXPECT_EQ(policy["ResourceId"],
            "service/" + flag(args, "--ecs-cluster") + "/" + flag(args, "--ecs-service"));
  // Target 100 %: desired = running when the in-flight signal is met exactly.
  EXPECT_EQ(policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"], 100.0);
  EXPECT_EQ(env.at("SLUICE_QUEUE_URL"), queue_url);
}

TEST(Deploy, SystemdUnitRunsACommandThatParsesAndWaitsOutTheDrain) {
  const std::string unit = read(kDeploy + "systemd/sluice.service");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(unit, m, std::regex("\nExecStart=(\\S+) ([^\n]+)")));
  EXPECT_EQ(m[1].str(), "/usr/local/bin/sluice");
  std::istringstream words(m[2].str());
  std::vector<std::string> args{std::istream_iterator<std::string>(words), {}};
  expect_command_parses(args, "ExecStart");
  ASSERT_TRUE(std::regex_search(unit, m, std::regex("\nTimeoutStopSec=(\\d+)")));
  EXPECT_GT(std::stol(m[1].str()) * 1000, ContainerOptions{}.shutdown_deadline.count());
  EXPECT_NE(unit.find("\nRestartPreventExitStatus=2\n"), std::string::npos)
      << "exit 2 is a configuration error (README)";
}

// The binary runs on jemalloc (glibc's malloc cost the pipeline a fifth of its CPU:
// BENCHMARKS.md) and says so in --version (README).
TEST(Deploy, TheBinaryRunsOnTheAllocatorItWasBuiltWith) {
  // Standard output alone: libmongoc may warn on standard error (its shared-memory
  // counters taken by a dead process of the same pid).
  const auto [code, out] =
      test::run_with_status(std::string(SLUICE_BINARY) + " --version 2>/dev/null");
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(out.starts_with("sluice ")) << out;
  EXPECT_NE(out.find("(" SLUICE_BINARY_ALLOCATOR), std::string::npos) << out;
}

// No container runtime runs here, so the image is not built: this checks what can be
// checked without one. The Dockerfile's stages, user, port and entry point; that every
// library the binary links comes from a package the runtime stage installs; and that
// the binary runs as the image's user (uid 10001, no groups) from a home it owns, as
// useradd --create-home makes /var/lib/sluice.
TEST(Deploy, ImageStagesUserAndLibrariesMatchTheBinary) {
  const std::string file = read(kDeploy + "Dockerfile");
  EXPECT_NE(file.find("FROM debian:12 AS build"), std::string::npos);
  EXPECT_NE(file.find("FROM debian:12-slim"), std::string::npos);
  EXPECT_NE(file.find("\nUSER 10001\n"), std::string::npos);
  EXPECT_NE(file.find("\nEXPOSE 9464\n"), std::string::npos);
  EXPECT_NE(file.find("ENTRYPOINT [\"/usr/local/bin/sluice\"]"), std::string::npos);
  EXPECT_NE(file.find("COPY --from=build /opt/sluice/bin/sluice /usr/local/bin/sluice"),
            std::string::npos);
  // The runtime stage's packages: each shared library the binary links directly comes
  // from one of them (or from the base image's libc/libstdc++).
  const auto runtime = file.substr(file.find("FROM debian:12-slim"));
  const auto [code, needed] = test::run_with_status(
      "for lib in $(readelf -d " + std::string(SLUICE_BINARY) +
      " | sed -n 's/.*NEEDED.*\\[\\(.*\\)\\]/\\1/p'); do path=$(ldd " + SLUICE_BINARY +
      " | awk -v l=$lib '$1==l {print $3}'); dpkg -S \"$path\" 2>/dev/null || dpkg -S "
      "\"/usr$path\" 2>/dev/null || dpkg -S \"$(readlink -f $path)\"; done | cut -d: -f1 | "
      "sort -u");
  ASSERT_EQ(code, 0) << needed;
  const std::set<std::string> base{"libc6", "libstdc++6", "libgcc-s1"};
  std::istringstream packages(needed);
  int checked = 0;
  for (std::string package; std::getline(packages, package);) {
    // The sanitizer build links the sanitizers' runtimes: not part of a release image.
    if (package.empty() || base.count(package) || package.starts_with("libasan") ||
        package.starts_with("libubsan"))
      continue;
    ++checked;
    EXPECT_NE(runtime.find(" " + package), std::string::npos)
        << package << " (a library sluice links) is not installed in the runtime stage";
  }
  EXPECT_GE(checked, 8) << needed;
  // The build stage installs what scripts/install-deps.sh installs to build.
  const std::string deps = read(std::string(SLUICE_SOURCE_DIR) + "/scripts/install-deps.sh");
  const auto build = file.substr(0, file.find("FROM debian:12-slim"));
  for (const char* package :
       {"libboost1.81-dev", "libssl-dev", "libsimdjson-dev", "libmongoc-dev", "libpq-dev",
        "librabbitmq-dev", "prometheus-cpp-dev", "libyaml-cpp-dev", "libspdlog-dev", "libcli11-dev",
        "libexpat1-dev", "libjemalloc-dev"}) {
    EXPECT_NE(build.find(package), std::string::npos) << package;
    EXPECT_NE(deps.find(package), std::string::npos) << package;
  }
  // As the image's user: the binary starts and checks the example pipeline (its SQLite
  // database a relative path: in the user's own home, the working directory).
  if (geteuid() == 0) {
    char home[] = "/tmp/sluice-image-home-XXXXXX";
    ASSERT_NE(mkdtemp(home), nullptr);
    const std::string dir = home;
    std::filesystem::copy_file(std::string(SLUICE_SOURCE_DIR) + "/examples/inventory-pipeline.yaml",
                               dir + "/pipeline.yaml");
    ASSERT_EQ(test::run_with_status("chown -R 10001:10001 " + dir + " && chmod 700 " + dir).first,
              0);
    const std::string as_user = "cd " + dir + " && HOME=" + dir +
                                " setpriv --reuid=10001 --regid=10001 --clear-groups " +
                                SLUICE_BINARY;
    const auto [version_code, version] = test::run_with_status(as_user + " --version 2>&1");
    EXPECT_EQ(version_code, 0) << version;
    const auto [check_code, check] =
        test::run_with_status(as_user + " config check --config " + dir + "/pipeline.yaml 2>&1");
    EXPECT_EQ(check_code, 0) << check;
    EXPECT_NE(check.find("inventory.db"), std::string::npos) << check;
    test::run_with_status("rm -rf " + dir);
  }
}

// Every Kubernetes manifest against Kubernetes' OpenAPI schemas and KEDA's CRD schemas
// (tools/manifests: kubernetes-models, @kubernetes-models/keda), unknown fields refused
// as `kubectl apply --validate=strict` refuses them; then each field name of each
// manifest misspelled in turn (two ways), and every misspelling refused. Keys of maps
// (labels, resources, a trigger's metadata, ConfigMap data) take any name by schema.
TEST(Deploy, KubernetesManifestsPassTheirSchemasAndEveryMisspellingIsRefused) {
  const std::string node =
      std::string(SLUICE_SOURCE_DIR) + "/tools/emulator/node_modules/.bin/node";
  const std::string validate =
      node + " " + std::string(SLUICE_SOURCE_DIR) + "/tools/manifests/validate.mjs ";
  std::string files;
  std::size_t documents = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDeploy + "kubernetes")) {
    files += " " + entry.path().string();
    documents += YAML::LoadAllFromFile(entry.path().string()).size();
  }
  ASSERT_GE(documents, 8u);
  const auto [code, text] = test::run_with_status(validate + files);
  EXPECT_EQ(code, 0) << text;
  std::size_t valid = 0;
  for (std::size_t at = 0; (at = text.find(": valid\n", at)) != std::string::npos; ++at) ++valid;
  EXPECT_EQ(valid, documents) << text;

  const auto [mutated_code, mutated] = test::run_with_status(validate + "--mutate" + files);
  EXPECT_EQ(mutated_code, 0) << mutated;
  EXPECT_EQ(mutated.find("was accepted"), std::string::npos) << mutated;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(mutated, m,
                                std::regex(R"((\d+) misspellings refused; (\d+) keys of maps)")))
      << mutated;
  EXPECT_GE(std::stoi(m[1]), 300) << mutated;
  EXPECT_NE(mutated.find("ScaledObject /spec/triggers/0/metadata/queueURL"), std::string::npos)
      << "a trigger's metadata is a map: " << mutated;

  // The validator refuses what kubectl would: a misspelled field, a wrong type, a
  // resource kind it has no schema for.
  const std::string bad = ::testing::TempDir() + "/bad-" + std::to_string(getpid()) + ".yaml";
  std::ofstream(bad) << "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n"
                        "  replicas: two\n  selector:\n    matchLabels: {app: x}\n"
                        "  template:\n    metadata:\n      labels: {app: x}\n    spec:\n"
                        "      containers:\n        - name: x\n          image: x\n"
                        "          imagePullPolicyy: Always\n"
                        "---\napiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n"
                        "  name: y\nspec:\n  scaleTargetRef: {name: x}\n  triggers: []\n"
                        "  cooldownPeriods: 30\n"
                        "---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: z}\n"
                        "---\napiVersion: extensions/v1beta1\nkind: Deployment\n"
                        "metadata: {name: old}\n";
  const auto [bad_code, bad_text] = test::run_with_status(validate + bad);
  std::filesystem::remove(bad);
  EXPECT_EQ(bad_code, 1) << bad_text;
  for (const char* expected :
       {"Deployment x: /spec/replicas: type",
        "/spec/template/spec/containers/0/imagePullPolicyy: "
        "unknown field",
        "ScaledObject y: /spec/cooldownPeriods: unknown field",
        "Widget z: no schema for example.com/v1 Widget",
        "Deployment old: extensions/v1beta1 is no longer served (removed in Kubernetes 1.22)"})
    EXPECT_NE(bad_text.find(expected), std::string::npos) << expected << " in\n" << bad_text;
}

// The ECS task definitions and the scaling policy against the AWS services' own models,
// as botocore checks a call before sending it (Debian's python3-botocore); each field
// name misspelled in turn is refused too.
TEST(Deploy, EcsDocumentsAreValidInputsOfTheirApiCallsAndEveryMisspellingIsRefused) {
  const std::string check =
      std::string("/usr/bin/python3 ") + SLUICE_SOURCE_DIR + "/tests/tools/aws_input_check.py ";
  const std::vector<std::array<std::string, 3>> documents = {
      {"ecs", "RegisterTaskDefinition", "ecs/task-definition.json"},
      {"ecs", "RegisterTaskDefinition", "ecs/autoscale-task-definition.json"},
      {"application-autoscaling", "PutScalingPolicy", "ecs/scaling-policy.json"}};
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDeploy + "ecs"))
    files += entry.path().extension() == ".json";
  EXPECT_EQ(files, documents.size()) << "a document under deploy/ecs with no check";
  for (const auto& [service, operation, file] : documents) {
    const auto [code, text] = test::run_with_status(check + "--mutate " + service + " " +
                                                    operation + " " + kDeploy + file);
    EXPECT_EQ(code, 0) << file << "\n" << text;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex(R"((\d+) misspellings refused)"))) << text;
    EXPECT_GE(std::stoi(m[1]), 30) << text;
  }
  const std::string bad = ::testing::TempDir() + "/bad-task-" + std::to_string(getpid()) + ".json";
  std::ofstream(bad) << R"({"family":"x","containerDefinitions":[{"name":"x","image":"x",)"
                        R"("memory":"lots","essentail":true}]})";
  const auto [bad_code, bad_text] =
      test::run_with_status(check + "ecs RegisterTaskDefinition " + bad);
  std::filesystem::remove(bad);
  EXPECT_EQ(bad_code, 1) << bad_text;
  EXPECT_NE(bad_text.find("essentail"), std::string::npos) << bad_text;
  EXPECT_NE(bad_text.find("memory"), std::string::npos) << bad_text;
}
