// An on-disk cache of compile results, keyed by CompileCacheKey: a repeated compile is a
// file read.
//
// Files are written whole under a temporary name and renamed into place, so concurrent
// writers (threads or processes) and crashes never leave a partial entry; a file that does
// not check out (truncated, corrupted, another format) is a miss and is removed. Safe for
// concurrent use.
#ifndef KTUNE_SERVER_COMPILE_CUBIN_CACHE_H_
#define KTUNE_SERVER_COMPILE_CUBIN_CACHE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/compile/compiler.h"

namespace ktune {

class CubinCache {
 public:
  // Uses (and creates, mode 0700) folder `dir`.
  static absl::StatusOr<std::unique_ptr<CubinCache>> Open(const std::string& dir);

  // The stored result for `key`, with cache_hit set; nullopt on a miss.
  std::optional<CompileResult> Get(const std::string& key) const;
  // Whether an entry for `key` is there (not whether it checks out: Get says that).
  bool Contains(const std::string& key) const;
  // Stores `result` (failed compiles too: they fail the same way every time).
  absl::Status Put(const std::string& key, const CompileResult& result) const;

  const std::string& dir() const { return dir_; }

 private:
  explicit CubinCache(std::string dir) : dir_(std::move(dir)) {}
  std::string PathFor(const std::string& key) const;
  std::string dir_;
};

// Compiles a program into the cache somewhere other than the calling thread's process
// (ktune-warm helpers), under the key the caller computed with the compiler `identity`.
class CacheFiller {
 public:
  virtual ~CacheFiller() = default;
  virtual absl::Status Fill(const CompileRequest& request, const std::string& key,
                            const std::string& identity) = 0;
};

// A Compiler that answers from `cache` when it can and fills it otherwise; a compile of a key
// already being compiled by another thread waits for that one's result (cache_hit set)
// instead of compiling it again. Its Warm has `filler` compile a key that is neither cached
// nor being compiled into the cache, and does nothing without a filler: NVRTC compiles in
// one process slow each other down whatever their threads' class, so a warm never runs in
// this one. A Compile of a key being warmed does not wait for it but compiles it too.
// `cache` and `filler` must outlive the result. Thread-safe as `inner` is.
std::unique_ptr<Compiler> NewCachingCompiler(std::unique_ptr<Compiler> inner,
                                             const CubinCache* cache,
                                             CacheFiller* filler = nullptr);

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_CUBIN_CACHE_H_
