#pragma once
// The XML answers of the query-protocol and REST services (SNS, S3) as a small
// element tree, parsed with expat. Namespace prefixes are dropped from names.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::aws {

struct XmlElement {
  std::string name;
  std::string text;  // character data directly inside it
  std::vector<XmlElement> children;

  const XmlElement* child(std::string_view name) const;
  // The first such child's text; empty when there is none.
  std::string child_text(std::string_view name) const;
  // The first element with this name anywhere below (depth first), or null.
  const XmlElement* find(std::string_view name) const;
};

// nullopt when the text is not well-formed XML or nests deeper than 64 levels.
std::optional<XmlElement> parse_xml(std::string_view text);

}  // namespace sluice::aws
