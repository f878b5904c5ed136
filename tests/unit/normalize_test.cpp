// Normalization beyond JSON's own types: timestamps, exact decimals, UUIDs, enums,
// canonical text, checks, fallbacks, headers, nested names and payload versions. The
// rule every table here checks: two inputs that mean the same business value give the
// same stored value and hash, two that do not give different ones.
#include <gtest/gtest.h>

#include <map>

#include "pipeline/transform.hpp"

using namespace sluice::pipeline;

namespace {

MessageView view(std::string_view body) {
  MessageView v;
  v.body = body;
  v.message_id = "m-1";
  v.received_time =
      std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
  return v;
}

// One field of the spec's type, read from /v: the stored value, or the rejection.
struct OneField {
  explicit OneField(FieldSpec f) {
    TransformSpec spec;
    f.name = "v";
    f.from = {"/v"};
    spec.fields = {std::move(f)};
    spec.hash_versions = {{"V1", {"v"}}};
    spec.hash_version = "V1";
    transformer.emplace(std::move(spec));
  }
  Outcome run(const std::string& value_json) const {
    const std::string body = R"({"v":)" + value_json + "}";
    return transformer->transform(view(body));
  }
  nlohmann::ordered_json value(const std::string& value_json) const {
    auto result = run(value_json);
    if (auto* r = std::get_if<Rejection>(&result)) {
      ADD_FAILURE() << value_json << ": " << to_string(r->reason) << ": " << r->detail;
      return nullptr;
    }
    return std::get<Record>(result).document["v"];
  }
  std::string hash(const std::string& value_json) const {
    auto result = run(value_json);
    return std::holds_alternative<Record>(result) ? std::get<Record>(result).hash : "rejected";
  }
  Rejection rejection(const std::string& value_json) const {
    auto result = run(value_json);
    EXPECT_TRUE(std::holds_alternative<Rejection>(result)) << value_json << " was accepted";
    return std::holds_alternative<Rejection>(result) ? std::get<Rejection>(result) : Rejection{};
  }
  std::optional<Transformer> transformer;
};

FieldSpec of_type(FieldType type) {
  FieldSpec f;
  f.type = type;
  f.required = true;
  return f;
}

// Every input of a group gives `stored`; groups differ from each other.
void expect_groups(
    const OneField& one,
    const std::vector<std::pair<nlohmann::ordered_json, std::vector<std::string>>>& groups) {
  std::map<std::string, std::string> hash_of_group;
  for (const auto& [stored, inputs] : groups) {
    std::string group_hash;
    for (const auto& input : inputs) {
      EXPECT_EQ(one.value(input), stored) << input;
      const auto hash = one.hash(input);
      if (group_hash.empty()) group_hash = hash;
      EXPECT_EQ(hash, group_hash) << input << " hashes unlike the rest of its group";
    }
    for (const auto& [other, hash] : hash_of_group)
      EXPECT_NE(hash, group_hash) << stored.dump() << " and " << other << " share a hash";
    hash_of_group[stored.dump()] = group_hash;
  }
}

// Why a spec of the field `v` (read from /v unless it says otherwise; with `beside`,
// hashed by another field) does not load, or "loaded".
std::string refusal(FieldSpec f, bool beside = false) {
  TransformSpec spec;
  f.name = "v";
  if (f.from.empty() && !f.constant && !f.meta && !f.header) f.from = {"/v"};
  spec.fields = {f};
  if (beside) spec.fields.push_back(field("k", "/k"));
  spec.hash_versions = {{"V1", {beside ? "k" : "v"}}};
  spec.hash_version = "V1";
  try {
    Transformer t(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "loaded";
}

}  // namespace

TEST(Timestamps, OneInstantInEveryFormHashesTheSame) {
  const OneField one(of_type(FieldType::timestamp));
  expect_groups(
      one, {
               {"2024-02-29T12:00:00.000Z",
                {R"("2024-02-29T12:00:00Z")", R"("2024-02-29T17:45:00+05:45")",
                 R"("2024-02-29T17:45:00.000+0545")", R"("2024-02-29t12:00:00z")",
                 R"("2024-02-29 07:00:00-05:00")", R"("2024-02-29T12:00:00.0004Z")", "1709208000",
                 "1709208000000", R"("1709208000000")", "1709208000.0004"}},
               {"2024-02-29T12:00:00.001Z", {R"("2024-02-29T12:00:00.001Z")", "1709208000001"}},
               // Across the date line and a leap day: +14:00 is the day before in UTC.
               {"2024-02-28T22:00:00.000Z", {R"("2024-02-29T12:00:00+14:00")"}},
               {"2000-02-29T00:00:00.000Z", {R"("2000-02-29")", R"("2000-02-29T00:00Z")"}},
               {"1969-12-31T23:59:59.999Z",
                {R"("1969-12-31T23:59:59.9999Z")", R"("1970-01-01T00:59:59.999+01:00")"}},
           });
}

TEST(Timestamps, WhatIsNoInstantIsSchemaDriftWithItsReason) {
  const OneField one(of_type(FieldType::timestamp));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("2023-02-29T00:00:00Z")", "no such date"},  // not a leap year
      {R"("1900-02-29T00:00:00Z")", "no such date"},  // a century, not a leap year
      {R"("2024-13-01T00:00:00Z")", "no such date"},
      {R"("2024-01-01T24:00:00Z")", "no such time of day"},
      {R"("2016-12-31T23:59:60Z")", "leap second"},
      {R"("2024-01-01T10:00:00")", "local time is ambiguous"},
      {R"("2024-01-01T10:00:00+25:00")", "no such offset"},
      {R"("yesterday")", "RFC 3339"},
      {"true", "expected timestamp"},
      {"1e300", "0001-9999"},
      {R"("2024-01-01T10:00:00Z trailing")", "unexpected text"},
  };
  for (const auto& [input, why] : cases) {
    const auto r = one.rejection(input);
    EXPECT_EQ(r.reason, RejectReason::schema_drift) << input;
    EXPECT_NE(r.detail.find(why), std::string::npos) << input << ": " << r.detail;
    EXPECT_NE(r.detail.find("field v at /v"), std::string::npos) << r.detail;
  }
}

TEST(Timestamps, UnitPrecisionOutputAndFormatAreConfigured) {
  auto seconds = of_type(FieldType::timestamp);
  seconds.timestamp.unit = EpochUnit::seconds;
  seconds.timestamp.precision = TimePrecision::seconds;
  EXPECT_EQ(OneField(seconds).rejection("1700000000999").reason, RejectReason::schema_drift)
      << "a millisecond count read as seconds is out of range (year 55,841), not a wrong date";
  EXPECT_EQ(OneField(seconds).value("1700000000.9"), "2023-11-14T22:13:20Z");

  auto millis = of_type(FieldType::timestamp);
  millis.timestamp.unit = EpochUnit::milliseconds;
  EXPECT_EQ(OneField(millis).value("1700000000"), "1970-01-20T16:13:20.000Z");

  auto micro = of_type(FieldType::timestamp);
  micro.timestamp.precision = TimePrecision::microseconds;
  EXPECT_EQ(OneField(micro).value(R"("2024-02-29T12:00:00.1234567+05:45")"),
            "2024-02-29T06:15:00.123456Z");

  auto epoch = of_type(FieldType::timestamp);
  epoch.timestamp.output = TimeOutput::epoch_ms;
  expect_groups(OneField(epoch), {{1709208000000, {R"("2024-02-29T12:00:00Z")", "1709208000"}},
                                  {-1, {R"("1969-12-31T23:59:59.999Z")"}}});

  auto format = of_type(FieldType::timestamp);
  format.timestamp.format = "%d/%m/%Y %H:%M:%S";
  EXPECT_EQ(OneField(format).value(R"("29/02/2024 12:00:00")"), "2024-02-29T12:00:00.000Z");
  format.timestamp.format = "%d/%m/%Y %H:%M %z";
  EXPECT_EQ(OneField(format).value(R"("29/02/2024 17:45 +0545")"), "2024-02-29T12:00:00.000Z");
  const auto r = OneField(format).rejection(R"("2024-02-29T12:00:00Z")");
  EXPECT_NE(r.detail.find("does not match the format %d/%m/%Y %H:%M %z"), std::string::npos)
      << r.detail;
}

TEST(Decimals, ExactCanonicalTextWhateverTheSpelling) {
  const OneField one(of_type(FieldType::decimal));
  expect_groups(one, {
                         {"1.1",
                          {"1.10", "1.1", R"("1.100")", R"("+1.1")", "0.11e1", "110e-2",
                           R"(" 1.10 ")", R"("001.1")"}},
                         {"1.11", {"1.11"}},
                         {"0", {"0", "-0", "0.000", R"("-0.0")", "0e5"}},
                         {"-12.5", {"-12.50", R"("-1.25e1")"}},
                         {"1200", {"1.2e3", "1200", "1200.000"}},
                         // More digits than a double holds: kept exactly.
                         {"12345678901234567.891", {"12345678901234567.8910"}},
                         {"0.30000000000000004441", {"0.30000000000000004441"}},
                     });
  for (const std::string bad :
       {R"("1,5")", R"("NaN")", R"("1.2.3")", R"("")", "true", R"("1e99999")", R"("0x10")"})
    EXPECT_EQ(one.rejection(bad).reason, RejectReason::schema_drift) << bad;
}

TEST(Decimals, AScaleFixesTheDigitsAndNeverRounds) {
  auto money = of_type(FieldType::decimal);
  money.scale = 2;
  const OneField one(money);
  expect_groups(one, {{"12.50", {"12.5", R"("12.500")", "1.25e1"}}, {"12.00", {"12"}}});
  const auto r = one.rejection("12.505");
  EXPECT_NE(r.detail.find("has 3 decimal places, more than scale 2"), std::string::npos)
      << r.detail;
}

TEST(Decimals, CompareExactly) {
  EXPECT_LT(compare_decimals("1.1", "1.11"), 0);
  EXPECT_GT(compare_decimals("10", "9.99"), 0);
  EXPECT_LT(compare_decimals("-10", "-9.99"), 0);
  EXPECT_EQ(compare_decimals("1.10", "1.1"), 0);
  EXPECT_LT(compare_decimals("-0.5", "0"), 0);
}

TEST(Uuids, EveryFormIsOneLowercaseId) {
  const OneField one(of_type(FieldType::uuid));
  expect_groups(
      one,
      {{"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        {R"("0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D")", R"("{0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d}")",
         R"("urn:uuid:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")",
         R"("0a1b2c3d4e5f4a6b8c7d9e0f1a2b3c4d")"}},
       {"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4e", {R"("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4e")"}}});
  for (const std::string bad :
       {R"("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4")", R"("0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d")",
        R"("za1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")", "42"})
    EXPECT_EQ(one.rejection(bad).reason, RejectReason::schema_drift) << bad;
}

