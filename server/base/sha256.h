// SHA-256 digests as lowercase hex, used for cubin integrity and cache keys.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_BASE_SHA256_H_
#define KTUNE_SERVER_BASE_SHA256_H_

#include <string>
#include "absl/strings/string_view.h"

namespace ktune {

// Returns the 64-character lowercase hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

// Incremental form, for digests over several pieces (a cache key over source, headers and
// options). Not thread-safe; one instance per digest.
class Sha256Builder {
 public:
  Sha256Builder();
  ~Sha256Builder();
  // A builder holding the same fields so far: digests that share a long prefix (many
  // compiles of one source) hash it once and finish from copies.
  Sha256Builder(const Sha256Builder& other);
  Sha256Builder& operator=(const Sha256Builder&) = delete;

  // Appends `data` preceded by its length, so ("ab","c") and ("a","bc") differ.
  Sha256Builder& AddField(absl::string_view data);
  // Returns the hex digest; the builder must not be used afterwards.
  std::string Finish();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so OpenSSL stays out of this header.
};

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_SHA256_H_
