#include "aws/xml.hpp"

#include <expat.h>

#include <memory>

namespace sluice::aws {

const XmlElement* XmlElement::child(std::string_view wanted) const {
  for (const auto& c : children)
    if (c.name == wanted) return &c;
  return nullptr;
}

std::string XmlElement::child_text(std::string_view wanted) const {
  const XmlElement* c = child(wanted);
  return c ? c->text : std::string();
}

const XmlElement* XmlElement::find(std::string_view wanted) const {
  for (const auto& c : children) {
    if (c.name == wanted) return &c;
    if (const XmlElement* below = c.find(wanted)) return below;
  }
  return nullptr;
}

namespace {

constexpr std::size_t kMaxDepth = 64;

struct Builder {
  XmlElement root;  // a synthetic parent of the document element
  std::vector<XmlElement*> stack{&root};
  bool too_deep = false;
};

std::string local_name(const char* name) {
  std::string_view n(name);
  if (auto colon = n.rfind(':'); colon != std::string_view::npos) n.remove_prefix(colon + 1);
  return std::string(n);
}

void on_start(void* data, const char* name, const char**) {
  auto* b = static_cast<Builder*>(data);
  if (b->stack.size() > kMaxDepth) {
    b->too_deep = true;
    return;
  }
  XmlElement& parent = *b->stack.back();
  parent.children.push_back(XmlElement{local_name(name), {}, {}});
  b->stack.push_back(&parent.children.back());
}

void on_end(void* data, const char*) {
  auto* b = static_cast<Builder*>(data);
  if (b->too_deep) return;
  b->stack.pop_back();
}

void on_text(void* data, const char* s, int len) {
  auto* b = static_cast<Builder*>(data);
  if (b->too_deep) return;
  b->stack.back()->text.append(s, static_cast<std::size_t>(len));
}

}  // namespace

std::optional<XmlElement> parse_xml(std::string_view text) {
  std::unique_ptr<XML_ParserStruct, decltype(&XML_ParserFree)> parser(XML_ParserCreate("UTF-8"),
                                                                      &XML_ParserFree);
  if (!parser) return std::nullopt;
  Builder builder;
  XML_SetUserData(parser.get(), &builder);
  XML_SetElementHandler(parser.get(), on_start, on_end);
  XML_SetCharacterDataHandler(parser.get(), on_text);
  // The stack points only at the open path, each the last child of its parent: a
  // push into an open element's children moves only closed siblings.
  if (text.size() > static_cast<std::size_t>(INT32_MAX)) return std::nullopt;
  if (XML_Parse(parser.get(), text.data(), static_cast<int>(text.size()), XML_TRUE) !=
          XML_STATUS_OK ||
      builder.too_deep || builder.root.children.size() != 1)
    return std::nullopt;
  return std::move(builder.root.children.front());
}

}  // namespace sluice::aws