TEST(CanonicalText, NfcTrimCollapseAndCaseMakeOneSpelling) {
  auto f = of_type(FieldType::string);
  f.text = {.nfc = true, .trim = true, .collapse = true, .letter_case = LetterCase::lower};
  const OneField one(f);
  expect_groups(one, {
                         // "José Müller" precomposed (NFC) and decomposed (NFD).
                         {"josé müller",
                          {R"("Jos\u00e9 M\u00fcller")", R"("Jose\u0301 Mu\u0308ller")",
                           R"("  JOSÉ   MÜLLER ")", "\"\\tjos\\u00e9\\u00a0m\\u00fcller\\n\""}},
                         {"jose muller", {R"("Jose Muller")"}},
                         {"straße", {R"("STRAßE")", R"("straße")"}},
                         {"shipped", {R"("SHIPPED")", R"(" Shipped ")"}},
                         {"ship ped", {R"("ship  ped")"}},
                     });
  // Without the transforms the spellings stay apart: transforms change the hash.
  const OneField plain(of_type(FieldType::string));
  EXPECT_NE(plain.hash(R"("Jos\u00e9")"), plain.hash(R"("Jose\u0301")"));
  EXPECT_NE(plain.hash(R"("shipped")"), plain.hash(R"(" SHIPPED")"));
}

