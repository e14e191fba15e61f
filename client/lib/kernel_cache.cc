#include "client/lib/kernel_cache.h"

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/base/status_macros.h"

namespace ktune::client {
namespace {

// One key's state. Slots are never erased, so a Slot* stays valid for the cache's life.
struct Slot {
  std::shared_ptr<const CachedKernel> current;  // null until a fetch succeeded
  absl::Status error;                           // the last failed fetch's, while current is null
  absl::Time retry_at = absl::InfinitePast();   // when `error` may be asked again
  bool fetching = false;                        // a thread is asking for it now
};

bool NotFetching(const Slot* slot) { return !slot->fetching; }

// `status` naming the key; `batch` is the client's "requests[j]" for a GetKernels answer,
// which is dropped (with the ": " or "." after it) in favour of the key.
absl::Status ForKey(const absl::Status& status, const KernelKey& key,
                    absl::string_view batch = "") {
  absl::string_view message = status.message();
  if (!batch.empty() && absl::ConsumePrefix(&message, batch)) {
    if (!absl::ConsumePrefix(&message, ": ")) absl::ConsumePrefix(&message, ".");
  }
  return absl::Status(status.code(), absl::StrCat(KeyString(key), ": ", message));
}

class KernelCacheImpl final : public KernelCache {
 public:
  KernelCacheImpl(std::shared_ptr<KtuneClient> client, KernelCacheOptions options)
      : client_(std::move(client)), options_(std::move(options)) {
    if (options_.refresh_period != absl::InfiniteDuration()) {
      refresher_ = std::thread([this] { RefreshLoop(); });
    }
  }

  ~KernelCacheImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (refresher_.joinable()) refresher_.join();
  }

  absl::StatusOr<std::shared_ptr<const CachedKernel>> Get(const KernelKey& key) override {
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = slots_.find(key);
      if (it != slots_.end() && it->second->current != nullptr) return it->second->current;
    }
    return GetSlow(key);
  }

