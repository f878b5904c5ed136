#pragma once
// Canonical text: the transforms that make two spellings of one business value equal
// before it is hashed ("  Ship  ed" and "shipped" are not equal; " SHIPPED" and
// "shipped" are, with trim and lower). Unicode-aware (utf8proc): NFC composes "e" +
// U+0301 into "é", case maps beyond ASCII, and whitespace is every Unicode space.

#include <optional>
#include <string>
#include <string_view>

namespace sluice::pipeline {

enum class LetterCase { keep, lower, upper };

struct TextTransforms {
  bool nfc = false;       // Unicode normalization form C
  bool trim = false;      // leading and trailing whitespace
  bool collapse = false;  // each inner run of whitespace becomes one space
  LetterCase letter_case = LetterCase::keep;
  bool any() const { return nfc || trim || collapse || letter_case != LetterCase::keep; }
};

// Applies them in one fixed order, whatever order the configuration lists them in:
// NFC, trim, collapse, case. nullopt when `text` is not valid UTF-8.
std::optional<std::string> canonical_text(std::string_view text, const TextTransforms& transforms);

// Code points in valid UTF-8 (lengths for min_length/max_length).
std::size_t code_points(std::string_view text);

}  // namespace sluice::pipeline
