// Micro-benchmarks of decode + normalize + content hash, one message at a time, for
// the two example pipelines as their files configure them: the inventory projection
// (strings and an integer: what normalization was before typed fields) and the
// order-events one (two payload versions, timestamps, exact decimals, UUIDs, enums,
// canonical text, a pattern, an attribute, a nested name). The bodies are the ones
// `sluice publish --generate --events ...` sends, duplicates' other spellings included.
#include <benchmark/benchmark.h>

#include "cli/publish.hpp"
#include "config/config.hpp"
#include "pipeline/transform.hpp"

using namespace sluice;

namespace {

std::optional<std::string_view> tenant_header(const void*, std::string_view name) {
  if (name == "tenant") return std::string_view(" Acme ");
  return std::nullopt;
}

void run(benchmark::State& state, const char* example, const app::GeneratedEvents& events) {
  const auto config = app::load_config(std::string(SLUICE_SOURCE_DIR) + "/examples/" + example);
  const pipeline::Transformer transformer(config.transform);
  std::size_t i = 0, records = 0;
  for (auto _ : state) {
    const std::string& body = events.bodies[i++ % events.bodies.size()];
    pipeline::MessageView view;
    view.body = body;
    view.message_id = "5fea7756-0ea4-451a-a703-a558b933e270";
    view.received_time = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
    view.source = "orders";
    view.header = &tenant_header;
    auto result = transformer.transform(view);
    records += std::holds_alternative<pipeline::Record>(result);
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["records_share"] =
      static_cast<double>(records) / static_cast<double>(state.iterations());
}

void BM_Normalize_InventoryExample(benchmark::State& state) {
  static const auto events = app::generate_events(1000, 0.2, 0.0, 1);
  run(state, "inventory-pipeline.yaml", events);
}
BENCHMARK(BM_Normalize_InventoryExample);

void BM_Normalize_OrdersExample(benchmark::State& state) {
  static const auto events = app::generate_order_events(1000, 0.2, 0.0, 1);
  run(state, "orders-pipeline.yaml", events);
}
BENCHMARK(BM_Normalize_OrdersExample);

}  // namespace

BENCHMARK_MAIN();
