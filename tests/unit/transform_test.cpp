#include "pipeline/transform.hpp"

#include <gtest/gtest.h>

#include <random>

#include "common/crypto.hpp"

using namespace sluice::pipeline;

namespace {
TransformSpec inventory_spec() {
  TransformSpec spec;
  spec.fields = {
      field("skuId", "/skuId", FieldType::string, true),
      field("locationId", "/location/id", FieldType::string, true),
      field("eventType", "/eventType", FieldType::string, true),
      field("quantity", "/quantity", FieldType::integer, true),
      with_default(field("unitOfMeasure", "/uom", FieldType::string, false), "EA"),
      field("price", "/price", FieldType::number, false),
      field("active", "/active", FieldType::boolean, false),
      field("tags", "/tags", FieldType::json, false),
      constant_field("pipeline", "audit"),
      meta_field("messageId", FieldType::string, MetaField::message_id),
      meta_field("receiveCount", FieldType::integer, MetaField::receive_count),
  };
  spec.hash_versions = {{"V1", {"skuId", "locationId", "eventType", "quantity"}},
                        {"V2", {"skuId", "locationId", "eventType", "quantity", "unitOfMeasure"}}};
  spec.hash_version = "V1";
  return spec;
}

MessageView view(std::string_view body) {
  MessageView v;
  v.body = body;
  v.message_id = "m-1";
  v.receive_count = 2;
  v.received_time = std::chrono::system_clock::now();
  return v;
}

Record record_of(const Transformer& t, std::string_view body) {
  auto result = t.transform(view(body));
  if (auto* r = std::get_if<Rejection>(&result))
    ADD_FAILURE() << to_string(r->reason) << ": " << r->detail;
  return std::get<Record>(result);
}

Rejection rejection_of(const Transformer& t, std::string_view body) {
  auto result = t.transform(view(body));
  EXPECT_TRUE(std::holds_alternative<Rejection>(result)) << body;
  return std::holds_alternative<Rejection>(result) ? std::get<Rejection>(result) : Rejection{};
}
}  // namespace

TEST(Transform, ProjectsConvertsAndFillsAStableDocument) {
  const Transformer t(inventory_spec());
  const auto r =
      record_of(t, R"({"quantity":"7","eventType":"MOVED","skuId":"SKU-1","location":{"id":"L-9"},
                                  "price":"9.5","active":"true","tags":["a",{"b":1}],"ignored":true})");
  EXPECT_EQ(r.document["skuId"], "SKU-1");
  EXPECT_EQ(r.document["locationId"], "L-9");
  EXPECT_EQ(r.document["quantity"], 7) << "string converted to integer";
  EXPECT_EQ(r.document["unitOfMeasure"], "EA") << "default";
  EXPECT_DOUBLE_EQ(r.document["price"].get<double>(), 9.5);
  EXPECT_EQ(r.document["active"], true);
  EXPECT_EQ(r.document["tags"], nlohmann::json::parse(R"(["a",{"b":1}])"));
  EXPECT_EQ(r.document["pipeline"], "audit");
  EXPECT_EQ(r.document["messageId"], "m-1");
  EXPECT_EQ(r.document["receiveCount"], 2);
  EXPECT_FALSE(r.document.contains("ignored"));
  // Configured order, then the hash: a stable shape whatever the input order.
  std::vector<std::string> keys;
  for (const auto& [k, v] : r.document.items()) keys.push_back(k);
  EXPECT_EQ(keys.front(), "skuId");
  EXPECT_EQ(keys.back(), "documentHash");
  EXPECT_EQ(r.document["documentHash"], r.hash);
  EXPECT_EQ(r.hash.substr(0, 3), "V1:");
  EXPECT_EQ(r.hash.size(), 3u + 64u);
}

TEST(Transform, SameBusinessRecordSameHashWhateverTheBytes) {
  const Transformer t(inventory_spec());
  const auto a = record_of(
      t,
      R"({"skuId":"SKU-1","location":{"id":"L"},"eventType":"MOVED","quantity":3,"eventId":"a"})");
  const auto b = record_of(
      t,
      R"({"eventId":"b","quantity":"3","eventType":"MOVED","location":{"id":"L"},"skuId":"SKU-1","x":1})");
  const auto c =
      record_of(t, R"({"skuId":"SKU-1","location":{"id":"L"},"eventType":"MOVED","quantity":4})");
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_NE(a.hash, c.hash);
  // Values that would collide when joined with a separator do not collide.
  EXPECT_NE(content_hash("V1", {"a|b", "c"}), content_hash("V1", {"a", "b|c"}));
  EXPECT_NE(content_hash("V1", {"3"}), content_hash("V1", {3}));
}

