// Where a field's value is: JSON pointers into a body (RFC 6901), dotted names in a
// built document; and the names the pipeline's enums are shown by in reasons, logs
// and the documentation.
#include <simdjson.h>

#include <algorithm>
#include <stdexcept>

#include "pipeline/projection.hpp"

namespace sluice::pipeline {
namespace {
using simdjson::dom::element;
using simdjson::dom::element_type;
using Json = nlohmann::ordered_json;
}  // namespace

const char* to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::malformed:
      return "malformed";
    case RejectReason::validation:
      return "validation";
    case RejectReason::schema_drift:
      return "schema_drift";
  }
  return "unknown";
}

const char* sns_envelope_key(MetaField field) {
  switch (field) {
    case MetaField::sns_message_id:
      return "MessageId";
    case MetaField::sns_topic_arn:
      return "TopicArn";
    case MetaField::sns_timestamp:
      return "Timestamp";
    case MetaField::sns_subject:
      return "Subject";
    case MetaField::sns_signature:
      return "Signature";
    case MetaField::sns_signature_version:
      return "SignatureVersion";
    case MetaField::sns_signing_cert_url:
      return "SigningCertURL";
    default:
      return nullptr;
  }
}

std::string truncated(std::string text) {
  if (text.size() > 60) {
    std::size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

std::vector<std::string> pointer_tokens(std::string_view pointer) {
  if (pointer.empty() || pointer.front() != '/')
    throw std::invalid_argument("expected a JSON pointer starting with '/'");
  std::vector<std::string> tokens;
  std::string token;
  for (std::size_t i = 1; i <= pointer.size(); ++i) {
    if (i == pointer.size() || pointer[i] == '/') {
      tokens.push_back(std::move(token));
      token.clear();
    } else if (pointer[i] == '~') {
      if (i + 1 >= pointer.size() || (pointer[i + 1] != '0' && pointer[i + 1] != '1'))
        throw std::invalid_argument("expected ~0 or ~1 after '~' (RFC 6901)");
      token += pointer[++i] == '0' ? '~' : '/';
    } else {
      token += pointer[i];
    }
  }
  return tokens;
}

bool at_pointer(const element& root, const std::vector<std::string>& tokens, element& at) {
  at = root;
  for (const auto& token : tokens) {
    if (at.type() == element_type::OBJECT) {
      if (at.get_object().value().at_key(token).get(at)) return false;
    } else if (at.type() == element_type::ARRAY) {
      // RFC 6901: an index is 0 or digits without a leading zero.
      if (token.empty() || token.size() > 9 ||
          token.find_first_not_of("0123456789") != std::string::npos ||
          (token.size() > 1 && token[0] == '0'))
        return false;
      if (at.get_array().value().at(std::stoul(token)).get(at)) return false;
    } else {
      return false;
    }
  }
  return true;
}

const Json* find_field(const Json& document, std::string_view name) {
  const Json* at = &document;
  while (true) {
    const auto dot = name.find('.');
    const std::string_view part = name.substr(0, dot);
    if (!at->is_object()) return nullptr;
    // The object is a vector of pairs: scanned with the view, no key string made.
    const auto& object = at->get_ref<const Json::object_t&>();
    const auto it = std::find_if(object.begin(), object.end(),
                                 [&](const auto& entry) { return entry.first == part; });
    if (it == object.end()) return nullptr;
    at = &it->second;
    if (dot == std::string_view::npos) return at;
    name.remove_prefix(dot + 1);
  }
}

}  // namespace sluice::pipeline
