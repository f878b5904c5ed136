// filter: Lambda's event-filtering pattern language. The rows marked "Lambda" are the
// examples of the table "Filter rule syntax" in the AWS Lambda Developer Guide
// (Lambda > Event filtering > "Filter criteria syntax"), in the rule syntax written
// there, each under a "body" key as Lambda's SQS filters put them; the rows marked
// "EventBridge" are from "Comparison operators for use in event patterns" in the
// Amazon EventBridge User Guide, whose language Lambda's filters share.
#include "pipeline/filter.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <map>

using sluice::pipeline::Filter;
using sluice::pipeline::MessageProperties;
using Json = nlohmann::json;

namespace {

struct Headers {
  std::map<std::string, std::string, std::less<>> values;
  static std::optional<std::string_view> lookup(const void* self, std::string_view name) {
    const auto& v = static_cast<const Headers*>(self)->values;
    const auto it = v.find(name);
    if (it == v.end()) return std::nullopt;
    return std::string_view(it->second);
  }
};

bool passes(const Filter& filter, const std::string& body, const Headers& headers = {}) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  EXPECT_FALSE(parser.parse(body).get(root)) << body;
  MessageProperties message;
  message.header = &Headers::lookup;
  message.header_context = &headers;
  return filter.matches(root, message);
}

// One pattern with `rule` under body.
Filter body_filter(const std::string& rule) {
  return Filter(Json::array({Json{{"body", Json::parse(rule)}}}), "attributes");
}

struct Row {
  const char* name;
  const char* rule;  // the body pattern
  const char* body;
  bool expected;
};