// Records already stored carry these hashes: a faster transform must give the same ones.
TEST(Transform, HashesAreStableAcrossReleases) {
  auto spec = inventory_spec();
  spec.hash_versions["V3"] = {"tags", "price", "active", "skuId", "unitOfMeasure", "pipeline"};
  spec.hash_version = "V3";
  const Transformer v3(spec);
  spec.hash_version = "V1";
  const Transformer v1(spec);
  const std::string body =
      R"({"skuId":"S\"\\\u0001\u00e9\u4e2d\ud83d\ude00/x","location":{"id":"L"},"eventType":"E",)"
      R"("quantity":-9007199254740993,"price":0.1,"active":true,)"
      R"("tags":{"z":[1,2.5,null],"a":{"y":"\n","b":false}}})";
  EXPECT_EQ(record_of(v1, body).hash,
            "V1:43866c484e45e09a16c39c5cb9c701668cabf44b7bb057b5caaf79d54fc16722");
  EXPECT_EQ(record_of(v3, body).hash,
            "V3:48832b9c058b2ffb05f90a97350ffdcf8862360ea212d3efb5fab906ce6f6dfa");
  EXPECT_EQ(content_hash(
                "V1", {"a", 1, 2.5, true, nullptr, nlohmann::json::object({{"b", 1}, {"a", 2}})}),
            "V1:caa5498cd71ccacf104e5996d4a83018c8604d2439ba63f61fd757a09de6c62c");
}

// The hash is SHA-256 of the JSON array of the identity values as nlohmann writes it
// (objects with sorted keys), whatever the values.
TEST(Transform, HashIsTheCanonicalArrayOfTheDocumentsIdentityValues) {
  auto spec = inventory_spec();
  spec.hash_versions["V3"] = {"tags", "price", "active", "skuId", "unitOfMeasure", "quantity"};
  spec.hash_version = "V3";
  const Transformer t(spec);
  std::mt19937 random(7);
  const std::vector<std::string> pieces = {
      "a", "\\\"", "\\u0000", "\\n", "\\u00ff", "\\ud83d\\ude00", "é", "中", "/", " ", "9"};
  auto text = [&] {
    std::string s;
    for (int n = random() % 8; n > 0; --n) s += pieces[random() % pieces.size()];
    return s;
  };
  for (int i = 0; i < 500; ++i) {
    const std::string body =
        "{\"skuId\":\"" + text() + "\",\"location\":{\"id\":\"L\"},\"eventType\":\"E\"," +
        "\"quantity\":" + std::to_string(static_cast<std::int64_t>(random()) - (1LL << 31)) +
        ",\"price\":" + std::to_string(static_cast<double>(random()) / 997.0) +
        ",\"active\":" + (random() % 2 ? "true" : "false") + ",\"tags\":{\"" + text() + "\":[\"" +
        text() + "\",1.5],\"k\":{\"" + text() + "\":null}}" +
        (random() % 2 ? ",\"uom\":\"" + text() + "\"" : "") + "}";
    const auto record = record_of(t, body);
    std::vector<nlohmann::json> identity;
    for (const char* name : {"tags", "price", "active", "skuId", "unitOfMeasure", "quantity"})
      identity.push_back(nlohmann::json(record.document.at(name)));
    EXPECT_EQ(record.hash, "V3:" + sluice::crypto::sha256_hex(nlohmann::json(identity).dump()))
        << body;
    EXPECT_EQ(record.document.at("documentHash"), record.hash);
  }
}

TEST(Transform, HashVersionsAreIndependent) {
  auto spec = inventory_spec();
  const Transformer v1(spec);
  spec.hash_version = "V2";
  const Transformer v2(spec);
  const std::string body = R"({"skuId":"S","location":{"id":"L"},"eventType":"E","quantity":1})";
  const auto a = record_of(v1, body), b = record_of(v2, body);
  EXPECT_EQ(a.hash.substr(0, 3), "V1:");
  EXPECT_EQ(b.hash.substr(0, 3), "V2:");
  EXPECT_NE(a.hash.substr(3), b.hash.substr(3));
}

