// libFuzzer target: the pipeline's decode and normalize path (the bytes of a message
// body, as a producer sends them). Any body must give a record or a rejection with a
// reason, never a crash; a record's document must serialize. The first byte picks
// whether the body is unwrapped as an SNS envelope.
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "pipeline/transform.hpp"

namespace {
using namespace sluice::pipeline;

Transformer make(bool sns) {
  TransformSpec spec;
  spec.fields = {
      {"skuId", "/skuId", FieldType::string, true, {}, {}, {}},
      {"locationId", "/location/id", FieldType::string, true, {}, {}, {}},
      {"quantity", "/quantity", FieldType::integer, true, {}, {}, {}},
      {"price", "/price", FieldType::number, false, {}, {}, {}},
      {"active", "/active", FieldType::boolean, false, {}, {}, {}},
      {"tags", "/tags", FieldType::json, false, {}, {}, {}},
      {"messageId", "", FieldType::string, false, {}, {}, MetaField::message_id},
      {"group", "", FieldType::string, false, {}, {}, MetaField::group_id},
  };
  spec.hash_versions = {{"V1", {"skuId", "locationId", "quantity"}}};
  spec.hash_version = "V1";
  spec.max_body_bytes = 64 * 1024;
  spec.max_depth = 32;
  spec.unwrap_sns = sns;
  return Transformer(spec);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Transformer plain = make(false), sns = make(true);
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  MessageView view{body, "fuzz-id", 1, std::nullopt, {}, "fuzz", std::string_view("g"), {}};
  auto result = ((data[0] & 1) ? sns : plain).transform(view);
  if (auto* record = std::get_if<Record>(&result)) {
    if (record->hash.empty()) __builtin_trap();
    (void)record->document.dump();  // throws on invalid UTF-8: a bug if it does
  } else if (std::get<Rejection>(result).detail.empty()) {
    __builtin_trap();  // every rejection names its problem
  }
  return 0;
}