const Row kRows[] = {
    // Lambda: Null
    {"null matches null", R"({"UserID": [null]})", R"({"UserID": null})", true},
    {"null does not match a value", R"({"UserID": [null]})", R"({"UserID": "u-1"})", false},
    {"null does not match an absent field", R"({"UserID": [null]})", R"({})", false},
    // Lambda: Empty
    {"empty matches the empty string", R"({"LastName": [""]})", R"({"LastName": ""})", true},
    {"empty does not match text", R"({"LastName": [""]})", R"({"LastName": "Doe"})", false},
    // Lambda: Equals
    {"equals", R"({"Name": ["Alice"]})", R"({"Name": "Alice"})", true},
    {"equals is case-sensitive", R"({"Name": ["Alice"]})", R"({"Name": "alice"})", false},
    // Lambda: Equals (ignore case)
    {"equals-ignore-case", R"({"Name": [{"equals-ignore-case": "alice"}]})", R"({"Name": "ALICE"})",
     true},
    {"equals-ignore-case beyond ASCII", R"({"Name": [{"equals-ignore-case": "élan"}]})",
     R"({"Name": "ÉLAN"})", true},
    {"equals-ignore-case is still equality", R"({"Name": [{"equals-ignore-case": "alice"}]})",
     R"({"Name": "Alicia"})", false},
    // Lambda: And
    {"and: both", R"({"Location": ["New York"], "Day": ["Monday"]})",
     R"({"Location": "New York", "Day": "Monday"})", true},
    {"and: one of two", R"({"Location": ["New York"], "Day": ["Monday"]})",
     R"({"Location": "New York", "Day": "Tuesday"})", false},
    // Lambda: Or
    {"or: first", R"({"PaymentType": ["Credit", "Debit"]})", R"({"PaymentType": "Credit"})", true},
    {"or: second", R"({"PaymentType": ["Credit", "Debit"]})", R"({"PaymentType": "Debit"})", true},
    {"or: neither", R"({"PaymentType": ["Credit", "Debit"]})", R"({"PaymentType": "Cash"})", false},
    // Lambda: Or (multiple fields)
    {"$or: one field", R"({"$or": [{"Location": ["New York"]}, {"Day": ["Monday"]}]})",
     R"({"Location": "Boston", "Day": "Monday"})", true},
    {"$or: none", R"({"$or": [{"Location": ["New York"]}, {"Day": ["Monday"]}]})",
     R"({"Location": "Boston", "Day": "Friday"})", false},
    // Lambda: Not
    {"anything-but: other", R"({"Weather": [{"anything-but": ["Raining"]}]})",
     R"({"Weather": "Sunny"})", true},
    {"anything-but: listed", R"({"Weather": [{"anything-but": ["Raining"]}]})",
     R"({"Weather": "Raining"})", false},
    {"anything-but: absent field", R"({"Weather": [{"anything-but": ["Raining"]}]})", R"({})",
     false},
    // Lambda: Numeric (equals)
    {"numeric =", R"({"Price": [{"numeric": ["=", 100]}]})", R"({"Price": 100})", true},
    {"numeric = any spelling", R"({"Price": [{"numeric": ["=", 100]}]})", R"({"Price": 100.0})",
     true},
    {"numeric = not a string", R"({"Price": [{"numeric": ["=", 100]}]})", R"({"Price": "100"})",
     false},
    // Lambda: Numeric (range)
    {"numeric range inside", R"({"Price": [{"numeric": [">", 10, "<=", 20]}]})", R"({"Price": 20})",
     true},
    {"numeric range low edge", R"({"Price": [{"numeric": [">", 10, "<=", 20]}]})",
     R"({"Price": 10})", false},
    {"numeric range above", R"({"Price": [{"numeric": [">", 10, "<=", 20]}]})",
     R"({"Price": 20.5})", false},
    // Lambda: Exists
    {"exists", R"({"ProductName": [{"exists": true}]})", R"({"ProductName": "Pen"})", true},
    {"exists: absent", R"({"ProductName": [{"exists": true}]})", R"({})", false},
    // Lambda: Does not exist
    {"does not exist", R"({"ProductName": [{"exists": false}]})", R"({})", true},
    {"does not exist: present", R"({"ProductName": [{"exists": false}]})",
     R"({"ProductName": "Pen"})", false},
    // Lambda: Begins with
    {"prefix", R"({"Region": [{"prefix": "us-"}]})", R"({"Region": "us-east-1"})", true},
    {"prefix: no", R"({"Region": [{"prefix": "us-"}]})", R"({"Region": "eu-west-1"})", false},
    // Lambda: Ends with
    {"suffix", R"({"FileName": [{"suffix": ".png"}]})", R"({"FileName": "cat.png"})", true},
    {"suffix: no", R"({"FileName": [{"suffix": ".png"}]})", R"({"FileName": "cat.jpg"})", false},
    // EventBridge: anything-but with a prefix, a suffix, ignoring case; a single value
    {"anything-but prefix", R"({"Region": [{"anything-but": {"prefix": "us-"}}]})",
     R"({"Region": "eu-west-1"})", true},
    {"anything-but prefix: excluded", R"({"Region": [{"anything-but": {"prefix": "us-"}}]})",
     R"({"Region": "us-west-2"})", false},
    {"anything-but suffix", R"({"FileName": [{"anything-but": {"suffix": ".png"}}]})",
     R"({"FileName": "a.png"})", false},
    {"anything-but ignoring case",
     R"({"state": [{"anything-but": {"equals-ignore-case": "initializing"}}]})",
     R"({"state": "INITIALIZING"})", false},
    {"anything-but one value", R"({"state": [{"anything-but": "initializing"}]})",
     R"({"state": "running"})", true},
    {"anything-but numbers", R"({"x": [{"anything-but": [100, 200]}]})", R"({"x": 100})", false},
    // EventBridge: prefix ignoring case; nested fields; arrays in the event
    {"prefix ignoring case", R"({"service": [{"prefix": {"equals-ignore-case": "eventb"}}]})",
     R"({"service": "EventBridge"})", true},
    {"nested field", R"({"detail": {"state": ["running"]}})", R"({"detail": {"state": "running"}})",
     true},
    {"nested field absent", R"({"detail": {"state": ["running"]}})", R"({"detail": {}})", false},
    {"array value: one element matches", R"({"tags": ["b"]})", R"({"tags": ["a", "b"]})", true},
    {"array value: none", R"({"tags": ["c"]})", R"({"tags": ["a", "b"]})", false},
    {"array of objects", R"({"items": {"sku": [{"prefix": "SKU-9"}]}})",
     R"({"items": [{"sku": "SKU-1"}, {"sku": "SKU-90"}]})", true},
    // Leaves only: an object is not a value, and exists does not see it
    {"an object is not a leaf", R"({"detail": [{"exists": true}]})", R"({"detail": {"a": 1}})",
     false},
    // Booleans are not strings
    {"true", R"({"ok": [true]})", R"({"ok": true})", true},
    {"true is not \"true\"", R"({"ok": [true]})", R"({"ok": "true"})", false},
};

TEST(FilterPatterns, LambdaAndEventBridgeDocumentedExamples) {
  for (const auto& row : kRows)
    EXPECT_EQ(passes(body_filter(row.rule), row.body), row.expected)
        << row.name << ": " << row.rule << " on " << row.body;
}

TEST(FilterPatterns, PatternsAreOredAndAnEmptyFilterPassesAll) {
  const Filter two(Json::parse(R"([{"body": {"type": ["a"]}}, {"body": {"type": ["b"]}}])"),
                   "attributes");
  EXPECT_TRUE(passes(two, R"({"type":"a"})"));
  EXPECT_TRUE(passes(two, R"({"type":"b"})"));
  EXPECT_FALSE(passes(two, R"({"type":"c"})"));
  EXPECT_TRUE(passes(Filter(), R"({"type":"c"})"));
}

