// The identity of one compile: a hash of everything that changes the binary.
//
// Pure function; thread-safe. Pinned by a golden test: changing the format changes every
// key, so bump kCompileKeyVersion on purpose, never by accident.
#ifndef KTUNE_SERVER_COMPILE_CACHE_KEY_H_
#define KTUNE_SERVER_COMPILE_CACHE_KEY_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/base/sha256.h"
#include "server/compile/compiler.h"

namespace ktune {

inline constexpr absl::string_view kCompileKeyVersion = "ktune-compile-key-1";

// sha256 hex over: kCompileKeyVersion, the source's name and bytes, each name expression, each
// option (in order: order can change meaning), and the compiler's identity (NVRTC version
// and build, its own options, a digest of the headers it can include).
std::string CompileCacheKey(const CompileRequest& request, absl::string_view compiler_identity);

// The keys of many compiles of one source (a template's candidates) with the source hashed
// once: Key(names, options, identity) is CompileCacheKey of the request with this source
// name and source and those name expressions and options. Immutable; thread-safe.
class CompileCacheKeyer {
 public:
  CompileCacheKeyer(absl::string_view source_name, absl::string_view source);
  std::string Key(const std::vector<std::string>& name_expressions,
                  const std::vector<std::string>& options,
                  absl::string_view compiler_identity) const;

 private:
  Sha256Builder source_;  // the fields up to the source's bytes
};

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_CACHE_KEY_H_
