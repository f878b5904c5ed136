#include "pipeline/filter.hpp"

#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <utility>

#include "pipeline/canonical_text.hpp"

namespace sluice::pipeline {
using Json = nlohmann::json;

namespace {

// One value the message has at a field's path.
struct Leaf {
  enum class Kind { string, number, boolean, null };
  Kind kind = Kind::null;
  std::string_view text;         // a string
  std::optional<double> number;  // a number, or a header's text that is one
  bool flag = false;             // a boolean
};

enum class Bound { lt, le, eq, ge, gt };

std::optional<std::string> folded(std::string_view text) {
  TextTransforms lower;
  lower.letter_case = LetterCase::lower;
  return canonical_text(text, lower);
}

struct Matcher {
  enum class Kind {
    exact_string,
    exact_number,
    exact_bool,
    exact_null,
    prefix,
    suffix,
    ignore_case,
    prefix_ignore_case,
    suffix_ignore_case,
    anything_but,
    numeric,
    exists,
  };
  Kind kind = Kind::exact_null;
  std::string text;  // folded for the ignore-case kinds
  double number = 0;
  bool flag = false;
  std::vector<std::pair<Bound, double>> bounds;  // numeric
  std::vector<Matcher> excluded;                 // anything-but

  bool matches(const Leaf& leaf) const {
    const bool is_string = leaf.kind == Leaf::Kind::string;
    switch (kind) {
      case Kind::exact_string:
        return is_string && leaf.text == text;
      case Kind::exact_number:
        return leaf.number && *leaf.number == number;
      case Kind::exact_bool:
        return leaf.kind == Leaf::Kind::boolean && leaf.flag == flag;
      case Kind::exact_null:
        return leaf.kind == Leaf::Kind::null;
      case Kind::prefix:
        return is_string && leaf.text.starts_with(text);
      case Kind::suffix:
        return is_string && leaf.text.ends_with(text);
      case Kind::ignore_case:
      case Kind::prefix_ignore_case:
      case Kind::suffix_ignore_case: {
        if (!is_string) return false;
        const auto value = folded(leaf.text);
        if (!value) return false;
        if (kind == Kind::ignore_case) return *value == text;
        return kind == Kind::prefix_ignore_case ? value->starts_with(text) : value->ends_with(text);
      }
      case Kind::anything_but:
        for (const auto& m : excluded)
          if (m.matches(leaf)) return false;
        return true;
      case Kind::numeric:
        if (!leaf.number) return false;
        for (const auto& [bound, limit] : bounds) {
          const double v = *leaf.number;
          const bool ok = bound == Bound::lt   ? v < limit
                          : bound == Bound::le ? v <= limit
                          : bound == Bound::eq ? v == limit
                          : bound == Bound::ge ? v >= limit
                                               : v > limit;
          if (!ok) return false;
        }
        return true;
      case Kind::exists:
        return false;  // decided by the field (whether it has leaves), not per leaf
    }
    return false;
  }
};

struct FieldTest {
  std::vector<std::string> path;
  std::vector<Matcher> any_of;
};

// Fields ANDed, and each `$or` list: one of its groups.
struct Group {
  std::vector<FieldTest> all;
  std::vector<std::vector<Group>> ors;
};

// ------------------------------------------------------------------ compiling

[[noreturn]] void fail(const std::string& where, const std::string& problem) {
  throw std::invalid_argument(where + ": " + problem);
}

std::string shown(const Json& value) {
  // Replaced, not thrown: a library caller's pattern may hold any bytes.
  auto text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

const char* const kOperators =
    "prefix, suffix, equals-ignore-case, anything-but, numeric or exists";

std::string folded_or_fail(const Json& value, const std::string& where) {
  if (!value.is_string()) fail(where, "expected a string, got " + shown(value));
  auto text = folded(value.get<std::string>());
  if (!text) fail(where, "expected valid UTF-8 text");
  return *text;
}

// {"prefix": "us-"} or {"prefix": {"equals-ignore-case": "US-"}}, for prefix and suffix.
Matcher affix(const std::string& name, const Json& value, const std::string& where) {
  Matcher m;
  const bool prefix = name == "prefix";
  if (value.is_string()) {
    m.kind = prefix ? Matcher::Kind::prefix : Matcher::Kind::suffix;
    m.text = value.get<std::string>();
    return m;
  }
  if (value.is_object() && value.size() == 1 && value.contains("equals-ignore-case")) {
    m.kind = prefix ? Matcher::Kind::prefix_ignore_case : Matcher::Kind::suffix_ignore_case;
    m.text = folded_or_fail(value["equals-ignore-case"], where + ".equals-ignore-case");
    return m;
  }
  fail(where, "expected a string or {equals-ignore-case: string}, got " + shown(value));
}

Matcher exact(const Json& value, const std::string& where) {
  Matcher m;
  if (value.is_string()) {
    m.kind = Matcher::Kind::exact_string;
    m.text = value.get<std::string>();
  } else if (value.is_number()) {
    m.kind = Matcher::Kind::exact_number;
    m.number = value.get<double>();
  } else if (value.is_boolean()) {
    m.kind = Matcher::Kind::exact_bool;
    m.flag = value.get<bool>();
  } else if (value.is_null()) {
    m.kind = Matcher::Kind::exact_null;
  } else {
    fail(where, "expected a string, number, true, false or null, got " + shown(value));
  }
  return m;
}

Matcher numeric(const Json& value, const std::string& where) {
  if (!value.is_array() || value.empty() || value.size() % 2 != 0 || value.size() > 4)
    fail(where, "expected [\"=\", N] or one or two bounds such as [\">\", 0, \"<=\", 5], got " +
                    shown(value));
  Matcher m;
  m.kind = Matcher::Kind::numeric;
  bool lower = false, upper = false;
  for (std::size_t i = 0; i < value.size(); i += 2) {
    const auto& op = value[i];
    const auto& limit = value[i + 1];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!op.is_string()) fail(at, "expected one of <, <=, =, >=, >, got " + shown(op));
    const std::string o = op.get<std::string>();
    Bound bound;
    if (o == "<" || o == "<=") {
      bound = o == "<" ? Bound::lt : Bound::le;
      if (upper) fail(at, "an upper bound is given twice");
      upper = true;
    } else if (o == ">" || o == ">=") {
      bound = o == ">" ? Bound::gt : Bound::ge;
      if (lower) fail(at, "a lower bound is given twice");
      lower = true;
    } else if (o == "=") {
      bound = Bound::eq;
      if (value.size() != 2) fail(at, "\"=\" stands alone: [\"=\", N]");
    } else {
      fail(at, "expected one of <, <=, =, >=, >, got " + shown(op));
    }
    if (!limit.is_number())
      fail(where + "[" + std::to_string(i + 1) + "]", "expected a number, got " + shown(limit));
    m.bounds.emplace_back(bound, limit.get<double>());
  }
  if (m.bounds.size() == 2) {  // a lower and an upper bound, in either order
    auto lower = m.bounds[0], upper = m.bounds[1];
    if (lower.first == Bound::lt || lower.first == Bound::le) std::swap(lower, upper);
    if (lower.second > upper.second ||
        (lower.second == upper.second && (lower.first == Bound::gt || upper.first == Bound::lt)))
      fail(where, "an empty range: no number is " + shown(value));
  }
  return m;
}

Matcher anything_but(const Json& value, const std::string& where) {
  Matcher m;
  m.kind = Matcher::Kind::anything_but;
  if (value.is_array()) {
    if (value.empty()) fail(where, "expected at least one value");
    for (std::size_t i = 0; i < value.size(); ++i)
      m.excluded.push_back(exact(value[i], where + "[" + std::to_string(i) + "]"));
  } else if (value.is_object()) {
    if (value.size() != 1)
      fail(where, "expected one of {prefix: ...}, {suffix: ...}, {equals-ignore-case: ...}");
    const std::string name = value.begin().key();
    const Json& inner = value.begin().value();
    if (name == "prefix" || name == "suffix") {
      m.excluded.push_back(affix(name, inner, where + "." + name));
    } else if (name == "equals-ignore-case") {
      const auto list = inner.is_array() ? inner : Json::array({inner});
      if (list.empty()) fail(where + "." + name, "expected at least one value");
      for (std::size_t i = 0; i < list.size(); ++i) {
        Matcher e;
        e.kind = Matcher::Kind::ignore_case;
        e.text = folded_or_fail(list[i], where + "." + name);
        m.excluded.push_back(std::move(e));
      }
    } else {
      fail(where + "." + name,
           "unknown operator inside anything-but: expected prefix, suffix or equals-ignore-case");
    }
  } else {
    m.excluded.push_back(exact(value, where));
  }
  return m;
}

Matcher matcher(const Json& value, const std::string& where, bool header) {
  if (!value.is_object()) {
    if (value.is_array()) fail(where, "expected a value or an operator, not a list in a list");
    if (header && (value.is_boolean() || value.is_null()))
      fail(where, "a header's value is text, never " + shown(value) + ": write \"" +
                      (value.is_null() ? std::string("null") : value.dump()) +
                      "\" (quoted), or {exists: " + (value.is_null() ? "false" : "true") + "}");
    return exact(value, where);
  }
  if (value.size() != 1)
    fail(where,
         "expected one operator per object (" + std::string(kOperators) + "), got " + shown(value));
  const std::string name = value.begin().key();
  const Json& operand = value.begin().value();
  const std::string at = where + "." + name;
  if (name == "prefix" || name == "suffix") return affix(name, operand, at);
  if (name == "equals-ignore-case") {
    Matcher m;
    m.kind = Matcher::Kind::ignore_case;
    m.text = folded_or_fail(operand, at);
    return m;
  }
  if (name == "anything-but") return anything_but(operand, at);
  if (name == "numeric") return numeric(operand, at);
  if (name == "exists") {
    if (!operand.is_boolean()) fail(at, "expected true or false, got " + shown(operand));
    Matcher m;
    m.kind = Matcher::Kind::exists;
    m.flag = operand.get<bool>();
    return m;
  }
  fail(at, std::string("unknown operator: expected ") + kOperators);
}

bool is_operator(const std::string& key) {
  for (const char* op : {"prefix", "suffix", "equals-ignore-case", "anything-but", "numeric",
                         "exists", "wildcard", "cidr"})
    if (key == op) return true;
  return false;
}

Group group(const Json& object, const std::string& where, bool flat,
            const std::vector<std::string>& prefix) {
  if (!object.is_object() || object.empty())
    fail(where, "expected a mapping of field names to lists of values, got " + shown(object));
  Group g;
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    const Json& value = it.value();
    const std::string at = where + "." + key;
    if (key == "$or") {
      if (!value.is_array() || value.size() < 2)
        fail(at, "expected a list of at least two patterns, got " + shown(value));
      std::vector<Group> alternatives;
      for (std::size_t i = 0; i < value.size(); ++i)
        alternatives.push_back(group(value[i], at + "[" + std::to_string(i) + "]", flat, prefix));
      g.ors.push_back(std::move(alternatives));
    } else if (value.is_array() && !prefix.empty() && is_operator(key)) {
      // `price: {numeric: [">", 0]}`: the list's brackets forgotten, read as a field
      // price.numeric that no event has.
      fail(at, "'" + key + "' is an operator, so it goes inside a list: " + prefix.back() + ": [{" +
                   key + ": ...}]");
    } else if (value.is_array()) {
      if (value.empty()) fail(at, "expected at least one value or operator");
      FieldTest test;
      test.path = prefix;
      test.path.push_back(key);
      for (std::size_t i = 0; i < value.size(); ++i)
        test.any_of.push_back(matcher(value[i], at + "[" + std::to_string(i) + "]", flat));
      g.all.push_back(std::move(test));
    } else if (value.is_object()) {
      if (flat) fail(at, "headers have no fields inside: expected a list of values or operators");
      auto path = prefix;
      path.push_back(key);
      auto inner = group(value, at, flat, path);
      for (auto& t : inner.all) g.all.push_back(std::move(t));
      for (auto& o : inner.ors) g.ors.push_back(std::move(o));
    } else {
      fail(at, "expected a list of values or operators, e.g. [" + shown(value) +
                   "] (a bare value is not a pattern)");
    }
  }
  return g;
}

// ------------------------------------------------------------------ matching

void body_leaves(const simdjson::dom::element& e, const std::vector<std::string>& path,
                 std::size_t i, std::vector<Leaf>& out) {
  using simdjson::dom::element_type;
  if (e.type() == element_type::ARRAY) {  // an array matches by any of its elements
    simdjson::dom::array array;
    if (e.get_array().get(array)) return;
    for (auto child : array) body_leaves(child, path, i, out);
    return;
  }
  if (i < path.size()) {
    if (e.type() != element_type::OBJECT) return;
    simdjson::dom::element child;
    simdjson::dom::object object;
    if (e.get_object().get(object) || object.at_key(path[i]).get(child)) return;
    body_leaves(child, path, i + 1, out);
    return;
  }
  Leaf leaf;
  switch (e.type()) {
    case element_type::STRING:
      leaf.kind = Leaf::Kind::string;
      leaf.text = e.get_string().value_unsafe();
      break;
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE:
      leaf.kind = Leaf::Kind::number;
      leaf.number = e.get_double().value_unsafe();
      break;
    case element_type::BOOL:
      leaf.kind = Leaf::Kind::boolean;
      leaf.flag = e.get_bool().value_unsafe();
      break;
    case element_type::NULL_VALUE:
      leaf.kind = Leaf::Kind::null;
      break;
    default:
      return;  // an object is not a leaf
  }
  out.push_back(leaf);
}

std::optional<double> number_in(std::string_view text) {
  double value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty() || !std::isfinite(value)) return std::nullopt;
  return value;
}

