#include "server/base/sha256.h"

#include <openssl/evp.h>

#include <cstdint>
#include <cstdlib>

namespace ktune {
namespace {

std::string ToHex(const unsigned char* bytes, unsigned int n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  // EVP_Digest only fails on allocation failure inside OpenSSL; treat that as fatal like
  // any other out-of-memory.
  if (EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
  return ToHex(digest, n);
}

Sha256Builder::Sha256Builder() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr ||
      EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
}

Sha256Builder::Sha256Builder(const Sha256Builder& other) : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_MD_CTX_copy_ex(static_cast<EVP_MD_CTX*>(ctx_),
                                            static_cast<const EVP_MD_CTX*>(other.ctx_)) != 1) {
    std::abort();
  }
}

Sha256Builder::~Sha256Builder() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

Sha256Builder& Sha256Builder::AddField(absl::string_view data) {
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  // The length as 8 little-endian bytes whatever the host's byte order, so a key computed
  // on one machine matches another's.
  unsigned char size[8];
  for (int i = 0; i < 8; ++i) {
    size[i] = static_cast<unsigned char>(uint64_t{data.size()} >> (8 * i));
  }
  if (EVP_DigestUpdate(ctx, size, sizeof(size)) != 1 ||
      EVP_DigestUpdate(ctx, data.data(), data.size()) != 1) {
    std::abort();
  }
  return *this;
}

std::string Sha256Builder::Finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &n) != 1) std::abort();
  return ToHex(digest, n);
}

}  // namespace ktune