TEST(CanonicalText, EachTransformAlone) {
  const auto run = [](TextTransforms t, std::string_view in) {
    return canonical_text(in, t).value_or("<invalid>");
  };
  EXPECT_EQ(run({.trim = true}, "  a  b  "), "a  b");
  EXPECT_EQ(run({.collapse = true}, "  a \t b  "), " a b ");
  EXPECT_EQ(run({.letter_case = LetterCase::upper}, " straße "), " STRA\u1E9EE ")
      << "simple case mapping, one code point for one: capital sharp s, not SS";
  EXPECT_EQ(run({.nfc = true}, "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(run({.trim = true}, "\xE3\x80\x80x\xE3\x80\x80"), "x") << "ideographic space";
}

TEST(Enums, ValuesAfterTheTextTransformsOthersAreValidationRejects) {
  auto status = of_type(FieldType::enumeration);
  status.values = {"PLACED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"};
  status.text = {.trim = true, .letter_case = LetterCase::upper};
  const OneField one(status);
  expect_groups(one, {{"SHIPPED", {R"("shipped")", R"(" Shipped")"}}, {"PAID", {R"("paid")"}}});
  const auto r = one.rejection(R"("lost")");
  EXPECT_EQ(r.reason, RejectReason::validation);
  EXPECT_NE(r.detail.find(R"(got "LOST", expected one of PLACED, PAID, SHIPPED)"),
            std::string::npos)
      << r.detail;
}

TEST(Checks, MinMaxLengthAndPatternAreValidationRejectsNamingTheRule) {
  auto amount = of_type(FieldType::decimal);
  amount.min = "0";
  amount.max = "10000.00";
  const OneField money(amount);
  EXPECT_EQ(money.value("10000"), "10000");
  EXPECT_EQ(money.value("0.00"), "0");
  auto r = money.rejection("10000.001");
  EXPECT_EQ(r.reason, RejectReason::validation);
  EXPECT_NE(r.detail.find("above max 10000"), std::string::npos) << r.detail;
  r = money.rejection("-0.01");
  EXPECT_NE(r.detail.find("below min 0"), std::string::npos) << r.detail;

  auto count = of_type(FieldType::integer);
  count.min = "1";
  EXPECT_EQ(OneField(count).rejection("0").reason, RejectReason::validation);

  auto code = of_type(FieldType::string);
  code.pattern = "[A-Z]{3}";
  code.min_length = 3;
  code.text.letter_case = LetterCase::upper;
  const OneField currency(code);
  EXPECT_EQ(currency.value(R"("eur")"), "EUR");
  r = currency.rejection(R"("EURO")");
  EXPECT_EQ(r.reason, RejectReason::validation);
  EXPECT_NE(r.detail.find("expected a match of the pattern [A-Z]{3}"), std::string::npos)
      << r.detail;
  r = currency.rejection(R"("EU")");
  EXPECT_NE(r.detail.find("below min_length 3"), std::string::npos) << r.detail;
}

TEST(Sources, FallbackPointersHeadersAndNestedNames) {
  TransformSpec spec;
  auto customer = field("customer.id", "/customer/id", FieldType::string, true);
  customer.from.push_back("/customerId");
  FieldSpec tenant;
  tenant.name = "tenant";
  tenant.header = "tenant";
  tenant.required = true;
  tenant.text.letter_case = LetterCase::lower;
  spec.fields = {customer, field("customer.tier", "/tier"), tenant,
                 meta_field("receivedAt", FieldType::timestamp, MetaField::received_time)};
  spec.hash_versions = {{"V1", {"customer.id", "tenant"}}};
  spec.hash_version = "V1";
  const Transformer t(spec);
  const std::map<std::string, std::string> headers = {{"tenant", "ACME"}};
  auto run = [&](std::string_view body, const std::map<std::string, std::string>* h) {
    auto v = view(body);
    v.header = [](const void* context, std::string_view name) -> std::optional<std::string_view> {
      const auto& map = *static_cast<const std::map<std::string, std::string>*>(context);
      const auto it = map.find(std::string(name));
      if (it == map.end()) return std::nullopt;
      return it->second;
    };
    v.header_context = h;
    return t.transform(v);
  };
  const std::map<std::string, std::string> none;
  const auto a = std::get<Record>(run(R"({"customer":{"id":"C-1"},"tier":"gold"})", &headers));
  const auto b = std::get<Record>(run(R"({"customerId":"C-1","customer":{"id":null}})", &headers));
  EXPECT_EQ(a.hash, b.hash) << "the first pointer present wins; null is absent";
  EXPECT_EQ(a.document["customer"]["id"], "C-1");
  EXPECT_EQ(a.document["customer"]["tier"], "gold");
  EXPECT_EQ(a.document["tenant"], "acme");
  EXPECT_EQ(a.document["receivedAt"], "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(*find_field(a.document, "customer.id"), "C-1");
  const auto missing = std::get<Rejection>(run(R"({"customerId":"C-1"})", &none));
  EXPECT_EQ(missing.reason, RejectReason::validation);
  EXPECT_NE(missing.detail.find("missing required field tenant from header tenant"),
            std::string::npos)
      << missing.detail;
  const std::map<std::string, std::string> broken = {{"tenant", "AC\xFF"}};
  const auto bytes = std::get<Rejection>(run(R"({"customerId":"C-1"})", &broken));
  EXPECT_EQ(bytes.reason, RejectReason::schema_drift);
  EXPECT_EQ(bytes.detail, "field tenant from header tenant: not valid UTF-8")
      << "an AMQP header's bytes need not be UTF-8";
  const auto neither = std::get<Rejection>(run(R"({"customer":{}})", &headers));
  EXPECT_NE(neither.detail.find("field customer.id at /customer/id or /customerId"),
            std::string::npos)
      << neither.detail;
}

namespace {
// Order events in two payload versions: v1 flat, v2 nested, the same business record.
TransformSpec orders_spec() {
  TransformSpec spec;
  auto placed = field("placedAt", "/placedAt", FieldType::timestamp, true);
  auto amount = field("amount", "/amount", FieldType::decimal, true);
  auto currency = field("currency", "/currency", FieldType::string, true);
  currency.text = {.trim = true, .letter_case = LetterCase::upper};
  spec.fields = {field("orderId", "/orderId", FieldType::uuid, true), placed};
  PayloadVersions versions;
  versions.from = {"/schemaVersion"};
  versions.absent = "1";
  auto v1_amount = amount;
  auto v2_amount = amount;
  v2_amount.from = {"/total/amount"};
  auto v2_currency = currency;
  v2_currency.from = {"/total/currency"};
  versions.cases = {
      {"1", {field("customerId", "/customerId", FieldType::string, true), v1_amount, currency}},
      {"2", {field("customerId", "/customer/id", FieldType::string, true), v2_amount, v2_currency}},
  };
  spec.versions = versions;
  spec.hash_versions = {{"V1", {"orderId", "customerId", "placedAt", "amount", "currency"}}};
  spec.hash_version = "V1";
  return spec;
}
}  // namespace

TEST(PayloadVersions, EachVersionsShapeGivesTheSameRecord) {
  const Transformer t(orders_spec());
  auto hash = [&](std::string_view body) {
    auto result = t.transform(view(body));
    if (auto* r = std::get_if<Rejection>(&result)) return "rejected: " + r->detail;
    return std::get<Record>(result).hash;
  };
  const std::string v1 =
      R"({"orderId":"0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D","placedAt":"2024-02-29T17:45:00+05:45",)"
      R"("customerId":"C-7","amount":"12.50","currency":"eur"})";
  const std::string v1_without_version = v1;
  const std::string v1_explicit =
      R"({"schemaVersion":1,"orderId":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",)"
      R"("placedAt":1709208000000,"customerId":"C-7","amount":12.5,"currency":" EUR "})";
  const std::string v2 =
      R"({"schemaVersion":"2","orderId":"{0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d}",)"
      R"("placedAt":"2024-02-29T12:00:00.000Z","customer":{"id":"C-7"},)"
      R"("total":{"amount":"12.500","currency":"EUR"}})";
  const std::string other_amount =
      R"({"schemaVersion":"2","orderId":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",)"
      R"("placedAt":"2024-02-29T12:00:00Z","customer":{"id":"C-7"},)"
      R"("total":{"amount":"12.51","currency":"EUR"}})";
  EXPECT_EQ(hash(v1).substr(0, 3), "V1:") << hash(v1);
  EXPECT_EQ(hash(v1), hash(v1_explicit));
  EXPECT_EQ(hash(v1), hash(v2));
  EXPECT_NE(hash(v1), hash(other_amount));
  const auto record = std::get<Record>(t.transform(view(v2)));
  EXPECT_EQ(
      record.document.dump(),
      R"({"orderId":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","placedAt":"2024-02-29T12:00:00.000Z",)"
      R"("customerId":"C-7","amount":"12.5","currency":"EUR","documentHash":")" +
          record.hash + "\"}");

  auto unknown = t.transform(view(R"({"schemaVersion":3,"orderId":"x"})"));
  ASSERT_TRUE(std::holds_alternative<Rejection>(unknown));
  EXPECT_EQ(std::get<Rejection>(unknown).reason, RejectReason::schema_drift);
  EXPECT_EQ(std::get<Rejection>(unknown).detail,
            "the version at /schemaVersion is 3: expected one of 1, 2");
}

