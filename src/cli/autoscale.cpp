#include "cli/autoscale.hpp"

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <deque>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/autoscale_sampler.hpp"
#include "config/config.hpp"
#include "observe/http_endpoint.hpp"
#include "observe/metrics.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/cloudwatch/client.hpp"
#include "sluice/ecs/client.hpp"

namespace sluice::app {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// What a flag was given and what it expected; exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Autoscaler {
 public:
  Autoscaler(const AutoscaleOptions& o, const driver::SourceVerbs::Autoscale& source)
      : o_(o), source_(source) {
    if (auto problem = source.check()) throw UsageError(*problem);
    options_.period =
        duration_flag("--period", o.period, milliseconds(1000), std::chrono::hours(1));
    options_.periods = o.periods;
    options_.spare = o.spare;
    if (!(o.capacity > 0) || !std::isfinite(o.capacity))
      throw UsageError("--capacity: got " + std::to_string(o.capacity) +
                       ", expected a number of messages above 0");
    options_.capacity = o.capacity;
    if (!(o.min_backlog >= 0) || !std::isfinite(o.min_backlog))
      throw UsageError("--min-backlog: got " + std::to_string(o.min_backlog) +
                       ", expected a number of messages, 0 or more");
    options_.min_backlog = o.min_backlog;
    options_.min_oldest_age_s =
        static_cast<double>(duration_flag("--min-oldest-age", o.min_oldest_age, milliseconds(0),
                                          std::chrono::hours(24 * 14))
                                .count()) /
        1000.0;
    cloudwatch_source_ = o.from == "cloudwatch";
    if (cloudwatch_source_) {
      metrics_ = source.cloudwatch();
      if (!metrics_)
        throw UsageError(
            "--from cloudwatch: this queue has no CloudWatch statistics (SQS queues have: "
            "AWS/SQS)");
      if (options_.period.count() % 60'000 != 0)
        throw UsageError("--period: got '" + o.period +
                         "', expected whole minutes with --from cloudwatch (AWS/SQS metrics "
                         "have one-minute resolution)");
    } else if (options_.min_oldest_age_s > 0) {
      throw UsageError(
          "--min-oldest-age: needs --from cloudwatch (the queue's attributes do not carry the "
          "age of its oldest message; CloudWatch's ApproximateAgeOfOldestMessage does)");
    }
    if (o.running < 0 && (o.ecs_cluster.empty() || o.ecs_service.empty()))
      throw UsageError(
          "give --running N, or --ecs-cluster and --ecs-service to read the running count "
          "from ECS");
    if (o.once && !o.serve.empty()) throw UsageError("--once and --serve: choose one");
    const milliseconds default_every =
        std::clamp<milliseconds>(options_.period / 6, milliseconds(100), milliseconds(10'000));
    sample_every_ = o.sample_every.empty() ? default_every
                                           : duration_flag("--sample-every", o.sample_every,
                                                           milliseconds(50), options_.period);
    window_.emplace(options_);
    running_ = o.running;
  }

  int run() {
    try {
      if (!cloudwatch_source_) reader_ = source_.reader(io_.get_executor());
      if (cloudwatch_source_ || !o_.cloudwatch_namespace.empty()) {
        cloudwatch::CloudWatchClientOptions options;
        options.region = o_.region;
        options.endpoint_url = o_.cloudwatch_endpoint_url;
        cloudwatch_.emplace(io_.get_executor(), options);
      }
      if (o_.running < 0) {
        ecs::EcsClientOptions options;
        options.region = o_.region;
        options.endpoint_url = o_.ecs_endpoint_url;
        ecs_.emplace(io_.get_executor(), options);
      }
    } catch (const driver::VerbError& e) {
      if (e.exit_code() == 2) throw UsageError(e.what());
      throw;
    } catch (const aws::AwsError& e) {
      if (e.kind() == aws::ErrorKind::configuration) throw UsageError(e.what());
      throw;
    }
    prometheus::Registry registry;
    gauges_ = std::make_unique<AutoscaleGauges>(registry);
    std::unique_ptr<MetricsServer> server;
    if (!o_.serve.empty()) {
      try {
        server = std::make_unique<MetricsServer>(
            o_.serve,
            [&] {
              std::lock_guard lock(mutex_);
              return to_exposition_text(registry.Collect());
            },
            [&] {
              std::lock_guard lock(mutex_);
              return latest_.has_value();
            },
            std::map<std::string, MetricsServer::Route>{{"/autoscale",
                                                         {"application/json",
                                                          [&] {
                                                            std::lock_guard lock(mutex_);
                                                            return served_json();
                                                          }}}},
            "--serve");
      } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--serve: ") + e.what());
      } catch (const std::runtime_error& e) {
        throw UsageError(e.what());
      }
      spdlog::info("event=autoscale_serving address={} port={} paths=/metrics,/autoscale", o_.serve,
                   server->port());
    }
    asio::signal_set signals(io_, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int number) {
      if (ec) return;
      // --once interrupted has no value to give: not a success (128 + the signal).
      if (o_.once) exit_code_ = 128 + number;
      io_.stop();
    });
    asio::co_spawn(io_, loop(), [&](std::exception_ptr e) {
      failure_ = e;
      io_.stop();
    });
    io_.run();
    if (failure_) std::rethrow_exception(failure_);
    return exit_code_;
  }

 private:
  asio::awaitable<void> sleep_until(Clock::time_point at) {
    asio::steady_timer timer(io_);
    timer.expires_at(at);
    co_await timer.async_wait(asio::use_awaitable);
  }

  asio::awaitable<void> refresh_running() {
    if (!ecs_) co_return;
    // Named locals: GCC 12 mishandles some temporaries inside co_await expressions.
    std::vector<std::string> services{o_.ecs_service};
    const auto result = co_await ecs_->describe_services(o_.ecs_cluster, std::move(services));
    if (result.services.empty()) throw service_not_found(result);
    running_ = result.services.front().running_count;
  }

  aws::AwsError service_not_found(const ecs::DescribeServicesResult& result) const {
    std::string reason = "no answer";
    if (!result.failures.empty()) reason = result.failures.front().reason;
    return aws::AwsError(
        aws::ErrorKind::client,
        "ECS service '" + o_.ecs_service + "' in cluster '" + o_.ecs_cluster + "': " + reason,
        "ServiceNotFound");
  }

  void publish(const scale::Signal& signal) {
    std::lock_guard lock(mutex_);
    latest_ = signal;
    latest_at_ = Clock::now();
    latest_doc_ = signal_document(signal, samples_in_window(kServedSamples));
    // Read here, on the sampling thread: the window is not the server thread's to touch.
    latest_doc_["window_complete"] = cloudwatch_source_ || window_->full(latest_at_);
    gauges_->set(signal);
  }

  // The last `limit` samples (the served document stays small whatever the window).
  std::vector<AutoscaleSample> samples_in_window(std::size_t limit = SIZE_MAX) const {
    const std::size_t skip = samples_.size() > limit ? samples_.size() - limit : 0;
    return {samples_.begin() + static_cast<std::ptrdiff_t>(skip), samples_.end()};
  }

  // The served JSON with the value's age and whether its window is complete.
  std::string served_json() const {
    if (!latest_) return "{}";
    auto doc = latest_doc_;
    doc["age_s"] = std::chrono::duration<double>(Clock::now() - latest_at_).count();
    return doc.dump();
  }

  void print(const scale::Signal& s) {
    if (o_.output == "json") {
      std::cout << signal_json(s, samples_in_window()) << std::endl;
      return;
    }
    std::cout << "desired_tasks          " << s.desired_tasks << "\n"
              << "utilization_percent    " << s.utilization_percent << "\n"
              << "in_flight_max_average  " << s.in_flight_max_average << "\n"
              << "running                " << s.running << "\n"
              << "spare                  " << s.spare << "\n"
              << "capacity               " << s.capacity << "\n"
              << "period_averages       ";
    for (double a : s.period_averages) std::cout << " " << a;
    std::cout << "\nsamples                " << samples_.size() << "\n";
    if (s.gated) std::cout << "gated                  " << s.gate << "\n";
    std::cout << std::endl;
  }

  // (Built outside the coroutines: GCC 12 miscompiles braced string literals in them.)
  cloudwatch::MetricDatum utilization_datum(const scale::Signal& s) const {
    cloudwatch::MetricDatum datum;
    datum.metric_name = "TaskUtilization";
    datum.dimensions.push_back({"QueueName", source_.queue_name()});
    if (!o_.ecs_service.empty()) {
      datum.dimensions.push_back({"ClusterName", o_.ecs_cluster});
      datum.dimensions.push_back({"ServiceName", o_.ecs_service});
    }
    datum.value = s.utilization_percent;
    datum.unit = "Percent";
    return datum;
  }

  asio::awaitable<void> put_utilization(const scale::Signal& s) {
    if (o_.cloudwatch_namespace.empty()) co_return;
    std::vector<cloudwatch::MetricDatum> data{utilization_datum(s)};
    co_await cloudwatch_->put_metric_data(o_.cloudwatch_namespace, std::move(data));
    spdlog::info("event=task_utilization_put namespace={} value={}", o_.cloudwatch_namespace,
                 s.utilization_percent);
  }

  std::vector<cloudwatch::MetricQuery> queue_metric_queries() const {
    const int period_s = static_cast<int>(options_.period.count() / 1000);
    const auto& m = *metrics_;
    const std::vector<cloudwatch::Dimension> queue{{m.dimension_name, m.dimension_value}};
    return {{"inflight", m.metric_namespace, m.in_flight, queue, period_s, "Average"},
            {"visible", m.metric_namespace, m.visible, queue, period_s, "Maximum"},
            {"oldest", m.metric_namespace, m.oldest_age, queue, period_s, "Maximum"}};
  }

  // One evaluation over CloudWatch's one-minute statistics.
  asio::awaitable<scale::Signal> evaluate_from_cloudwatch() {
    const int period_s = static_cast<int>(options_.period.count() / 1000);
    std::vector<cloudwatch::MetricQuery> queries = queue_metric_queries();
    const auto now = std::chrono::system_clock::now();
    const auto start = std::chrono::time_point_cast<std::chrono::seconds>(
        now - options_.period * options_.periods);
    const auto end = std::chrono::time_point_cast<std::chrono::seconds>(now);
    const auto series = co_await cloudwatch_->get_metric_data(std::move(queries), start, end);
    std::vector<double> averages = series[0].values;
    if (averages.empty())
      // No data is not "nothing in flight": a wrong queue name, region or a metric still
      // on its way would otherwise scale the service in.
      throw aws::AwsError(aws::ErrorKind::client,
                          "CloudWatch has no " + metrics_->in_flight + " data for queue " +
                              metrics_->dimension_value + " over the last " +
                              std::to_string(options_.periods) +
                              " periods (wrong queue or region, or no data yet): no value",
                          "NoData");
    if (averages.size() > static_cast<std::size_t>(options_.periods))
      averages.erase(averages.begin(), averages.end() - options_.periods);
    scale::GateInputs gates;
    if (!series[1].values.empty()) gates.backlog = series[1].values.back();
    if (!series[2].values.empty()) gates.oldest_age_s = series[2].values.back();
    samples_.clear();
    for (std::size_t i = 0; i < averages.size(); ++i)
      samples_.push_back(AutoscaleSample{static_cast<double>(i) * period_s, averages[i], -1});
    co_return scale::compute_signal(averages, running_, options_, gates);
  }

  asio::awaitable<void> loop() {
    co_await refresh_running();
    if (cloudwatch_source_) {
      for (;;) {
        try {
          const auto signal = co_await evaluate_from_cloudwatch();
          publish(signal);
          if (o_.serve.empty()) print(signal);
          co_await put_utilization(signal);
        } catch (const aws::AwsError& e) {
          // Continuous: a failed period publishes nothing (the last value stands, its
          // age in the JSON) and the next one tries again.
          if (o_.once) throw;
          spdlog::warn("event=autoscale_period_failed error=\"{}\"", e.what());
        }
        if (o_.once) co_return;
        co_await sleep_until(Clock::now() + options_.period);
        try {
          co_await refresh_running();
        } catch (const aws::AwsError& e) {
          spdlog::warn("event=autoscale_aws_call_failed error=\"{}\"", e.what());
        }
      }
    }
    const auto first = Clock::now();
    const auto window = options_.period * options_.periods;
    auto next_evaluation = first + options_.period;
    for (long k = 0;; ++k) {
      const auto at = first + sample_every_ * k;
      if (o_.once && at - first >= window) break;  // the window is periods x period exactly
      co_await sleep_until(at);
      try {
        const driver::QueueReading r = co_await reader_->read();
        window_->add(at, r.in_flight);
        backlog_ = r.visible;
        samples_.push_back(AutoscaleSample{std::chrono::duration<double>(at - first).count(),
                                           r.in_flight, r.visible});
        while (!samples_.empty() && samples_.back().at_s - samples_.front().at_s >=
                                        std::chrono::duration<double>(window).count())
          samples_.pop_front();
        // A slow read: the ticks it overran are skipped, not caught up with stale stamps.
        if (!o_.once) k = std::max(k, static_cast<long>((Clock::now() - first) / sample_every_));
      } catch (const driver::VerbError& e) {
        if (o_.once) throw;
        spdlog::warn("event=autoscale_sample_failed error=\"{}\"", e.what());
        continue;
      }
      if (o_.once) continue;
      const auto signal = compute();
      publish(signal);
      if (Clock::now() >= next_evaluation) {
        next_evaluation += options_.period;
        if (o_.serve.empty()) print(signal);
        try {
          co_await put_utilization(signal);
          co_await refresh_running();
        } catch (const aws::AwsError& e) {
          spdlog::warn("event=autoscale_aws_call_failed error=\"{}\"", e.what());
        }
      }
    }
    const auto signal = compute();
    publish(signal);
    print(signal);
    co_await put_utilization(signal);
  }

  scale::Signal compute() const {
    scale::GateInputs gates;
    gates.backlog = backlog_;
    return scale::compute_signal(window_->period_averages(), running_, options_, gates);
  }

  const AutoscaleOptions& o_;
  const driver::SourceVerbs::Autoscale& source_;
  std::optional<driver::QueueMetrics> metrics_;  // --from cloudwatch
  scale::SignalOptions options_;
  milliseconds sample_every_{};
  bool cloudwatch_source_ = false;
  asio::io_context io_;
  std::unique_ptr<driver::QueueReader> reader_;
  std::optional<cloudwatch::CloudWatchClient> cloudwatch_;
  std::optional<ecs::EcsClient> ecs_;
  std::optional<scale::InFlightWindow> window_;
  std::deque<AutoscaleSample> samples_;
  double backlog_ = -1;
  long running_ = 0;
  std::unique_ptr<AutoscaleGauges> gauges_;
  std::mutex mutex_;
  std::optional<scale::Signal> latest_;
  Clock::time_point latest_at_{};
  static constexpr std::size_t kServedSamples = 120;
  nlohmann::json latest_doc_;  // with window_complete; age_s added when served
  std::exception_ptr failure_;
  int exit_code_ = 0;
};

}  // namespace

