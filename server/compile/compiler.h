// The compiler seam: CUDA C++ source + name expressions + options -> cubin, lowered names,
// resource use and the log.
//
// Implementations are safe for concurrent Compile calls from many threads (NVRTC compiles
// independent programs concurrently). The tuning loop sees only this interface, so tests
// can put a fake behind it.
#ifndef KTUNE_SERVER_COMPILE_COMPILER_H_
#define KTUNE_SERVER_COMPILE_COMPILER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/compile/ptxas_info.h"

namespace ktune {

struct CompileRequest {
  std::string source;       // the .cu file's bytes
  std::string source_name;  // for diagnostics, e.g. "rmsnorm.cu"
  // NVRTC name expressions, e.g. "rmsnorm_kernel<__nv_bfloat16, 256, 8, 0, 1>".
  std::vector<std::string> name_expressions;
  // Options that depend on the candidate (Instance::CompileOptions()); must name a real
  // architecture (--gpu-architecture=sm_XY[a]) so the result is a cubin.
  std::vector<std::string> options;
};

struct CompiledKernel {
  std::string name_expression;
  std::string lowered_name;     // the mangled name to look up in the cubin
  KernelResources resources;    // from ptxas; zeros if its report was missing
};

struct CompileResult {
  // False when the program did not compile: a result (the candidate's outcome is
  // compile_failed, with `log`), not an error.
  bool ok = false;
  std::string cubin;
  std::vector<CompiledKernel> kernels;  // one per name expression, in request order
  std::string log;                      // NVRTC's log, ptxas's report included
  double compile_ms = 0;                // NVRTC's time when it was compiled
  bool cache_hit = false;               // read from the on-disk cache
  // The candidate's identity: a hash of everything that changes the binary (cache_key.h).
  std::string key;
};

class Compiler {
 public:
  virtual ~Compiler() = default;

  // kInvalidArgument for a request that cannot be a cubin (no name expression, no real
  // architecture); kInternal/kResourceExhausted when the compiler itself failed. Source
  // that does not compile is an OK result with ok == false.
  virtual absl::StatusOr<CompileResult> Compile(const CompileRequest& request) = 0;

  // Puts `request`'s result where a later Compile of it finds it, ahead of that Compile
  // (the idle compiles of a tuning job's unmeasured candidates). A compiler with no cache
  // has nowhere to put it: the default does nothing. Never makes a Compile of the same
  // program wait for it; kInternal/kResourceExhausted as Compile when the compiler failed.
  virtual absl::Status Warm(const CompileRequest& request) {
    (void)request;
    return absl::OkStatus();
  }

  // Whether a Compile of the request whose cache key is `key` (CompileCacheKey with this
  // compiler's Identity()) would be answered now without compiling it: its result is in the
  // cache, or a Compile of it is under way. A compiler with no cache: never. A file lookup,
  // so a search can ask it of every candidate (keyed by a CompileCacheKeyer, the source
  // hashed once) to prefer the ones it gets for the cost of a measurement.
  virtual bool Cached(const std::string& key) {
    (void)key;
    return false;
  }

  // Everything about the compiler that changes its output beside the request: its version
  // and build, its own options, the headers it can include. Goes into cache keys.
  virtual std::string Identity() const = 0;

  // The NVRTC version, "13.0": stored with entries so a compiler upgrade marks them stale.
  virtual std::string Version() const = 0;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_COMPILER_H_