TEST(PayloadVersions, EachListIsCheckedAgainstTheIdentityAtLoad) {
  auto spec = orders_spec();
  spec.versions->cases[1].second.erase(spec.versions->cases[1].second.begin());  // customerId
  try {
    Transformer t(spec);
    FAIL() << "a version without an identity field loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "identity.versions.V1 names field 'customerId', which normalize.when.cases.2 (with "
              "normalize.fields) does not have");
  }
  spec = orders_spec();
  spec.versions->absent = "9";
  EXPECT_THROW(Transformer{spec}, std::invalid_argument);
}

TEST(BadSpecs, AreRefusedAtLoadWithTheKeyAndTheReason) {
  auto refused = [](FieldSpec f) { return refusal(std::move(f)); };
  auto pattern = of_type(FieldType::string);
  pattern.pattern = "([a-z";
  EXPECT_NE(refused(pattern).find("normalize.fields[v].pattern = ([a-z: does not compile"),
            std::string::npos)
      << refused(pattern);
  auto status = of_type(FieldType::enumeration);
  status.values = {"A", "B"};
  status.default_value = "C";
  status.required = false;
  EXPECT_NE(refused(status).find("normalize.fields[v].default: got \"C\", expected one of A, B"),
            std::string::npos)
      << refused(status);
  auto empty_enum = of_type(FieldType::enumeration);
  EXPECT_NE(refused(empty_enum).find(".values: expected the allowed values"), std::string::npos);
  auto text_on_integer = of_type(FieldType::integer);
  text_on_integer.text.trim = true;
  EXPECT_NE(refused(text_on_integer).find(".text: applies to types string and enum, not integer"),
            std::string::npos);
  auto bad_default = of_type(FieldType::timestamp);
  bad_default.required = false;
  bad_default.default_value = "tomorrow";
  EXPECT_NE(refused(bad_default).find("normalize.fields[v].default = tomorrow: expected timestamp"),
            std::string::npos)
      << refused(bad_default);
  auto bounds = of_type(FieldType::decimal);
  bounds.min = "10";
  bounds.max = "1";
  EXPECT_NE(refused(bounds).find("expected min <= max"), std::string::npos);
  auto scale_on_string = of_type(FieldType::string);
  scale_on_string.scale = 2;
  EXPECT_NE(refused(scale_on_string).find(".scale: applies to type decimal only"),
            std::string::npos);
  auto bad_pointer = of_type(FieldType::string);
  bad_pointer.from = {"/a~2"};
  EXPECT_NE(refused(bad_pointer).find("from = /a~2"), std::string::npos) << refused(bad_pointer);
}

