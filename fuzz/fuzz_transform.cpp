// libFuzzer target: the pipeline's decode and normalize path (the bytes of a message
// body, as a producer sends them). Any body must give a record or a rejection with a
// reason (or is filtered), never a crash; a record's document must serialize. The first
// byte picks the projection: a filter of every operator and a route (bit 4), the
// inventory one, the same over an SNS envelope, or the order-events one
// (payload versions, timestamps with and without a format, exact decimals with and
// without a scale, UUIDs, an enum, canonical text, checks and a pattern, a header, a
// nested name), whose header value is the body's last bytes.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "pipeline/transform.hpp"

namespace {
using namespace sluice::pipeline;

Transformer inventory(bool sns) {
  TransformSpec spec;
  spec.fields = {
      field("skuId", "/skuId", FieldType::string, true),
      field("locationId", "/location/id", FieldType::string, true),
      field("quantity", "/quantity", FieldType::integer, true),
      field("price", "/price", FieldType::number, false),
      field("active", "/active", FieldType::boolean, false),
      field("tags", "/tags", FieldType::json, false),
      meta_field("messageId", FieldType::string, MetaField::message_id),
      meta_field("group", FieldType::string, MetaField::group_id),
  };
  spec.hash_versions = {{"V1", {"skuId", "locationId", "quantity"}}};
  spec.hash_version = "V1";
  spec.max_body_bytes = 64 * 1024;
  spec.max_depth = 32;
  spec.unwrap_sns = sns;
  return Transformer(spec);
}

Transformer orders() {
  TransformSpec spec;
  FieldSpec tenant;
  tenant.name = "tenant";
  tenant.header = "tenant";
  tenant.text = {.nfc = true, .trim = true, .collapse = true, .letter_case = LetterCase::lower};
  tenant.max_length = 40;
  FieldSpec raw_tenant;  // no transforms: the header's bytes as they came
  raw_tenant.name = "rawTenant";
  raw_tenant.header = "tenant";
  spec.fields = {tenant, raw_tenant,
                 meta_field("receivedAt", FieldType::timestamp, MetaField::received_time)};
  auto id = field("orderId", "/orderId", FieldType::uuid, true);
  id.from.push_back("/order/id");
  auto placed = field("placedAt", "/placedAt", FieldType::timestamp, true);
  placed.timestamp.precision = TimePrecision::microseconds;
  auto local = field("localTime", "/local", FieldType::timestamp);
  local.timestamp.format = "%d/%m/%Y %H:%M:%S %z";
  local.timestamp.output = TimeOutput::epoch_ms;
  auto amount = field("amount", "/amount", FieldType::decimal, true);
  amount.scale = 2;
  amount.min = "-1000000";
  amount.max = "1e12";
  auto rate = field("rate", "/rate", FieldType::decimal);
  auto status = field("status", "/status", FieldType::enumeration, true);
  status.values = {"PLACED", "PAID", "SHIPPED"};
  status.text = {.trim = true, .letter_case = LetterCase::upper};
  auto currency = field("price.currency", "/currency", FieldType::string);
  currency.text = {.nfc = true, .trim = true, .letter_case = LetterCase::upper};
  currency.pattern = "[A-Z]{3}";
  auto name = field("customer.name", "/customer/name", FieldType::string);
  name.text = {.nfc = true, .collapse = true};
  name.min_length = 1;
  PayloadVersions versions;
  versions.from = {"/schemaVersion", "/v"};
  versions.absent = "1";
  versions.cases = {{"1", {id, placed, local, amount, rate, status, currency, name}},
                    {"2", {id, placed, amount, status}}};
  spec.versions = versions;
  spec.hash_versions = {{"V1", {"orderId", "placedAt", "amount", "status"}}};
  spec.hash_version = "V1";
  spec.max_body_bytes = 64 * 1024;
  spec.max_depth = 32;
  return Transformer(spec);
}

// The inventory fields behind a filter of every operator: Filter::matches on any body.
Transformer filtered() {
  TransformSpec spec;
  spec.fields = {field("skuId", "/skuId", FieldType::string, true)};
  spec.hash_versions = {{"V1", {"skuId"}}};
  spec.hash_version = "V1";
  spec.max_body_bytes = 64 * 1024;
  spec.max_depth = 32;
  spec.filter_headers = "attributes";
  spec.filter = nlohmann::json::parse(R"([
    {"body": {"skuId": [{"prefix": "S"}, {"suffix": {"equals-ignore-case": "X"}}],
              "quantity": [{"numeric": [">", -5, "<=", 1e9]}, null, true, "7"],
              "detail": {"state": [{"anything-but": {"prefix": "test"}}]}},
     "attributes": {"tenant": [{"equals-ignore-case": "ACME"}, {"exists": false}]}},
    {"body": {"$or": [{"a": [{"exists": true}]}, {"b": {"c": [{"anything-but": [1, "x"]}]}}],
              "tags": [{"equals-ignore-case": "ÉLAN"}]}}
  ])");
  // ... and routed by it: any value is a table's, or rejected naming it.
  spec.route_field = "skuId";
  spec.route_tables = {{"S1", "t1"}, {"SX", "t2"}, {"S\u00e9", "t1"}};
  spec.route_unknown_rejected = true;
  return Transformer(spec);
}

std::optional<std::string_view> header(const void* context, std::string_view name) {
  if (name != "tenant") return std::nullopt;
  return *static_cast<const std::string_view*>(context);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Transformer plain = inventory(false), sns = inventory(true), order_events = orders(),
                           with_filter = filtered();
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string_view tenant = body.substr(body.size() - std::min<std::size_t>(body.size(), 8));
  MessageView view;
  view.body = body;
  view.message_id = "fuzz-id";
  view.source = "fuzz";
  view.group_id = std::string_view("g");
  view.header = &header;
  view.header_context = &tenant;
  const Transformer& t = (data[0] & 4)   ? with_filter
                         : (data[0] & 2) ? order_events
                         : (data[0] & 1) ? sns
                                         : plain;
  auto result = t.transform(view);
  if (std::holds_alternative<Filtered>(result)) return 0;
  if (auto* record = std::get_if<Record>(&result)) {
    if (record->hash.empty() || record->route > 2) __builtin_trap();
    (void)record->document.dump();  // throws on invalid UTF-8: a bug if it does
  } else if (std::get<Rejection>(result).detail.empty()) {
    __builtin_trap();  // every rejection names its problem
  }
  return 0;
}
