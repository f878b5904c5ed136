#include "common/crypto.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <stdexcept>

namespace sluice::crypto {
namespace {
// Explicitly fetched once: OpenSSL 3 otherwise looks the algorithm up on every call,
// which costs more than digesting a typical SQS message.
const EVP_MD* fetched(const char* name) {
  const EVP_MD* md = EVP_MD_fetch(nullptr, name, nullptr);
  if (!md) throw std::runtime_error(std::string("OpenSSL has no ") + name);
  return md;
}
const EVP_MD* sha256_md() {
  static const EVP_MD* md = fetched("SHA256");
  return md;
}
const EVP_MD* md5_md() {
  static const EVP_MD* md = fetched("MD5");
  return md;
}
}  // namespace

Sha256 sha256(std::string_view data) {
  Sha256 out{};
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &size, sha256_md(), nullptr) != 1)
    throw std::runtime_error("EVP_Digest(sha256) failed");
  return out;
}

Sha256 hmac_sha256(std::string_view key, std::string_view data) {
  Sha256 out{};
  unsigned int size = 0;
  if (!HMAC(sha256_md(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &size))
    throw std::runtime_error("HMAC(sha256) failed");
  return out;
}

Md5 md5(std::string_view data) {
  Md5 out{};
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &size, md5_md(), nullptr) != 1)
    throw std::runtime_error("EVP_Digest(md5) failed");
  return out;
}

void append_hex(std::string& out, const std::uint8_t* data, std::size_t size) {
  static constexpr char digits[] = "0123456789abcdef";
  const std::size_t at = out.size();
  out.resize(at + size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out[at + 2 * i] = digits[data[i] >> 4];
    out[at + 2 * i + 1] = digits[data[i] & 0xf];
  }
}

std::string hex(const std::uint8_t* data, std::size_t size) {
  std::string out;
  append_hex(out, data, size);
  return out;
}

std::string base64_encode(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(data.data()),
                                      static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(written));
  return out;
}

bool base64_decode(std::string_view text, std::string& out) {
  if (text.size() % 4 != 0) return false;
  out.assign(3 * text.size() / 4, '\0');
  const int written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(text.data()),
                                      static_cast<int>(text.size()));
  if (written < 0) return false;
  // EVP_DecodeBlock counts padding as zero bytes; drop them.
  std::size_t size = static_cast<std::size_t>(written);
  if (!text.empty() && text.back() == '=') --size;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --size;
  out.resize(size);
  return true;
}

Md5Builder::Md5Builder() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), md5_md(), nullptr) != 1)
    throw std::runtime_error("EVP_DigestInit_ex(md5) failed");
}
Md5Builder::~Md5Builder() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}
void Md5Builder::update(std::string_view data) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size());
}
Md5 Md5Builder::finish() {
  Md5 out{};
  unsigned int size = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &size);
  return out;
}

}  // namespace sluice::crypto