  absl::Status Launch(const KernelKey& key, CuStream stream,
                      const std::vector<void*>& buffers) override {
    KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const CachedKernel> k, Get(key));
    return k->kernel->Launch(stream, buffers);
  }

  std::vector<absl::Status> Prefetch(const std::vector<KernelKey>& keys) override {
    std::vector<Slot*> mine;
    std::vector<KernelRequest> requests;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      for (const KernelKey& key : keys) {
        Slot* slot = SlotFor(key);
        if (slot->fetching || slot->current != nullptr) continue;
        if (!slot->error.ok() && now < slot->retry_at) continue;
        slot->fetching = true;  // a repeated key in `keys` is asked once
        mine.push_back(slot);
        requests.push_back(Request(key, options_.policy));
      }
    }
    if (!mine.empty()) {
      absl::StatusOr<std::vector<absl::StatusOr<KernelArtifact>>> answers =
          client_->GetKernels(requests);
      for (size_t j = 0; j < mine.size(); ++j) {
        const KernelKey key{requests[j].template_id, requests[j].dtype, requests[j].shape,
                            requests[j].gpu};
        if (!answers.ok()) {
          Install(mine[j], ForKey(answers.status(), key));
        } else if (!(*answers)[j].ok()) {
          Install(mine[j], ForKey((*answers)[j].status(), key, absl::StrCat("requests[", j, "]")));
        } else {
          Install(mine[j], Load(*(*answers)[j], key, nullptr));
        }
      }
    }
    // What Get says now: waits for keys another thread is fetching, asks nothing anew.
    std::vector<absl::Status> statuses;
    for (const KernelKey& key : keys) statuses.push_back(Get(key).status());
    return statuses;
  }

  int RefreshNow() override {
    std::vector<std::pair<Slot*, std::shared_ptr<const CachedKernel>>> provisional;
    std::vector<KernelRequest> requests;
    {
      absl::ReaderMutexLock lock(&mu_);
      for (const auto& [key, slot] : slots_) {
        if (slot->current == nullptr || !slot->current->provisional()) continue;
        provisional.emplace_back(slot.get(), slot->current);
        requests.push_back(Request(key, Policy::kCacheOnly));
      }
    }
    if (requests.empty()) return 0;
    // Without ktuned the provisional kernels keep serving; the next period asks again.
    absl::StatusOr<std::vector<absl::StatusOr<KernelArtifact>>> answers =
        client_->GetKernels(requests);
    if (!answers.ok()) return 0;
    int replaced = 0;
    for (size_t j = 0; j < requests.size(); ++j) {
      const absl::StatusOr<KernelArtifact>& a = (*answers)[j];
      const auto& [slot, before] = provisional[j];
      if (!a.ok() || a->provenance != Provenance::kExact || a->stale) continue;
      const KernelKey key{requests[j].template_id, requests[j].dtype, requests[j].shape,
                          requests[j].gpu};
      absl::StatusOr<std::shared_ptr<const CachedKernel>> tuned =
          a->cubin_sha256 == before->cubin_sha256
              ? Settled(*before, *a)  // the tuned config is the one held: no reload
              : Load(*a, key, before->kernel->context());
      if (!tuned.ok()) continue;  // the provisional kernel keeps serving
      absl::MutexLock lock(&mu_);
      slot->current = *std::move(tuned);
      ++replaced;
    }
    return replaced;
  }

 private:
  Slot* SlotFor(const KernelKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::unique_ptr<Slot>& slot = slots_[key];
    if (slot == nullptr) slot = std::make_unique<Slot>();
    return slot.get();
  }

  KernelRequest Request(const KernelKey& key, Policy policy) const {
    KernelRequest r;
    r.template_id = key.template_id;
    r.dtype = key.dtype;
    r.shape = key.shape;
    r.gpu = key.gpu;
    r.policy = policy;
    r.deadline = options_.deadline;
    return r;
  }

  // The first ask of a key, or one after its error's retry_after; waits for another
  // thread's ask of the same key instead of asking twice.
  absl::StatusOr<std::shared_ptr<const CachedKernel>> GetSlow(const KernelKey& key) {
    Slot* slot = nullptr;
    {
      absl::MutexLock lock(&mu_);
      slot = SlotFor(key);
      mu_.Await(absl::Condition(&NotFetching, static_cast<const Slot*>(slot)));
      if (slot->current != nullptr) return slot->current;
      if (!slot->error.ok() && absl::Now() < slot->retry_at) return slot->error;
      slot->fetching = true;
    }
    absl::StatusOr<KernelArtifact> artifact = client_->GetKernel(Request(key, options_.policy));
    absl::StatusOr<std::shared_ptr<const CachedKernel>> kernel =
        artifact.ok() ? Load(*artifact, key, nullptr) : ForKey(artifact.status(), key);
    Install(slot, kernel);
    return kernel;
  }

  // Ends a fetch of `slot`: keeps the kernel, or the error until retry_after; wakes waiters.
  void Install(Slot* slot, const absl::StatusOr<std::shared_ptr<const CachedKernel>>& r) {
    absl::MutexLock lock(&mu_);
    slot->fetching = false;
    if (r.ok()) {
      slot->current = *r;
      slot->error = absl::OkStatus();
    } else {
      slot->error = r.status();
      slot->retry_at = absl::Now() + options_.retry_after;
    }
  }

  // Loads `artifact` into `context` (pushed for the call), or into the calling thread's
  // current context when null.
  absl::StatusOr<std::shared_ptr<const CachedKernel>> Load(const KernelArtifact& artifact,
                                                           const KernelKey& key,
                                                           CuContext context) const {
    const CudaApi* api = options_.api;
    if (api == nullptr) {
      absl::StatusOr<const CudaApi*> loaded = LoadCudaApi();
      if (!loaded.ok()) return ForKey(loaded.status(), key);
      api = *loaded;
    }
    if (context != nullptr) {
      KTUNE_RETURN_IF_ERROR(CheckCu(*api, api->CtxPushCurrent(context), "cuCtxPushCurrent"));
    }
    absl::StatusOr<std::unique_ptr<LoadedKernel>> kernel =
        LoadedKernel::Load(artifact, *api, options_.load);
    if (context != nullptr) {
      CuContext popped = nullptr;
      api->CtxPopCurrent(&popped);
    }
    if (!kernel.ok()) return ForKey(kernel.status(), key);
    auto cached = std::make_shared<CachedKernel>();
    cached->kernel = *std::move(kernel);
    cached->provenance = artifact.provenance;
    cached->stale = artifact.stale;
    cached->cubin_sha256 = artifact.cubin_sha256;
    cached->params = artifact.params;
    return std::shared_ptr<const CachedKernel>(std::move(cached));
  }

  // `held` marked as `tuned`'s (exact, fresh), its loaded kernel kept: same cubin.
  static std::shared_ptr<const CachedKernel> Settled(const CachedKernel& held,
                                                     const KernelArtifact& tuned) {
    auto settled = std::make_shared<CachedKernel>(held);
    settled->provenance = tuned.provenance;
    settled->stale = tuned.stale;
    settled->params = tuned.params;
    return settled;
  }

  void RefreshLoop() {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.refresh_period)) {
      mu_.Unlock();
      RefreshNow();
      mu_.Lock();
    }
  }

  const std::shared_ptr<KtuneClient> client_;
  const KernelCacheOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<KernelKey, std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread refresher_;  // last: started once the rest is built
};

}  // namespace

std::string KeyString(const KernelKey& key) {
  return absl::StrCat(key.template_id, " ", key.dtype, " ",
                      absl::StrJoin(key.shape, ",", absl::PairFormatter("=")), " gpu ", key.gpu);
}

std::unique_ptr<KernelCache> NewKernelCache(std::shared_ptr<KtuneClient> client,
                                            KernelCacheOptions options) {
  return std::make_unique<KernelCacheImpl>(std::move(client), std::move(options));
}

}  // namespace ktune::client
