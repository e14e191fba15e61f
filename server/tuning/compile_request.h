// Where templates meet the compiler: a bound candidate becomes a CompileRequest, and a
// registry's shared headers become the compiler's include path.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_TUNING_COMPILE_REQUEST_H_
#define KTUNE_SERVER_TUNING_COMPILE_REQUEST_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/compile/cache_key.h"
#include "server/compile/compiler.h"
#include "server/compile/cubin_cache.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"

namespace ktune {

// The source, name expressions and candidate options of `instance`.
CompileRequest BuildCompileRequest(const Instance& instance);

// The keyer of `tmpl`'s candidates: keyer.Key(instance.NameExpressions(),
// instance.CompileOptions(), identity) is CompileCacheKey(BuildCompileRequest(instance),
// identity) for each of them, without copying or hashing the source per candidate.
CompileCacheKeyer TemplateKeyer(const KernelTemplate& tmpl);

// An NVRTC compiler that can include the registry's shared headers, answering from
// `cache` when it is not null (it must then outlive the compiler), with NVRTC's automatic
// precompiled headers in `pch_dir` when that is not empty (NvrtcOptions::pch_dir), warming
// the cache through `filler` when that is not null (NewCachingCompiler).
absl::StatusOr<std::unique_ptr<Compiler>> NewTemplateCompiler(const TemplateRegistry& registry,
                                                              const CubinCache* cache,
                                                              const std::string& pch_dir = "",
                                                              CacheFiller* filler = nullptr);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_COMPILE_REQUEST_H_