TEST(Transform, RejectsWithAReason) {
  const Transformer t(inventory_spec());
  EXPECT_EQ(rejection_of(t, "{not json").reason, RejectReason::malformed);
  EXPECT_EQ(rejection_of(t, "[1,2]").reason, RejectReason::schema_drift);
  const auto missing = rejection_of(t, R"({"location":{"id":"L"},"eventType":"E","quantity":1})");
  EXPECT_EQ(missing.reason, RejectReason::validation);
  EXPECT_NE(missing.detail.find("skuId"), std::string::npos);
  const auto null_field =
      rejection_of(t, R"({"skuId":null,"location":{"id":"L"},"eventType":"E","quantity":1})");
  EXPECT_EQ(null_field.reason, RejectReason::validation);
  const auto drift =
      rejection_of(t, R"({"skuId":"S","location":{"id":"L"},"eventType":"E","quantity":"many"})");
  EXPECT_EQ(drift.reason, RejectReason::schema_drift);
  EXPECT_NE(drift.detail.find("quantity"), std::string::npos);
  EXPECT_NE(drift.detail.find("many"), std::string::npos);
  EXPECT_EQ(rejection_of(t, R"({"skuId":"S","location":{"id":"L"},"eventType":"E","quantity":1.5})")
                .reason,
            RejectReason::schema_drift);
  EXPECT_EQ(
      rejection_of(t, R"({"skuId":{"a":1},"location":{"id":"L"},"eventType":"E","quantity":1})")
          .reason,
      RejectReason::schema_drift);
}

// Before: the first value won silently, and a byte-order mark was reported by simdjson
// as "missing or superfluous commas".
TEST(Transform, DuplicateKeysAndAByteOrderMarkAreMalformedAndSaidSo) {
  const Transformer t(inventory_spec());
  const auto top = rejection_of(
      t, R"({"skuId":"S","location":{"id":"L"},"eventType":"E","quantity":1,"quantity":2})");
  EXPECT_EQ(top.reason, RejectReason::malformed);
  EXPECT_NE(top.detail.find("\"quantity\" twice"), std::string::npos) << top.detail;
  const auto nested = rejection_of(
      t, R"({"skuId":"S","location":{"id":"L","id":"M"},"eventType":"E","quantity":1})");
  EXPECT_NE(nested.detail.find("\"id\" twice"), std::string::npos) << nested.detail;
  const auto in_array = rejection_of(
      t, R"({"skuId":"S","location":{"id":"L"},"eventType":"E","quantity":1,"x":[{"a":1,"a":1}]})");
  EXPECT_NE(in_array.detail.find("\"a\" twice"), std::string::npos) << in_array.detail;
  const auto bom = rejection_of(t,
                                "\xEF\xBB\xBF{\"skuId\":\"S\",\"location\":{\"id\":\"L\"},"
                                "\"eventType\":\"E\",\"quantity\":1}");
  EXPECT_EQ(bom.reason, RejectReason::malformed);
  EXPECT_NE(bom.detail.find("byte-order mark"), std::string::npos) << bom.detail;
  // Same key in different objects is fine.
  record_of(t, R"({"skuId":"S","location":{"skuId":"L","id":"L"},"eventType":"E","quantity":1})");
}

TEST(Transform, SizeAndDepthLimits) {
  auto spec = inventory_spec();
  spec.max_body_bytes = 100;
  spec.max_depth = 8;
  const Transformer t(spec);
  const auto big = rejection_of(t, "{\"skuId\":\"" + std::string(200, 'x') + "\"}");
  EXPECT_EQ(big.reason, RejectReason::malformed);
  EXPECT_NE(big.detail.find("max_body_bytes"), std::string::npos);
  std::string deep = "{\"a\":";
  for (int i = 0; i < 20; ++i) deep += "[";
  for (int i = 0; i < 20; ++i) deep += "]";
  deep += "}";
  EXPECT_EQ(rejection_of(t, deep).reason, RejectReason::malformed);
}

TEST(Transform, UnwrapsSnsEnvelopes) {
  auto spec = inventory_spec();
  spec.unwrap_sns = true;
  const Transformer t(spec);
  const nlohmann::json inner = {
      {"skuId", "S"}, {"location", {{"id", "L"}}}, {"eventType", "E"}, {"quantity", 2}};
  const nlohmann::json envelope = {{"Type", "Notification"},
                                   {"MessageId", "sns-1"},
                                   {"TopicArn", "arn:aws:sns:us-east-1:1:t"},
                                   {"Message", inner.dump()}};
  EXPECT_EQ(record_of(t, envelope.dump()).document["quantity"], 2);
  EXPECT_EQ(rejection_of(t, inner.dump()).reason, RejectReason::malformed) << "not an envelope";
}

TEST(Transform, SpecIsValidated) {
  auto spec = inventory_spec();
  spec.hash_versions["V3"] = {"nope"};
  EXPECT_THROW(Transformer{spec}, std::invalid_argument);
  spec = inventory_spec();
  spec.hash_version = "V9";
  EXPECT_THROW(Transformer{spec}, std::invalid_argument);
  spec = inventory_spec();
  spec.fields[0].from = {"skuId"};
  EXPECT_THROW(Transformer{spec}, std::invalid_argument);
  spec = inventory_spec();
  spec.fields[1].name = "skuId";
  EXPECT_THROW(Transformer{spec}, std::invalid_argument);
}

