#include "pipeline/canonical_text.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace sluice::pipeline {
namespace {

bool is_space(utf8proc_int32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c == 0x85)
    return true;
  if (c < 0x80) return false;
  const auto category = utf8proc_category(c);
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL ||
         category == UTF8PROC_CATEGORY_ZP;
}

bool ascii_only(std::string_view text) {
  for (const unsigned char c : text)
    if (c >= 0x80) return false;
  return true;
}

}  // namespace

std::optional<std::string> canonical_text(std::string_view text, const TextTransforms& transforms) {
  std::string composed;
  // ASCII is its own NFC form: the common case skips utf8proc's allocation.
  if (transforms.nfc && !ascii_only(text)) {
    utf8proc_uint8_t* mapped = nullptr;
    const auto length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (length < 0) return std::nullopt;
    const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
    composed.assign(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
    text = composed;
  }
  std::string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  bool pending_space = false;  // whitespace seen since the last other character
  bool started = false;        // a character other than whitespace has been written
  std::string run;             // the whitespace run itself, when it is kept as written
  for (utf8proc_ssize_t pos = 0; pos < size;) {
    utf8proc_int32_t c = 0;
    const auto used = utf8proc_iterate(bytes + pos, size - pos, &c);
    if (used < 0) return std::nullopt;
    const std::string_view written(text.data() + pos, static_cast<std::size_t>(used));
    pos += used;
    if ((transforms.trim || transforms.collapse) && is_space(c)) {
      if (!transforms.collapse) run += written;
      pending_space = true;
      continue;
    }
    if (pending_space) {
      // A run before the first character is leading whitespace; trim drops it.
      if (started || !transforms.trim) out += transforms.collapse ? std::string_view(" ") : run;
      run.clear();
      pending_space = false;
    }
    started = true;
    if (transforms.letter_case != LetterCase::keep) {
      if (c < 0x80)  // ASCII, the common case, without the Unicode tables
        c = transforms.letter_case == LetterCase::lower ? (c >= 'A' && c <= 'Z' ? c + 32 : c)
                                                        : (c >= 'a' && c <= 'z' ? c - 32 : c);
      else
        c = transforms.letter_case == LetterCase::lower ? utf8proc_tolower(c) : utf8proc_toupper(c);
      utf8proc_uint8_t encoded[4];
      const auto n = utf8proc_encode_char(c, encoded);
      out.append(reinterpret_cast<const char*>(encoded), static_cast<std::size_t>(n));
    } else {
      out += written;
    }
  }
  if (pending_space && !transforms.trim) out += transforms.collapse ? std::string_view(" ") : run;
  return out;
}

std::size_t code_points(std::string_view text) {
  std::size_t count = 0;
  for (const unsigned char c : text)
    if ((c & 0xC0) != 0x80) ++count;
  return count;
}

}  // namespace sluice::pipeline
