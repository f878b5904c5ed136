#pragma once
// Thin wrappers over OpenSSL's EVP digests; internal to Sluice.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::crypto {

using Sha256 = std::array<std::uint8_t, 32>;
using Md5 = std::array<std::uint8_t, 16>;

Sha256 sha256(std::string_view data);
Sha256 hmac_sha256(std::string_view key, std::string_view data);
Md5 md5(std::string_view data);

std::string hex(const std::uint8_t* data, std::size_t size);
void append_hex(std::string& out, const std::uint8_t* data, std::size_t size);
template <std::size_t N>
std::string hex(const std::array<std::uint8_t, N>& digest) {
  return hex(digest.data(), digest.size());
}
// hex(digest) == text, without building the hex string.
template <std::size_t N>
bool hex_equals(const std::array<std::uint8_t, N>& digest, std::string_view text) {
  static constexpr char digits[] = "0123456789abcdef";
  if (text.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (text[2 * i] != digits[digest[i] >> 4] || text[2 * i + 1] != digits[digest[i] & 0xf])
      return false;
  return true;
}
inline std::string sha256_hex(std::string_view data) {
  return hex(sha256(data));
}
inline std::string md5_hex(std::string_view data) {
  return hex(md5(data));
}

std::string base64_encode(std::string_view data);
// Returns false on malformed input.
bool base64_decode(std::string_view text, std::string& out);

// An incremental MD5 for the SQS message-attribute digest.
class Md5Builder {
 public:
  Md5Builder();
  ~Md5Builder();
  Md5Builder(const Md5Builder&) = delete;
  Md5Builder& operator=(const Md5Builder&) = delete;
  void update(std::string_view data);
  Md5 finish();

 private:
  void* ctx_;
};

}  // namespace sluice::crypto
