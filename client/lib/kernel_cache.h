// KernelCache: an in-process cache of ready-to-launch kernels for C++ inference servers,
// keyed by (template, dtype, shape, GPU), over a KtuneClient and LoadedKernel. No LibTorch:
// launches take raw device pointers and a CUstream.
//
//   auto cache = NewKernelCache(client, {});            // policy FALLBACK by default
//   cache->Prefetch(keys);                              // at start-up: one GetKernels call
//   ASSIGN_OR_RETURN(auto k, cache->Get({"rmsnorm", "bf16", {{"tokens", 8}, {"hidden", 4096}}}));
//   RETURN_IF_ERROR(k->kernel->Launch(stream, {x, weight, out, nullptr, nullptr}));
//
// The first Get of a key asks ktuned (under the configured policy) and loads the artifact
// into the calling thread's current context; later Gets are a hash-map hit under a reader
// lock returning the same loaded kernel (module and functions resolved, scalars packed).
// A non-exact answer (FALLBACK's neighbour or default config, or a stale entry) is checked
// again in the background, every refresh_period, with one CACHE_ONLY GetKernels call for all
// such keys; once ktuned has the tuned kernel, the background thread loads it (pushing the
// kernel's context) and the next Get returns it. Nothing on the Get path waits for that.
//
// A failed ask (no daemon: kUnavailable naming the target; a bad key: the daemon's
// kInvalidArgument) is remembered for retry_after: Gets of that key return the same status
// at once instead of asking again, so a server without ktuned falls back to its own kernels
// at the cost of one failed call per key and period.
//
// REQUIRES: one CUDA context per cache: every Get, Launch and Prefetch with the same context
// current (a kernel launched from another context fails kFailedPrecondition). The cache, and
// every CachedKernel it returned, go before that context does.
// Thread-safety: every method is safe from many threads at once. A key asked by several
// threads together is fetched once; the others wait for it.
#ifndef KTUNE_CLIENT_LIB_KERNEL_CACHE_H_
#define KTUNE_CLIENT_LIB_KERNEL_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/lib/cuda_api.h"
#include "client/lib/ktune_client.h"
#include "client/lib/loaded_kernel.h"

namespace ktune::client {

struct KernelKey {
  std::string template_id;
  std::string dtype;
  Shape shape;
  int32_t gpu = 0;  // the daemon's ordinal of the GPU whose context is current

  friend bool operator==(const KernelKey& a, const KernelKey& b) {
    return a.gpu == b.gpu && a.template_id == b.template_id && a.dtype == b.dtype &&
           a.shape == b.shape;
  }
  template <typename H>
  friend H AbslHashValue(H h, const KernelKey& k) {
    h = H::combine(std::move(h), k.template_id, k.dtype, k.gpu);
    for (const auto& [dim, size] : k.shape) h = H::combine(std::move(h), dim, size);
    return h;
  }
};

// "rmsnorm bf16 hidden=4096,tokens=8 gpu 0", for messages.
std::string KeyString(const KernelKey& key);

// One key's kernel as the cache holds it now: immutable; a refresh installs a new one.
struct CachedKernel {
  std::shared_ptr<const LoadedKernel> kernel;
  Provenance provenance = Provenance::kUnspecified;
  bool stale = false;
  std::string cubin_sha256;
  std::map<std::string, int64_t> params;
  // True when the background check goes on for it (not exact, or stale).
  bool provisional() const { return provenance != Provenance::kExact || stale; }
};

struct KernelCacheOptions {
  // The policy of a key's first ask (and of Prefetch).
  Policy policy = Policy::kFallback;
  // How often provisional kernels are checked against ktuned; InfiniteDuration(): never.
  absl::Duration refresh_period = absl::Seconds(10);
  // How long a failed ask is answered from memory before the key is asked again.
  absl::Duration retry_after = absl::Seconds(30);
  // Deadline of each ask; zero: the client's default (30 s). TUNE wants minutes.
  absl::Duration deadline = absl::ZeroDuration();
  // The driver: null for LoadCudaApi() (tests pass a fake). Must outlive the cache.
  const CudaApi* api = nullptr;
  // How the kernels it loads launch (LoadOptions: programmatic launches, off unless set or
  // KTUNE_PROGRAMMATIC_LAUNCH=1).
  LoadOptions load;
};

class KernelCache {
 public:
  virtual ~KernelCache() = default;

  // The key's kernel, loaded into the current context: from memory, or asked and loaded on
  // the first call. Errors: the daemon's (kUnavailable without one, kNotFound under
  // CACHE_ONLY, kInvalidArgument naming the field), LoadedKernel::Load's (kUnavailable
  // without a driver, kFailedPrecondition without a current context); each remembered for
  // retry_after.
  virtual absl::StatusOr<std::shared_ptr<const CachedKernel>> Get(const KernelKey& key) = 0;

  // Get, then Launch on `stream` with `buffers` (LoadedKernel::Launch's by-index form).
  virtual absl::Status Launch(const KernelKey& key, CuStream stream,
                              const std::vector<void*>& buffers) = 0;

  // Warm-up: every key not yet held is asked in one GetKernels call (several past
  // kMaxKernelsPerCall) and loaded into the current context. One status per key, in order:
  // what Get would now return for it (a key already held is OK; a key whose earlier ask
  // failed within retry_after keeps that error without a new ask).
  virtual std::vector<absl::Status> Prefetch(const std::vector<KernelKey>& keys) = 0;

  // Runs one background check now (tests; a server after it knows a tune finished): asks
  // ktuned for every provisional key and installs the tuned kernels it has (a tuned config
  // that is the one held keeps its loaded kernel, now marked exact). Returns how many keys
  // it settled that way.
  virtual int RefreshNow() = 0;
};

// A cache over `client` (shared: the cache's background thread uses it too). Starts the
// background thread unless options.refresh_period is infinite; the destructor stops it.
std::unique_ptr<KernelCache> NewKernelCache(std::shared_ptr<KtuneClient> client,
                                            KernelCacheOptions options);

}  // namespace ktune::client

#endif  // KTUNE_CLIENT_LIB_KERNEL_CACHE_H_