TEST(FilterPatterns, HeadersAreTextAndNumbersMatchTextThatIsANumber) {
  const Filter f(Json::parse(R"([{"attributes": {"tenant": [{"prefix": "acme"}],
                                                 "priority": [{"numeric": [">=", 5]}]}}])"),
                 "attributes");
  Headers h;
  h.values = {{"tenant", "acme-eu"}, {"priority", "7"}};
  EXPECT_TRUE(passes(f, "{}", h));
  h.values["priority"] = "4";
  EXPECT_FALSE(passes(f, "{}", h));
  h.values["priority"] = "high";
  EXPECT_FALSE(passes(f, "{}", h)) << "text that is not a number is outside every range";
  h.values.erase("priority");
  EXPECT_FALSE(passes(f, "{}", h));
  // body and headers in one pattern: both must match
  const Filter both(
      Json::parse(R"([{"body": {"type": ["a"]}, "attributes": {"tenant": ["acme"]}}])"),
      "attributes");
  Headers acme;
  acme.values = {{"tenant", "acme"}};
  EXPECT_TRUE(passes(both, R"({"type":"a"})", acme));
  EXPECT_FALSE(passes(both, R"({"type":"a"})"));
  EXPECT_FALSE(passes(both, R"({"type":"b"})", acme));
}

TEST(FilterPatterns, MistakesNameThePlaceAndWhatWasExpected) {
  const auto error = [](const std::string& patterns, const std::string& section = "attributes") {
    try {
      Filter f(Json::parse(patterns), section);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error(R"([{"body": {"price": 5}}])"),
            "filter[0].body.price: expected a list of values or operators, e.g. [5] (a bare value "
            "is not a pattern)");
  EXPECT_EQ(error(R"([{"body": {"f": [{"wildcard": "*x"}]}}])"),
            "filter[0].body.f[0].wildcard: unknown operator: expected prefix, suffix, "
            "equals-ignore-case, anything-but, numeric or exists");
  EXPECT_EQ(error(R"([{"body": {"p": [{"numeric": [">", "5"]}]}}])"),
            "filter[0].body.p[0].numeric[1]: expected a number, got \"5\"");
  EXPECT_EQ(error(R"([{"body": {"p": [{"numeric": [">", 1, ">", 2]}]}}])"),
            "filter[0].body.p[0].numeric[2]: a lower bound is given twice");
  EXPECT_EQ(error(R"([{"body": {"p": [{"numeric": ["=", 1, "<", 2]}]}}])"),
            "filter[0].body.p[0].numeric[0]: \"=\" stands alone: [\"=\", N]");
  EXPECT_EQ(error(R"([{"body": {"p": [{"exists": "yes"}]}}])"),
            "filter[0].body.p[0].exists: expected true or false, got \"yes\"");
  EXPECT_EQ(error(R"([{"body": {"p": []}}])"),
            "filter[0].body.p: expected at least one value or operator");
  EXPECT_EQ(error(R"([{"messageAttributes": {"a": ["x"]}}])"),
            "filter[0].messageAttributes: unknown key: expected body and/or attributes (message "
            "attributes are under attributes, by name, without stringValue)");
  EXPECT_EQ(error(R"([{"headers": {"a": ["x"]}}])", ""),
            "filter[0].headers: unknown key: expected body");
  EXPECT_EQ(error(R"([{"headers": {"a": {"b": ["x"]}}}])", "headers"),
            "filter[0].headers.a: headers have no fields inside: expected a list of values or "
            "operators");
  EXPECT_EQ(error(R"([{}])"), "filter[0]: expected a pattern with body and/or attributes, got {}");
  EXPECT_EQ(error(R"([{"body": {"$or": [{"a": ["x"]}]}}])"),
            "filter[0].body.$or: expected a list of at least two patterns, got [{\"a\":[\"x\"]}]");
  // Patterns that would match nothing, ever: refused rather than filtering everything.
  EXPECT_EQ(error(R"([{"attributes": {"flag": [true]}}])"),
            "filter[0].attributes.flag[0]: a header's value is text, never true: write \"true\" "
            "(quoted), or {exists: true}");
  EXPECT_EQ(error(R"([{"body": {"price": {"numeric": [">", 0]}}}])"),
            "filter[0].body.price.numeric: 'numeric' is an operator, so it goes inside a list: "
            "price: [{numeric: ...}]");
  EXPECT_EQ(error(R"([{"body": {"p": [{"numeric": ["<", 5, ">", 10]}]}}])"),
            "filter[0].body.p[0].numeric: an empty range: no number is [\"<\",5,\">\",10]");
  EXPECT_EQ(error(R"([{"body": {"p": [{"numeric": [">", 5, "<", 5]}]}}])"),
            "filter[0].body.p[0].numeric: an empty range: no number is [\">\",5,\"<\",5]");
  EXPECT_EQ(error(R"([{"body": {"p": [{"numeric": [">=", 5, "<=", 5]}]}}])"), "accepted");
  EXPECT_EQ(error(R"([{"body": {"a": [{"prefix": "x", "suffix": "y"}]}}])"),
            "filter[0].body.a[0]: expected one operator per object (prefix, suffix, "
            "equals-ignore-case, anything-but, numeric or exists), got "
            "{\"prefix\":\"x\",\"suffix\":\"y\"}");
}

}  // namespace