TEST(Transform, RouteChoosesTheTableByAFieldsValue) {
  auto spec = inventory_spec();
  spec.route_field = "eventType";
  spec.route_tables = {{"RECEIVED", "receipts"}, {"MOVED", "moves"}, {"ADJUSTED", "moves"}};
  EXPECT_EQ(routed_tables(spec), (std::vector<std::string>{"receipts", "moves"}));
  const Transformer t(spec);
  auto body = [](const std::string& type) {
    return R"({"skuId":"S","location":{"id":"L"},"quantity":1,"eventType":")" + type + "\"}";
  };
  EXPECT_EQ(record_of(t, body("RECEIVED")).route, 1);
  EXPECT_EQ(record_of(t, body("MOVED")).route, 2);
  EXPECT_EQ(record_of(t, body("ADJUSTED")).route, 2) << "two values, one table";
  EXPECT_EQ(record_of(t, body("COUNTED")).route, 0) << "unknown: the sink's own table";
  EXPECT_EQ(record_of(t, body("moved")).route, 0) << "values match exactly";

  spec.route_unknown_rejected = true;
  const Transformer strict(spec);
  EXPECT_EQ(record_of(strict, body("MOVED")).route, 2);
  const auto r = rejection_of(strict, body("COUNTED"));
  EXPECT_EQ(r.reason, RejectReason::validation);
  EXPECT_NE(r.detail.find("eventType is \"COUNTED\""), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("RECEIVED, MOVED, ADJUSTED"), std::string::npos) << r.detail;
}

TEST(Transform, ANumberRoutesAsJsonWritesIt) {
  auto spec = inventory_spec();
  spec.route_field = "quantity";
  spec.route_tables = {{"7", "sevens"}};
  const Transformer t(spec);
  EXPECT_EQ(
      record_of(t, R"({"skuId":"S","location":{"id":"L"},"quantity":"7","eventType":"E"})").route,
      1)
      << "an integer field from the text \"7\"";
  EXPECT_EQ(
      record_of(t, R"({"skuId":"S","location":{"id":"L"},"quantity":8,"eventType":"E"})").route, 0);
}

TEST(Transform, ARouteFieldOutsideTheIdentityIsRefused) {
  auto spec = inventory_spec();
  spec.route_field = "unitOfMeasure";
  spec.route_tables = {{"EA", "each"}};
  try {
    const Transformer t(spec);
    ADD_FAILURE() << "accepted a route field outside the identity";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("route.field = unitOfMeasure: expected one of "
                                         "identity.versions.V1"),
              std::string::npos)
        << e.what();
  }
  spec.route_field = "nowhere";
  EXPECT_THROW(Transformer{spec}, std::invalid_argument);
  spec.route_field = "";
  EXPECT_THROW(Transformer{spec}, std::invalid_argument) << "tables without a field";
  // A producer's key could name one record with two values of the field: refused.
  spec = inventory_spec();
  spec.key = TransformSpec::Key::header;
  spec.key_header = "producer-id";
  spec.key_header_key = "attribute";
  spec.route_field = "eventType";
  spec.route_tables = {{"MOVED", "moves"}};
  try {
    const Transformer t(spec);
    ADD_FAILURE() << "accepted a route beside a producer's key";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs identity.key: content"), std::string::npos)
        << e.what();
  }
}

// A numeric field routes by its value, however the producer or the key spells it; a
// key that is no number, or one number given for two tables, is refused.
TEST(Transform, ANumericFieldRoutesByItsValue) {
  auto spec = inventory_spec();
  spec.hash_versions["V1"].push_back("price");
  spec.route_field = "price";
  spec.route_tables = {{"7", "sevens"}, {"2.50", "halves"}};
  const Transformer t(spec);
  auto body = [](const std::string& price) {
    return R"({"skuId":"S","location":{"id":"L"},"quantity":1,"eventType":"E","price":)" + price +
           "}";
  };
  EXPECT_EQ(record_of(t, body("7")).route, 1);
  EXPECT_EQ(record_of(t, body("7.0")).route, 1) << "a number field holds 7.0";
  EXPECT_EQ(record_of(t, body("\"7.000\"")).route, 1);
  EXPECT_EQ(record_of(t, body("2.5")).route, 2);
  EXPECT_EQ(record_of(t, body("70")).route, 0);
  spec.route_tables = {{"7", "sevens"}, {"cheap", "halves"}};
  EXPECT_THROW(Transformer{spec}, std::invalid_argument) << "a key that can never match";
  spec.route_tables = {{"7", "sevens"}, {"7.0", "halves"}};
  EXPECT_THROW(Transformer{spec}, std::invalid_argument) << "one number, two tables";
  spec.route_tables = {{"7", "sevens"}, {"7.0", "sevens"}};
  EXPECT_NO_THROW(Transformer{spec});
}