int run_autoscale(const AutoscaleOptions& options,
                  const std::vector<driver::SourceVerbs>& sources) {
  const driver::SourceVerbs::Autoscale* chosen = nullptr;
  int chosen_count = 0;
  std::string choices;
  for (const auto& source : sources) {
    if (!source.autoscale) continue;
    choices += (choices.empty() ? "" : ", or ") + source.autoscale->choose_with;
    if (source.autoscale->chosen() && chosen_count++ == 0) chosen = &*source.autoscale;
  }
  if (chosen_count != 1) {
    std::cerr << "sluice autoscale: give one queue: " << choices
              << (chosen_count > 1 ? " (not several: SLUICE_AMQP_URL in the environment counts)"
                                   : "")
              << "\n";
    return 2;
  }
  try {
    Autoscaler autoscaler(options, *chosen);
    return autoscaler.run();
  } catch (const UsageError& e) {
    std::cerr << "sluice autoscale: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {  // a malformed flag (duration_flag)
    std::cerr << "sluice autoscale: " << e.what() << "\n";
    return 2;
  } catch (const driver::VerbError& e) {
    std::cerr << "sluice autoscale: " << e.what() << "\n";
    return e.exit_code();
  } catch (const aws::AwsError& e) {  // CloudWatch, ECS
    std::cerr << "sluice autoscale: " << e.what() << "\n";
    return e.kind() == aws::ErrorKind::configuration ? 2 : 1;
  }
}

}  // namespace sluice::app