TEST(BadSpecs, NestedNamesMayNotCollide) {
  TransformSpec spec;
  spec.fields = {field("customer", "/c"), field("customer.id", "/id")};
  spec.hash_versions = {{"V1", {"customer"}}};
  spec.hash_version = "V1";
  try {
    Transformer t(spec);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("customer is also a field"), std::string::npos)
        << e.what();
  }
}

// What a review found with harder inputs than the tables above.
TEST(HostileValues, NeverThrowAndNeverStoreAWrongValue) {
  const OneField stamp(of_type(FieldType::timestamp));
  const std::string digits(400, '9');
  EXPECT_EQ(stamp.rejection("\"" + digits + "\"").reason, RejectReason::schema_drift);
  for (const std::string bad :
       {R"("2024-01-01T00:00:00+05:")", R"("2024-01-01T00:00.5Z")", R"("1.")", R"(".5")"})
    EXPECT_EQ(stamp.rejection(bad).reason, RejectReason::schema_drift) << bad;
  // The last instant of 9999 and the first of 10000, in seconds: never year 0000.
  auto seconds = of_type(FieldType::timestamp);
  seconds.timestamp.unit = EpochUnit::seconds;
  const OneField in_seconds(seconds);
  EXPECT_EQ(in_seconds.value("253402300799.999"), "9999-12-31T23:59:59.999Z");
  for (const std::string bad : {"253402300800", "253402300799.9999999", "253402300800.0"})
    EXPECT_EQ(in_seconds.rejection(bad).reason, RejectReason::schema_drift) << bad;
  EXPECT_EQ(stamp.rejection("253402300800000.0").reason, RejectReason::schema_drift)
      << "milliseconds (auto) at the year 10000";

  auto ratio = of_type(FieldType::number);
  ratio.min = "0.1";
  ratio.max = "0.3";
  const OneField bounded(ratio);
  EXPECT_EQ(bounded.value("0.1"), 0.1) << "a bound is inclusive, as written";
  EXPECT_EQ(bounded.value("0.3"), 0.3);
  EXPECT_EQ(bounded.rejection("0.30000000000000004").reason, RejectReason::validation);

  // A decimal under a key written with escapes: its text is not found again.
  TransformSpec spec;
  spec.fields = {field("d", "/d", FieldType::decimal, true)};
  spec.hash_versions = {{"V1", {"d"}}};
  spec.hash_version = "V1";
  const Transformer t(spec);
  auto r = t.transform(view(R"({"\u0064":1.10})"));
  ASSERT_TRUE(std::holds_alternative<Record>(r)) << std::get<Rejection>(r).detail;
  EXPECT_EQ(std::get<Record>(r).document["d"], "1.1");
}

