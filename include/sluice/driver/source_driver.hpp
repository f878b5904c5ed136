#pragma once
// A source driver: everything `sluice run` and `sluice config` need of one kind of
// queue, in one object. The application iterates the registered drivers
// (registered_drivers(): the built-in ones, then those a distribution adds with
// sluice_add_distribution) and never names a source.
//
// A driver gives:
//  - its configuration section, source.<name>.*: option rows (docs generated from
//    them), the old flat keys it still reads, and a finalize step for the rules that
//    span its keys and the container's;
//  - the factory of its spi::Source;
//  - a queue probe (does the queue exist; how many messages are ready and in flight)
//    that the backlog gauge, --until-drained and the autoscale signal all read;
//  - the figures its source reports (SourceContext::gauge) as typed descriptors, from
//    which the metrics are made;
//  - the message properties it offers to `normalize.fields[].meta`.

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/container.hpp"
#include "sluice/driver/option.hpp"
#include "sluice/driver/value.hpp"
#include "sluice/message.hpp"
#include "sluice/source.hpp"

namespace sluice::driver {

// A source's command-line verbs (publish, queue stats, dlq ...): the built-in drivers'
// (their definitions are the binary's own, on its command-line parser).
struct VerbCommands;
struct SourceVerbs;

// A driver's own settings (its section of the file), made and read by the driver.
struct SourceSettings {
  virtual ~SourceSettings() = default;
};
using SourceOption = config::Option<SourceSettings>;

// A row of a driver's table, written against the driver's own settings type.
template <class Settings>
SourceOption option(std::string key, std::string type, std::string default_value, std::string doc,
                    std::function<void(Settings&, const config::Value&, const std::string&)> apply,
                    std::string env = {}, bool secret = false) {
  return config::option_of<SourceSettings, Settings>(std::move(key), std::move(type),
                                                     std::move(default_value), std::move(doc),
                                                     std::move(apply), std::move(env), secret);
}

// The pipeline's settings a driver's finalize step may read and adjust.
struct PipelineSettings {
  ContainerOptions& container;
  std::size_t& max_body_bytes;  // decode.max_body_bytes
  bool max_body_bytes_set;      // given in the file or the environment (not its default)
  int& max_record_failures;     // sink.max_record_failures
  bool max_record_failures_set;
  bool concurrency_set;     // source.concurrency
  bool receive_scaler_set;  // a trigger of the MIN-MAX receive scaler (consecutive_*_trigger,
                            // start/stop_receive_min_interval)
  bool identity_from_deduplication_id = false;  // identity.key: deduplication_id
};

// What the probe last read of the queue. Written by the probe's thread, read by any.
struct QueueCounts {
  std::atomic<long> ready{-1};              // waiting to be delivered; -1: not read yet
  std::atomic<long> in_flight{-1};          // delivered to any consumer, not yet acknowledged;
                                            // -1: the queue does not say (RabbitMQ over AMQP)
  std::atomic<std::int64_t> read_at_ns{0};  // steady clock; 0: never read
  std::atomic<long> dead_letters{-1};       // in the dead-letter queue; -1: none known
};

// What `sluice run` needs to know of its queue apart from the container: whether it
// exists at start (a typo is exit 2, not warnings forever) and how many messages it
// holds. Runs on a thread of its own: a frozen broker or endpoint never holds the
// main loop or the signal path.
class QueueProbe {
 public:
  virtual ~QueueProbe() = default;
  // 0: go on; 2: an error was printed (exit 2); -1: a signal came while checking.
  virtual int check_at_start(bool wait_for_queue, const std::function<bool()>& signalled) = 0;
  // Reads the counts about twice a second until stop().
  virtual void start(QueueCounts& counts) = 0;
  virtual void stop() = 0;
};

// A figure a source reports through SourceContext::gauge, and the metric made of it:
// sluice_NAME (a gauge) or sluice_NAME_total (a counter, from the running totals the
// source reports).
struct SourceFigure {
  enum class Kind { gauge, total };
  std::string name;
  Kind kind = Kind::gauge;
  std::string help;
  // The value counts messages the source holds unacknowledged beyond the container's
  // in-flight ones (retries waiting out a backoff, acks not yet sent): the pipeline is
  // not drained while it is above 0, and it counts as in flight where the queue does
  // not report that.
  bool held = false;
  // A line of `sluice run`'s summary, when not empty and the value is not 0.
  std::string summary = {};
};

// Message properties a source may offer to normalize.fields[].meta, beyond those every
// message has (message_id, received_time, receive_count, source).
struct MessageMeta {
  std::optional<std::chrono::system_clock::time_point> sent_time;
  std::optional<std::string_view> group_id;          // an ordered group
  std::optional<std::string_view> sequence_number;   // its place in the group
  std::optional<std::string_view> deduplication_id;  // the producer's (identity.key)
};

class SourceDriver {
 public:
  using SettingsBase = SourceSettings;                    // what its settings derive from
  static constexpr std::string_view kSection = "source";  // its keys: source.<name>.*
  virtual ~SourceDriver() = default;
  // The value of source.type, and the section of its keys (source.<name>.*).
  virtual std::string_view name() const = 0;
  virtual std::string_view doc() const = 0;  // one paragraph for docs/configuration.md

