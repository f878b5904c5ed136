// The MongoDB sink's documents (sinks/mongodb/bson_document.hpp): typed fields in
// MongoDB's types, read back with libbson; what has no exact BSON form refused, named.
#include "sinks/mongodb/bson_document.hpp"

#include <gtest/gtest.h>

// bson_t's alignment attribute is not part of the deleter's type (as in mongo_sink.cpp).
#pragma GCC diagnostic ignored "-Wignored-attributes"

#include <memory>

namespace sluice::sinks {
namespace {

using Json = nlohmann::ordered_json;
using pipeline::FieldType;

struct BsonDeleter {
  void operator()(bson_t* b) const { bson_destroy(b); }
};

struct Converted {
  bool ok = false;
  std::string why;
  std::unique_ptr<bson_t, BsonDeleter> doc{bson_new()};
  bson_type_t type_of(const char* dotted) const {
    bson_iter_t it, found;
    if (!bson_iter_init(&it, doc.get()) || !bson_iter_find_descendant(&it, dotted, &found))
      return BSON_TYPE_EOD;
    return bson_iter_type(&found);
  }
  std::string decimal(const char* dotted) const {
    bson_iter_t it, found;
    bson_decimal128_t value;
    char text[BSON_DECIMAL128_STRING] = {};
    if (bson_iter_init(&it, doc.get()) && bson_iter_find_descendant(&it, dotted, &found) &&
        bson_iter_decimal128(&found, &value))
      bson_decimal128_to_string(&value, text);
    return text;
  }
  std::int64_t date(const char* dotted) const {
    bson_iter_t it, found;
    if (!bson_iter_init(&it, doc.get()) || !bson_iter_find_descendant(&it, dotted, &found))
      return 0;
    return bson_iter_date_time(&found);
  }
};

Converted convert(const std::string& json, const std::vector<TypedField>& typed) {
  Converted c;
  c.ok = append_document(c.doc.get(), Json::parse(json), typed, c.why);
  return c;
}

const std::vector<TypedField> kTyped = {{{"amount"}, FieldType::decimal, false},
                                        {{"price", "net"}, FieldType::decimal, false},
                                        {{"at"}, FieldType::timestamp, false},
                                        {{"atMs"}, FieldType::timestamp, true}};

TEST(BsonDocument, TypedFieldsInMongoDbsTypes) {
  const auto c =
      convert(R"({"amount":"-7.50","price":{"net":"1E+40"},"at":"1969-12-31T23:59:59.999999Z",)"
              R"("atMs":1700000000123,"n":3,"s":"x","list":[1,"2",{"amount":"9"}],"none":null})",
              kTyped);
  ASSERT_TRUE(c.ok) << c.why;
  EXPECT_EQ(c.type_of("amount"), BSON_TYPE_DECIMAL128);
  EXPECT_EQ(c.decimal("amount"), "-7.50") << "the scale kept";
  EXPECT_EQ(c.decimal("price.net"), "1E+40");
  EXPECT_EQ(c.type_of("at"), BSON_TYPE_DATE_TIME);
  EXPECT_EQ(c.date("at"), -1) << "floored to the millisecond before the epoch";
  EXPECT_EQ(c.date("atMs"), 1700000000123);
  EXPECT_EQ(c.type_of("n"), BSON_TYPE_INT64);
  EXPECT_EQ(c.type_of("s"), BSON_TYPE_UTF8);
  EXPECT_EQ(c.type_of("list.2.amount"), BSON_TYPE_UTF8) << "nothing typed inside a list";
  EXPECT_EQ(c.type_of("none"), BSON_TYPE_NULL);
}

TEST(BsonDocument, WhatHasNoExactFormIsRefusedNamingItsField) {
  auto refused = convert(R"({"price":{"net":"1234567890123456789012345678901234567"}})", kTyped);
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.why.rfind("price.net: the decimal 1234567890123456789012345678901234567 does "
                              "not fit MongoDB's Decimal128",
                              0),
            0u)
      << refused.why;
  refused = convert(R"({"extra":{"big":18446744073709551615}})", {});
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.why,
            "extra.big: the integer 18446744073709551615 is beyond BSON's 64-bit "
            "integers");
  EXPECT_TRUE(convert(R"({"big":9223372036854775807})", {}).ok) << "the largest int64 fits";
  EXPECT_TRUE(convert(R"({"amount":"1234567890123456789012345678901234"})", kTyped).ok)
      << "34 digits fit";
}

// Another payload version's field at a typed path, of another form: stored as it is.
TEST(BsonDocument, AnotherVersionsFieldAtATypedPathIsStoredAsItIs) {
  const auto c = convert(R"({"at":{"when":"2026-01-01T00:00:00Z"},"amount":"n/a",)"
                         R"("atMs":"soon","price":{"net":{"x":1}}})",
                         kTyped);
  ASSERT_TRUE(c.ok) << c.why;
  EXPECT_EQ(c.type_of("at"), BSON_TYPE_DOCUMENT);
  EXPECT_EQ(c.type_of("amount"), BSON_TYPE_UTF8);
  EXPECT_EQ(c.type_of("atMs"), BSON_TYPE_UTF8);
  EXPECT_EQ(c.type_of("price.net"), BSON_TYPE_DOCUMENT);
}

}  // namespace
}  // namespace sluice::sinks
