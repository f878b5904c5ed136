#pragma once
// The command-line verbs a source answers beside `sluice run`. `publish`, `queue stats`,
// `queue create`, `dlq stats|peek|redrive` and `autoscale` are shared: the binary makes each with
// what every source understands (what to publish, the queue's --name, the signal's options), each
// driver adds the flag that
// chooses it (SQS: --queue-url, RabbitMQ: --amqp-url) and its own flags, and the
// first driver in registration order whose choosing flag was given runs the verb (a
// driver marked fallback runs it when none was chosen). A driver may also add verbs
// of its own (SQS: round-trip, topic create, bucket create).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/tracing.hpp"

namespace CLI {
class App;
}

namespace sluice::driver {

// `sluice dlq stats|peek|redrive`: the flags every source understands.
struct DeadLetterRequest {
  std::size_t max = 0;        // peek: how many (0: 10); redrive: at most (0: all)
  bool json = false;          // peek: one JSON object per line
  std::string to;             // redrive: SQS a queue URL, RabbitMQ a queue name
  double rate = 0;            // redrive: at most this many a second (0: no cap)
  std::string filter_reason;  // redrive: only the dead letters of this reason
};

// The binary's verbs, for the drivers to add their flags to.
struct VerbCommands {
  CLI::App* app = nullptr;  // the top level: for verbs of a source's own
  CLI::App* publish = nullptr;
  CLI::App* queue_stats = nullptr;
  CLI::App* queue_create = nullptr;
  CLI::App* autoscale = nullptr;
  const std::string* queue_name = nullptr;  // queue create --name
  const std::string* region = nullptr;      // autoscale --region (AWS: also ECS, CloudWatch)
  CLI::App* dlq_stats = nullptr;
  CLI::App* dlq_peek = nullptr;
  CLI::App* dlq_redrive = nullptr;
  const DeadLetterRequest* dead_letters = nullptr;  // dlq's shared flags, read when it runs
};

// A verb that failed; exit code 2 when it is the user's to fix (a missing queue, a
// refused user, a malformed flag), else 1.
class VerbError : public std::runtime_error {
 public:
  VerbError(int exit_code, const std::string& what)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// `sluice autoscale`'s reading of the queue: messages being worked on, and ready.
struct QueueReading {
  double in_flight = 0;
  double visible = -1;  // -1: unknown
};
class QueueReader {
 public:
  virtual ~QueueReader() = default;
  // Throws VerbError.
  virtual boost::asio::awaitable<QueueReading> read() = 0;
};
// The queue's CloudWatch statistics (`autoscale --from cloudwatch`): their namespace,
// the dimension naming the queue and the metrics of in-flight, visible and the oldest
// message's age.
struct QueueMetrics {
  std::string metric_namespace;
  std::string dimension_name, dimension_value;
  std::string in_flight, visible, oldest_age;
};

// What `sluice publish` sends: one message per body, made by the binary from --file
// or --generate.
struct PublishRequest {
  std::vector<std::string> bodies;
  std::map<std::string, std::string> headers;  // on every message (SQS: String attributes)
  // The caller's trace context (--traceparent, or TRACEPARENT and TRACESTATE in the
  // environment), passed on with every message as the source carries contexts.
  std::optional<tracing::SpanContext> trace;
  int concurrency = 4;                         // batches in flight at once
  bool progress = true;
};

struct SourceVerbs {
  struct Verb {
    std::string choose_with;       // for the usage error when no source was chosen
    std::function<bool()> chosen;  // its choosing flag was given
    bool fallback = false;         // runs the verb when no source was chosen
    std::function<int()> run;      // the exit code (README: 0, 1 failed, 2 bad usage)
  };
  struct Publish {
    std::string choose_with;
    std::function<bool()> chosen;
    // Before the bodies are made: what is wrong with the flags given, or nothing.
    std::function<std::optional<std::string>()> check;
    std::function<int(PublishRequest)> run;
  };
  struct Autoscale {
    std::string choose_with;
    std::function<bool()> chosen;
    std::function<std::optional<std::string>()> check;  // what is wrong with its flags
    // Throws VerbError.
    std::function<std::unique_ptr<QueueReader>(boost::asio::any_io_executor)> reader;
    std::function<std::string()> queue_name;  // TaskUtilization's QueueName dimension
    std::function<std::optional<QueueMetrics>()> cloudwatch;  // nothing: no statistics
  };
  std::optional<Publish> publish;
  std::optional<Verb> queue_stats, queue_create;
  std::optional<Verb> dlq_stats, dlq_peek, dlq_redrive;
  std::optional<Autoscale> autoscale;
  // Runs the source's own verb if the command line chose one of them.
  std::function<std::optional<int>()> run_own;
};

}  // namespace sluice::driver