bool field_matches(const FieldTest& test, const std::vector<Leaf>& leaves) {
  for (const auto& m : test.any_of) {
    if (m.kind == Matcher::Kind::exists) {
      if (m.flag == !leaves.empty()) return true;
      continue;
    }
    for (const auto& leaf : leaves)
      if (m.matches(leaf)) return true;
  }
  return false;
}

template <class Collect>
bool group_matches(const Group& g, const Collect& collect) {
  thread_local std::vector<Leaf> leaves;
  for (const auto& test : g.all) {
    leaves.clear();
    collect(test.path, leaves);
    if (!field_matches(test, leaves)) return false;
  }
  for (const auto& alternatives : g.ors) {
    bool any = false;
    for (const auto& alternative : alternatives)
      if ((any = group_matches(alternative, collect))) break;
    if (!any) return false;
  }
  return true;
}

}  // namespace

struct Filter::Pattern {
  std::optional<Group> body;
  std::optional<Group> headers;
};

Filter::Filter() = default;
Filter::~Filter() = default;
Filter::Filter(Filter&&) noexcept = default;
Filter& Filter::operator=(Filter&&) noexcept = default;

Filter::Filter(const Json& patterns, std::string header_section) {
  if (!patterns.is_array()) fail("filter", "expected a list of patterns");
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    const std::string where = "filter[" + std::to_string(i) + "]";
    const auto& p = patterns[i];
    const std::string expected = header_section.empty() ? "body" : "body and/or " + header_section;
    if (!p.is_object() || p.empty())
      fail(where, "expected a pattern with " + expected + ", got " + shown(p));
    Pattern pattern;
    for (auto it = p.begin(); it != p.end(); ++it) {
      const std::string& key = it.key();
      const Json& value = it.value();
      if (key == "body") {
        pattern.body = group(value, where + ".body", false, {});
      } else if (!header_section.empty() && key == header_section) {
        pattern.headers = group(value, where + "." + key, true, {});
      } else {
        fail(where + "." + key, "unknown key: expected " + expected +
                                    (key == "messageAttributes" && header_section == "attributes"
                                         ? " (message attributes are under attributes, by name, "
                                           "without stringValue)"
                                         : ""));
      }
    }
    patterns_.push_back(std::move(pattern));
  }
}

bool Filter::empty() const {
  return patterns_.empty();
}
std::size_t Filter::size() const {
  return patterns_.size();
}

bool Filter::matches(const simdjson::dom::element& body, const MessageProperties& message) const {
  if (patterns_.empty()) return true;
  const auto from_body = [&](const std::vector<std::string>& path, std::vector<Leaf>& out) {
    body_leaves(body, path, 0, out);
  };
  const auto from_headers = [&](const std::vector<std::string>& path, std::vector<Leaf>& out) {
    if (!message.header) return;
    const auto value = message.header(message.header_context, path.front());
    if (!value) return;
    Leaf leaf;
    leaf.kind = Leaf::Kind::string;
    leaf.text = *value;
    leaf.number = number_in(*value);
    out.push_back(leaf);
  };
  for (const auto& p : patterns_) {
    if (p.body && !group_matches(*p.body, from_body)) continue;
    if (p.headers && !group_matches(*p.headers, from_headers)) continue;
    return true;
  }
  return false;
}

}  // namespace sluice::pipeline