TEST(PayloadVersions, NumbersSelectByValueAndReasonsStayUtf8) {
  auto spec = orders_spec();
  const Transformer t(spec);
  const std::string v2 = R"({"schemaVersion":2.0,"orderId":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",)"
                         R"("placedAt":"2024-02-29T12:00:00Z","customer":{"id":"C-7"},)"
                         R"("total":{"amount":"12.51","currency":"EUR"}})";
  EXPECT_TRUE(std::holds_alternative<Record>(t.transform(view(v2)))) << "2.0 is version 2";
  std::string as_text = v2;
  as_text.replace(as_text.find("2.0"), 3, R"("2.0")");
  const auto text = t.transform(view(as_text));
  ASSERT_TRUE(std::holds_alternative<Rejection>(text)) << "a string is compared as written";
  EXPECT_EQ(std::get<Rejection>(text).detail,
            R"(the version at /schemaVersion is "2.0": expected one of 1, 2)");
  std::string accents;
  for (int i = 0; i < 40; ++i) accents += "\xC3\xA9";
  const std::string body = R"({"schemaVersion":"x)" + accents + R"("})";
  const auto r = std::get<Rejection>(t.transform(view(body)));
  EXPECT_TRUE(nlohmann::json::accept(nlohmann::json(r.detail).dump())) << "valid UTF-8";
  EXPECT_NE(r.detail.find("...: expected one of 1, 2"), std::string::npos) << r.detail;

  spec.versions->cases[1].second[0].type = FieldType::integer;  // customerId
  try {
    Transformer mixed(spec);
    FAIL() << "an identity field of two types loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("identity field 'customerId' has type string in one "
                                         "version and integer in normalize.when.cases.2"),
              std::string::npos)
        << e.what();
  }
}

