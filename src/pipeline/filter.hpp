#pragma once
// Message filters in Lambda's event-filtering pattern language (the language of
// EventBridge patterns, as Lambda's SQS event source mapping accepts it): a message
// passes when one of the patterns matches (patterns are ORed); a pattern matches when
// every field it names matches (ANDed); a field matches when one of its listed values
// or operators does (ORed). A field whose value is an array matches when one of its
// elements does. Operators: exact values (string, number, true/false, null),
// `prefix`, `suffix`, `equals-ignore-case`, `anything-but` (a value, a list of values,
// or a prefix/suffix/equals-ignore-case), `numeric` (one `=` or up to two bounds),
// `exists`, and `$or` between field sets. Like EventBridge, operators only match leaf
// values: a field that is absent or an object matches only `exists: false`.
//
// A pattern reads the decoded body under `body` and the message's headers (SQS
// message attributes, AMQP headers) under `attributes` or `headers` (whichever the
// source has). Header values are text: `numeric` and numbers match them when the text
// is a number. docs/filtering.md lists the differences from Lambda.
//
// Compiled once at load; matches() is thread-safe and allocates only for
// equals-ignore-case.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline/projection.hpp"

namespace simdjson::dom {
class element;
}

namespace sluice::pipeline {

class Filter {
 public:
  // `patterns`: a JSON array of pattern objects. `header_section`: the key a pattern
  // names headers with ("attributes", "headers"), or empty when the source has none.
  // Throws std::invalid_argument naming the place ("filter[1].body.price[0]") and
  // what was expected.
  Filter(const nlohmann::json& patterns, std::string header_section);
  Filter();  // no patterns: every message passes
  ~Filter();
  Filter(Filter&&) noexcept;
  Filter& operator=(Filter&&) noexcept;

  bool empty() const;
  std::size_t size() const;
  // Whether one pattern matches the decoded body (a JSON object) and the message's
  // headers.
  bool matches(const simdjson::dom::element& body, const MessageProperties& message) const;

  struct Pattern;  // filter.cpp

 private:
  std::vector<Pattern> patterns_;
};

}  // namespace sluice::pipeline
