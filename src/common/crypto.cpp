#include "common/crypto.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

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

// A digest context per thread, made once and reset for each digest: OpenSSL's one-shot
// EVP_Digest makes and frees a context on every call (profiled: with HMAC's, a third of
// the SigV4 signing's time).
EVP_MD_CTX* thread_context() {
  struct Owned {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~Owned() { EVP_MD_CTX_free(ctx); }
  };
  thread_local Owned owned;
  if (!owned.ctx) throw std::runtime_error("EVP_MD_CTX_new failed");
  return owned.ctx;
}

template <std::size_t N>
void digest(const EVP_MD* md, std::string_view data, std::array<std::uint8_t, N>& out) {
  EVP_MD_CTX* ctx = thread_context();
  unsigned int size = 0;
  bool ok = EVP_DigestInit_ex2(ctx, md, nullptr) == 1;
  ok = ok && EVP_DigestUpdate(ctx, data.data(), data.size()) == 1;
  if (!ok || EVP_DigestFinal_ex(ctx, out.data(), &size) != 1 || size != N)
    throw std::runtime_error(std::string("digest (") + EVP_MD_get0_name(md) + ") failed");
}
}  // namespace

Sha256 sha256(std::string_view data) {
  Sha256 out{};
  digest(sha256_md(), data, out);
  return out;
}

// OpenSSL's HMAC on a context per thread, keyed afresh each call: the one-shot HMAC()
// fetches the algorithm and makes a context every time.
Sha256 hmac_sha256(std::string_view key, std::string_view data) {
  struct Owned {
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
    Owned() {
      char digest_name[] = "SHA256";
      const OSSL_PARAM params[] = {
          OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
          OSSL_PARAM_construct_end()};
      if (ctx && EVP_MAC_CTX_set_params(ctx, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = nullptr;
      }
    }
    ~Owned() {
      EVP_MAC_CTX_free(ctx);
      EVP_MAC_free(mac);
    }
  };
  thread_local Owned owned;
  if (!owned.ctx) throw std::runtime_error("OpenSSL has no HMAC-SHA256");
  Sha256 out{};
  std::size_t size = 0;
  if (EVP_MAC_init(owned.ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                   nullptr) != 1 ||
      EVP_MAC_update(owned.ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) !=
          1 ||
      EVP_MAC_final(owned.ctx, out.data(), &size, out.size()) != 1 || size != out.size())
    throw std::runtime_error("HMAC(sha256) failed");
  return out;
}

Md5 md5(std::string_view data) {
  Md5 out{};
  digest(md5_md(), data, out);
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