TEST(BadSpecs, MetaFieldsTakeNoChecksAndBoundsNeedNumbers) {
  auto refused = [](FieldSpec f) { return refusal(std::move(f), true); };
  auto id = meta_field("v", FieldType::string, MetaField::message_id);
  id.text.letter_case = LetterCase::upper;
  EXPECT_NE(refused(id).find("checks apply to from, attribute and header, not meta"),
            std::string::npos);
  EXPECT_NE(refused(meta_field("v", FieldType::timestamp, MetaField::message_id))
                .find("timestamp applies to meta sent_time"),
            std::string::npos);
  auto flag = field("v", "/v", FieldType::integer);
  flag.default_value = true;
  flag.min = "0";
  EXPECT_NE(refused(flag).find("got true, expected a number"), std::string::npos) << refused(flag);
  auto status = field("v", "/v", FieldType::enumeration);
  status.values = {"\xFF"};
  EXPECT_NE(refused(status).find("not valid UTF-8"), std::string::npos) << refused(status);
}

TEST(Sources, TheSnsTimestampTakesTheTimestampType) {
  TransformSpec spec;
  spec.unwrap_sns = true;
  auto published = meta_field("publishedAt", FieldType::timestamp, MetaField::sns_timestamp);
  published.timestamp.precision = TimePrecision::seconds;
  spec.fields = {field("sku", "/sku", FieldType::string, true), published};
  spec.hash_versions = {{"V1", {"sku"}}};
  spec.hash_version = "V1";
  const Transformer t(spec);
  const std::string body =
      R"({"Type":"Notification","MessageId":"m-1","Message":"{\"sku\":\"S-1\"}",)"
      R"("Timestamp":"2026-12-01T05:45:07.891+05:45"})";
  const auto r = t.transform(view(body));
  ASSERT_TRUE(std::holds_alternative<Record>(r)) << std::get<Rejection>(r).detail;
  EXPECT_EQ(std::get<Record>(r).document["publishedAt"], "2026-12-01T00:00:07Z");
}

// identity.key: the producer's key hashes as {"attribute:NAME":"value"}, never as the
// content array ["value"] a one-field content identity would give for the same text.
TEST(IdentityKey, AKeyNeverHashesLikeContent) {
  auto make = [](TransformSpec::Key key) {
    TransformSpec spec;
    spec.fields = {field("id", "/id", FieldType::string)};
    spec.hash_versions = {{"V1", {"id"}}};
    spec.hash_version = "V1";
    spec.key = key;
    spec.key_header = "producer-id";
    spec.key_header_key = "attribute";
    return Transformer(spec);
  };
  const auto content = make(TransformSpec::Key::content);
  const auto keyed = make(TransformSpec::Key::header);
  auto v = view(R"({"id":"p-1"})");
  const std::string producer = "p-1";
  v.header = [](const void* c, std::string_view) -> std::optional<std::string_view> {
    return *static_cast<const std::string*>(c);
  };
  v.header_context = &producer;
  const auto by_content = std::get<Record>(content.transform(v)).hash;
  const auto by_key = std::get<Record>(keyed.transform(v)).hash;
  EXPECT_NE(by_content, by_key);
  EXPECT_TRUE(by_key.starts_with("V1:")) << by_key;
}