  // Its options, keys relative to its section ("queue_url" for source.sqs.queue_url).
  virtual const std::vector<SourceOption>& options() const = 0;
  // Keys of the flat namespace of earlier releases it still reads (for one release,
  // with a warning naming the new key): {"source.queue_url", "queue_url"}.
  virtual std::vector<std::pair<std::string, std::string>> renamed_keys() const { return {}; }
  virtual std::unique_ptr<SourceSettings> make_settings() const = 0;
  // The rules that span its keys and the pipeline's; throws config::ConfigError naming
  // the keys. May adjust the container's options (a push source's consumers).
  virtual void finalize(SourceSettings& settings, PipelineSettings& pipeline) const = 0;

  virtual SourceFactory factory(const SourceSettings& settings) const = 0;
  // Throws config::ConfigError for settings its client refuses (no region, ...).
  virtual std::unique_ptr<QueueProbe> probe(const SourceSettings& settings) const = 0;
  virtual const std::vector<SourceFigure>& figures() const = 0;
  // Rejected messages go to a dead-letter destination of the source's (not only to
  // the rejects table).
  virtual bool dead_letters(const SourceSettings& settings) const = 0;

  // Reasons of its own for rejecting a message it could not make usable, with when
  // (for docs/configuration.md): {"line_too_long", "a line longer than ..."}.
  virtual std::vector<std::pair<std::string, std::string>> reject_reasons() const { return {}; }

  // Which of "sent_time", "group_id", "sequence_number" its messages carry, and how.
  virtual std::vector<std::string> meta_fields() const { return {}; }
  virtual MessageMeta read_meta(const Message& /*message*/) const { return {}; }
  // The key normalize.fields[] reads its messages' headers (Message::header) with:
  // "attribute" (SQS message attributes), "header" (AMQP headers); empty: none.
  virtual std::string_view header_key() const { return {}; }

  // One line for `sluice config check` (secrets redacted), and the queue in logs.
  virtual std::string describe(const SourceSettings& settings,
                               const ContainerOptions& container) const = 0;
  virtual std::string queue_name(const SourceSettings& settings) const = 0;
  // Its command-line verbs: adds its flags to the shared verbs and says how it answers
  // each; called once, before the command line is parsed. The built-in drivers' only:
  // the types are the binary's own, on its command-line parser, and not installed.
  virtual void add_verbs(const VerbCommands& /*commands*/, SourceVerbs& /*verbs*/) const {}

  // Settings `sluice plan` compares its advice with (sluice_setting{name=...}).
  virtual std::vector<std::pair<std::string, double>> plan_settings(
      const SourceSettings& /*settings*/) const {
    return {};
  }
};

// What every driver of settings type `Settings` has alike: making its settings and
// reading them back.
template <class Settings>
class DriverOf : public SourceDriver {
 public:
  std::unique_ptr<SourceSettings> make_settings() const override {
    return std::make_unique<Settings>();
  }

 protected:
  static const Settings& of(const SourceSettings& s) { return static_cast<const Settings&>(s); }
  static Settings& of(SourceSettings& s) { return static_cast<Settings&>(s); }
};

// A message attribute holding milliseconds since the epoch (SQS's SentTimestamp, the
// AMQP timestamp as the RabbitMQ source gives it); nullopt when absent or not a number.
inline std::optional<std::chrono::system_clock::time_point> epoch_ms_attribute(
    const Message& message, std::string_view name) {
  const auto text = message.attribute(name);
  long long ms = 0;
  if (!text) return std::nullopt;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), ms);
  if (ec != std::errc{} || end != text->data() + text->size()) return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

// The binary's source drivers (its generated registry), in registration order.
const std::vector<const SourceDriver*>& registered_drivers();
// The driver whose name() is `name`; nullptr if none.
const SourceDriver* find_driver(std::string_view name);

}  // namespace sluice::driver
