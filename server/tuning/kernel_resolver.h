// KernelResolver: which kernel a request is answered with. In order: the stored entry for
// the exact key when it is fresh; otherwise, by policy, the stale entry (CACHE_ONLY), a
// tuning job's winner (TUNE), or (FALLBACK) the stale entry, else the nearest stored shape's
// cubin, else the template's default config compiled now, while a tuning job runs in the
// background. The answer says which.
//
// With a fleet tier (KernelResolverOptions::fleet), "the stored entry" reads through: a key
// the local store has no fresh entry for is looked up in the shared tier, and a verified
// record there is written to the local store and answered as an exact hit (fleet_sync.h).
// That read happens on the calling thread: it blocks for at most one Redis timeout
// (ktuned --remote-timeout-ms), and not at all during an outage's retry period.
//
// ktuned's GetKernel and Tune handlers call it; the clients' in-process caches are to go
// through the same semantics, so it speaks plain C++ values only.
//
// Thread-safe. Resolve calls `done` exactly once: on the calling thread for answers from the
// store, on a GPU's queue thread for a TUNE job's result, on one of the resolver's own
// threads for FALLBACK's neighbour search and default compile. `done` must not block.
//
// FALLBACK's searches and compiles wait in a bounded queue (KernelResolverOptions::
// fallback_queue; past it, kResourceExhausted); identical requests (template, dtype, shape,
// GPU) waiting or running share one compile; a request whose caller is gone by its turn
// (KernelQuery::abandoned) is skipped; Stop() answers every waiting request at once.
#ifndef KTUNE_SERVER_TUNING_KERNEL_RESOLVER_H_
#define KTUNE_SERVER_TUNING_KERNEL_RESOLVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "server/base/dtype.h"
#include "server/compile/compiler.h"
#include "server/store/store.h"
#include "server/templates/instance.h"
#include "server/templates/shape.h"
#include "server/templates/target.h"
#include "server/tuning/fleet_sync.h"
#include "server/tuning/kernel_query.h"
#include "server/tuning/tuning_job_handle.h"
#include "server/tuning/tuning_queue.h"

namespace ktune {

enum class KernelPolicy {
  kCacheOnly,  // the stored entry, stale or not; kNotFound without one
  kTune,       // the stored fresh entry, else a tuning job's winner
  kFallback,   // the stored entry, else the nearest or the default now; tunes behind
};

enum class KernelProvenance {
  kExact,    // tuned for exactly this key
  kNearest,  // tuned for another shape of the same device model, template and dtype
  kDefault,  // the template's default config, compiled now, never timed
};

struct ResolvedKernel {
  // The entry answered with. kNearest: the neighbour's, its key the neighbour's, its
  // launches re-bound for the request's shape. kDefault: made now (id 0, no metrics).
  store::Entry entry;
  bool stale = false;  // made with another template source or NVRTC version
  KernelProvenance provenance = KernelProvenance::kExact;
  // The binding the answer's arguments come from; empty: the query's reference.
  std::optional<Instance> bound;
  // The tuning job started or joined for this key (TUNE's, or FALLBACK's background tune);
  // 0 when none.
  int64_t tuning_job_id = 0;
  // A fresh exact entry read from the store for this call: the same answer under every
  // policy until the store's entries change (ChangeCounter), so a caller may keep it.
  bool cacheable = false;
};

using ResolveCallback = std::function<void(absl::StatusOr<ResolvedKernel>)>;

class KernelResolver {
 public:
  virtual ~KernelResolver() = default;

  // Resolves `query` under `policy` (see the top of this file) and calls `done` once.
  // Errors: kNotFound (CACHE_ONLY without an entry), the store's own, kFailedPrecondition
  // (TUNE without a usable GPU; FALLBACK when the default config does not fit the shape),
  // kInternal (the default config does not compile), the queues' kResourceExhausted,
  // kCancelled (the caller was gone by its turn), kUnavailable (after Stop).
  virtual void Resolve(const KernelQuery& query, KernelPolicy policy, ResolveCallback done) = 0;

  // The stored entry for the query's exact key, fresh or stale (the shared tier's when the
  // local store has none fresh and the tier has one). kNotFound naming the key (also on a
  // compile-only host whose store names no single device model).
  virtual absl::StatusOr<store::Lookup> Lookup(const KernelQuery& query) = 0;

  // Queues a tuning job for the query's key, or joins the identical one.
  // kFailedPrecondition without a usable GPU; the queue's errors otherwise. With a fleet
  // tier and `yield_to_lease`, the job ends with kAborted when another host is tuning the
  // key (TuneRequest::yield_to_lease).
  virtual absl::StatusOr<std::shared_ptr<TuningJob>> Tune(const KernelQuery& query,
                                                          const SearchSettings& search,
                                                          bool yield_to_lease) = 0;
  absl::StatusOr<std::shared_ptr<TuningJob>> Tune(const KernelQuery& query,
                                                  const SearchSettings& search) {
    return Tune(query, search, /*yield_to_lease=*/false);
  }

  // For shutdown: every FALLBACK request still waiting is answered kUnavailable now, and
  // so is every later one; a compile already running finishes. Idempotent.
  virtual void Stop() = 0;

  // The store's entries change counter (store::Store::EntriesChangeCounter): an answer
  // marked cacheable stays right until it changes.
  virtual absl::StatusOr<int64_t> ChangeCounter() = 0;

  // The device model GPU `gpu`'s entries are kept under: on a compile-only host the one
  // model its store knows, or "" when it knows none or several.
  virtual const std::string& DeviceModel(int gpu) const = 0;
  // The target GPU `gpu` compiles for (compile-only: the model's, else the configured one).
  virtual TargetInfo Target(int gpu) const = 0;
};

struct KernelResolverOptions {
  // Must outlive the resolver. The compiler must be thread-safe.
  store::Store* store = nullptr;
  Compiler* compiler = nullptr;
  // One environment per GPU, ordinal for ordinal with `devices`; unused when there is none.
  TuningQueue* queue = nullptr;
  // The usable GPUs by ordinal; empty: a compile-only host.
  std::vector<v1::DeviceInfo> devices;
  // Compile-only: why there is no GPU (for TUNE's error), and the target for DEFAULT
  // compiles when the store names no single device model.
  std::string compile_only_reason;
  TargetInfo compile_only_target;
  // Threads for FALLBACK's neighbour search and default-config compiles.
  int threads = 2;
  // Distinct FALLBACK compiles waiting for a thread (identical requests count once); past
  // it, kResourceExhausted.
  int fallback_queue = 64;
  // The fleet's shared tier behind the store; null: none. Must outlive the resolver.
  FleetSync* fleet = nullptr;
};

// REQUIRES: store and compiler set. On a compile-only host, reads the store's devices once.
std::unique_ptr<KernelResolver> NewKernelResolver(KernelResolverOptions options);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_KERNEL_RESOLVER_H_
