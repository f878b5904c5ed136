// Positions of log-reading sources (a RabbitMQ stream's offset) in the sink's
// database, on a connection of their own: the writers' connections stay theirs.
#include "sinks/positions.hpp"

#include <mutex>
#include <type_traits>

#include "common/mutex.hpp"

namespace sluice::sinks {
namespace {

class SinkPositionStore final : public PositionStore {
 public:
  explicit SinkPositionStore(std::function<std::unique_ptr<Sink>()> factory)
      : factory_(std::move(factory)) {}

  std::optional<std::string> load(const std::string& key) override {
    MutexLock lock(mutex_);
    return with_sink([&](Sink& sink) { return sink.load_position(key); });
  }
  void save(const std::string& key, const std::string& value) override {
    MutexLock lock(mutex_);
    with_sink([&](Sink& sink) {
      sink.save_position(key, value);
      return true;
    });
  }

 private:
  template <class F>
  std::invoke_result_t<F, Sink&> with_sink(F&& f) SLUICE_REQUIRES(mutex_) {
    try {
      if (!sink_) {
        auto sink = factory_();
        sink->open();
        sink_ = std::move(sink);
      }
      return f(*sink_);
    } catch (...) {
      sink_.reset();  // a new connection next time
      throw;
    }
  }

  std::function<std::unique_ptr<Sink>()> factory_;
  Mutex mutex_;
  std::unique_ptr<Sink> sink_ SLUICE_GUARDED_BY(mutex_);
};

}  // namespace

std::shared_ptr<PositionStore> make_position_store(std::function<std::unique_ptr<Sink>()> factory) {
  return std::make_shared<SinkPositionStore>(std::move(factory));
}

}  // namespace sluice::sinks
