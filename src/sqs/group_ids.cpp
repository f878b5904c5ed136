#include "sqs/group_ids.hpp"

#include <simdjson.h>

namespace sluice::sqs {

bool valid_group_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (const char c : id)
    if (c <= ' ' || c > '~') return false;  // printable ASCII but the space
  return true;
}

std::optional<std::string> GroupIds::check() const {
  if (!fixed_.empty() && !pointer_.empty()) return "give --group-id or --group-id-from, not both";
  if (!fixed_.empty() && !valid_group_id(fixed_))
    return "--group-id: got '" + fixed_.substr(0, 160) + (fixed_.size() > 160 ? "..." : "") +
           "' (" + std::to_string(fixed_.size()) +
           " characters), expected 1 to 128 letters, digits or punctuation (no spaces)";
  // RFC 6901: '/' then the tokens, in which '~' is followed by 0 or 1.
  bool pointer_ok = pointer_.empty() || pointer_.front() == '/';
  for (std::size_t i = 0; pointer_ok && i < pointer_.size(); ++i)
    if (pointer_[i] == '~')
      pointer_ok = i + 1 < pointer_.size() && (pointer_[i + 1] == '0' || pointer_[i + 1] == '1');
  if (!pointer_ok)
    return "--group-id-from: got '" + pointer_.substr(0, 160) +
           "', expected a JSON pointer to a field of the event, such as /tenantId (a '~' "
           "written ~0, a '/' in a name ~1)";
  return std::nullopt;
}

GroupIds::Choice GroupIds::of(std::string_view body, std::size_t index) const {
  if (!fixed_.empty()) return {fixed_, {}};
  if (pointer_.empty()) return {fifo_ ? "g" + std::to_string(index % 16) : std::string(), {}};
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element doc, field;
  if (parser.parse(body.data(), body.size()).get(doc))
    return {{}, "--group-id-from " + pointer_ + ": the body is not JSON"};
  std::string id;
  if (doc.at_pointer(pointer_).get(field)) {
    if (!fifo_) return {};  // a standard queue takes messages without a group too
    return {{}, "--group-id-from: no " + pointer_ + " in the event (a FIFO queue needs a group)"};
  }
  if (std::string_view text; !field.get_string().get(text))
    id = text;
  else if (field.is_int64() || field.is_uint64())
    id = simdjson::to_string(field);
  else
    return {{},
            "--group-id-from " + pointer_ + ": expected a string or an integer, got " +
                std::string(simdjson::to_string(field)).substr(0, 64)};
  if (!valid_group_id(id))
    return {{},
            "--group-id-from " + pointer_ + ": got '" + id.substr(0, 160) +
                "', expected 1 to 128 letters, digits or punctuation (no spaces)"};
  return {std::move(id), {}};
}

}  // namespace sluice::sqs
