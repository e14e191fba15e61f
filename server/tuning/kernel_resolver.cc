#include "server/tuning/kernel_resolver.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/base/echo.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/base/thread_pool.h"
#include "server/gpu/device_model.h"
#include "server/templates/search_space.h"
#include "server/tuning/gpu_problem.h"
#include "server/tuning/kernel_build.h"

namespace ktune {
namespace {

// Each neighbour tried reads a cubin from the store.
constexpr size_t kMaxNeighbours = 8;

struct GpuTarget {
  std::string model;
  TargetInfo target;
};

class KernelResolverImpl final : public KernelResolver {
 public:
  KernelResolverImpl(KernelResolverOptions options, std::vector<GpuTarget> gpus,
                     GpuTarget compile_only)
      : options_(std::move(options)),
        gpus_(std::move(gpus)),
        compile_only_(std::move(compile_only)),
        threads_(options_.threads) {}

  void Resolve(const KernelQuery& q, KernelPolicy policy, ResolveCallback done) override {
    absl::StatusOr<store::Lookup> hit = Lookup(q);
    if (hit.ok() && !hit->stale) {
      // Fresh: the answer whatever the policy.
      ResolvedKernel r = Exact(std::move(hit->entry), /*stale=*/false, 0);
      r.cacheable = true;
      return done(std::move(r));
    }
    // From here on the hit, if any, is stale.
    if (policy == KernelPolicy::kCacheOnly) {
      if (!hit.ok()) return done(hit.status());
      return done(Exact(std::move(hit->entry), /*stale=*/true, 0));
    }
    if (!hit.ok() && hit.status().code() != absl::StatusCode::kNotFound &&
        hit.status().code() != absl::StatusCode::kDataLoss) {
      return done(hit.status());  // the store failed: no point compiling or tuning
    }
    if (policy == KernelPolicy::kTune) return TuneAndAnswer(q, std::move(done));
    // FALLBACK: a stale entry answers now while its re-tune runs.
    if (hit.ok()) {
      const int64_t job_id = BackgroundTune(q);
      return done(Exact(std::move(hit->entry), /*stale=*/true, job_id));
    }
    QueueFallback(q, std::move(done));
  }

  void Stop() override {
    std::vector<ResolveCallback> dropped;
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.started) {
          ++it;
          continue;
        }
        for (ResolveCallback& d : it->second.waiters) dropped.push_back(std::move(d));
        pending_.erase(it++);
      }
    }
    for (ResolveCallback& d : dropped) d(ShuttingDown());
  }

  absl::StatusOr<store::Lookup> Lookup(const KernelQuery& q) override {
    const store::EntryKey key = KeyFor(q);
    if (key.device_model.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no entry for ", key.template_id, " ", key.dtype, " ", key.shape,
          ": this host has no usable GPU and the store names no single device model"));
    }
    absl::StatusOr<store::Lookup> hit =
        options_.store->LookupEntry(key, q.tmpl->source_hash(), options_.compiler->Version());
    const bool fresh = hit.ok() && !hit->stale;
    if (options_.fleet != nullptr && !fresh &&
        (hit.ok() || hit.status().code() == absl::StatusCode::kNotFound ||
         hit.status().code() == absl::StatusCode::kDataLoss)) {
      absl::StatusOr<store::Lookup> remote =
          options_.fleet->Fetch(key, q.tmpl->source_hash(), options_.compiler->Version());
      if (remote.ok()) return remote;
    }
    if (hit.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("no entry for ", key.template_id, " ", key.dtype,
                                              " ", key.shape, " on ", key.device_model));
    }
    return hit;
  }

  absl::StatusOr<std::shared_ptr<TuningJob>> Tune(const KernelQuery& q,
                                                  const SearchSettings& search,
                                                  bool yield_to_lease) override {
    if (gpus_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tuning needs a GPU and this daemon has none usable: ",
                       options_.compile_only_reason));
    }
    TuneRequest r;
    r.template_name = q.tmpl->name();
    r.dtype = q.dtype;
    r.shape = q.shape;
    r.search = search;
    r.yield_to_lease = yield_to_lease;
    return options_.queue->Submit(r, q.gpu);
  }

  absl::StatusOr<int64_t> ChangeCounter() override {
    return options_.store->EntriesChangeCounter();
  }

  const std::string& DeviceModel(int gpu) const override {
    return gpus_.empty() ? compile_only_.model : gpus_[gpu].model;
  }
  TargetInfo Target(int gpu) const override {
    return gpus_.empty() ? compile_only_.target : gpus_[gpu].target;
  }

 private:
  static ResolvedKernel Exact(store::Entry entry, bool stale, int64_t job_id) {
    ResolvedKernel r;
    r.entry = std::move(entry);
    r.stale = stale;
    r.provenance = KernelProvenance::kExact;
    r.tuning_job_id = job_id;
    return r;
  }

  store::EntryKey KeyFor(const KernelQuery& q) const {
    return {DeviceModel(q.gpu), q.tmpl->name(), std::string(DTypeName(q.dtype)),
            ShapeString(q.shape)};
  }

  // TUNE: the job's winner, when the job finishes.
  void TuneAndAnswer(const KernelQuery& q, ResolveCallback done) {
    absl::StatusOr<std::shared_ptr<TuningJob>> job = Tune(q, SearchSettings{}, false);
    if (!job.ok()) return done(job.status());
    const int64_t job_id = (*job)->id();
    (*job)->OnDone([done = std::move(done), job_id](const absl::StatusOr<TuneResult>& r) {
      if (!r.ok()) return done(r.status());
      done(Exact(r->entry, /*stale=*/false, job_id));
    });
  }

  // A FALLBACK's background tune; 0 when none was started (no GPU, a full queue).
  int64_t BackgroundTune(const KernelQuery& q) {
    if (gpus_.empty()) return 0;
    absl::StatusOr<std::shared_ptr<TuningJob>> job = Tune(q, SearchSettings{}, false);
    return job.ok() ? (*job)->id() : 0;
  }

  static absl::Status ShuttingDown() {
    return absl::UnavailableError("FALLBACK: ktuned is shutting down; the compile was dropped");
  }

  static std::string FallbackKey(const KernelQuery& q) {
    return absl::StrCat(q.tmpl->name(), "/", DTypeName(q.dtype), "/", ShapeString(q.shape),
                        "@", q.gpu);
  }

  // FALLBACK's search and compile on a resolver thread, merged with an identical one that
  // waits or runs, within the queue's bound.
  void QueueFallback(const KernelQuery& q, ResolveCallback done) {
    const std::string key = FallbackKey(q);
    absl::Status refused;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(key);
      if (stopped_) {
        refused = ShuttingDown();
      } else if (it != pending_.end()) {
        it->second.waiters.push_back(std::move(done));
        it->second.abandoned.push_back(q.abandoned);
        return;
      } else if (waiting_ >= options_.fallback_queue) {
        refused = absl::ResourceExhaustedError(absl::StrCat(
            "FALLBACK: ", waiting_, " default compiles are waiting already (the limit); retry "
            "later, or ask CACHE_ONLY"));
      } else {
        PendingFallback& p = pending_[key];
        p.waiters.push_back(std::move(done));
        p.abandoned.push_back(q.abandoned);
        ++waiting_;
      }
    }
    if (!refused.ok()) return done(refused);
    threads_.Run([this, q, key] { RunFallback(q, key); });
  }

  // One queued FALLBACK's turn: skipped when stopped or when every caller is gone.
  void RunFallback(const KernelQuery& q, const std::string& key) {
    std::vector<ResolveCallback> skipped;
    absl::Status why;
    {
      absl::MutexLock lock(&mu_);
      --waiting_;
      auto it = pending_.find(key);
      if (it == pending_.end()) return;  // Stop() answered them
      bool wanted = false;
      for (const std::function<bool()>& gone : it->second.abandoned) wanted |= !gone || !gone();
      if (!wanted) {
        why = absl::CancelledError("FALLBACK: every caller was gone before the compile began");
        skipped = std::move(it->second.waiters);
        pending_.erase(it);
      } else {
        it->second.started = true;
      }
    }
    if (!skipped.empty()) {
      for (ResolveCallback& d : skipped) d(why);
      return;
    }
    absl::StatusOr<ResolvedKernel> r = Fallback(q);
    if (r.ok()) r->tuning_job_id = BackgroundTune(q);
    std::vector<ResolveCallback> waiters;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(key);
      waiters = std::move(it->second.waiters);
      pending_.erase(it);
    }
    for (ResolveCallback& d : waiters) d(r);
  }

  // The nearest stored shape whose config binds for the request's shape and whose cubin
  // holds every kernel the request's launches name (same name expressions and options),
  // else the default config compiled now.
  absl::StatusOr<ResolvedKernel> Fallback(const KernelQuery& q) {
    const TargetInfo target = Target(q.gpu);
    if (!DeviceModel(q.gpu).empty()) {
      KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> near, Neighbours(q));
      for (const store::EntrySummary& summary : near) {
        absl::StatusOr<ResolvedKernel> r = Neighbour(q, summary, target);
        if (r.ok()) return r;
      }
    }
    return Default(q, target);
  }

  // The stored entries of the query's model, template and dtype, nearest shape first.
  absl::StatusOr<std::vector<store::EntrySummary>> Neighbours(const KernelQuery& q) {
    store::EntryFilter f;
    f.device_model = DeviceModel(q.gpu);
    f.template_id = q.tmpl->name();
    f.dtype = std::string(DTypeName(q.dtype));
    KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> entries,
                           options_.store->ListEntries(f));
    std::vector<std::pair<double, const store::EntrySummary*>> near;
    for (const store::EntrySummary& e : entries) {
      absl::StatusOr<Shape> shape = ParseShape(e.key.shape);
      if (!shape.ok()) continue;
      const double d = ShapeDistance(q.shape, *shape);
      if (std::isfinite(d)) near.emplace_back(d, &e);
    }
    std::sort(near.begin(), near.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    if (near.size() > kMaxNeighbours) near.resize(kMaxNeighbours);
    std::vector<store::EntrySummary> out;
    for (const auto& [distance, summary] : near) out.push_back(*summary);
    return out;
  }

  // The neighbour's cubin with its launches re-bound for the request's shape, when its
  // config binds there to the same binary.
  absl::StatusOr<ResolvedKernel> Neighbour(const KernelQuery& q,
                                           const store::EntrySummary& summary,
                                           const TargetInfo& target) {
    KTUNE_ASSIGN_OR_RETURN(store::Lookup hit, options_.store->GetEntry(summary.id));
    const store::Entry& e = hit.entry;
    KTUNE_ASSIGN_OR_RETURN(Shape their_shape, ParseShape(e.key.shape));
    KTUNE_ASSIGN_OR_RETURN(BindResult theirs,
                           Bind(q.tmpl, q.dtype, their_shape, e.config, target));
    KTUNE_ASSIGN_OR_RETURN(BindResult ours, Bind(q.tmpl, q.dtype, q.shape, e.config, target));
    if (!theirs.instance || !ours.instance) {
      return absl::FailedPreconditionError(
          absl::StrCat("entry ", e.id, " does not bind: ", ours.rejected_because));
    }
    if (theirs.instance->CompileOptions() != ours.instance->CompileOptions() ||
        theirs.instance->launches.size() != e.launches.size()) {
      return absl::FailedPreconditionError("another binary");
    }
    KTUNE_ASSIGN_OR_RETURN(std::vector<LaunchSpec> launches,
                           Rebind(*theirs.instance, *ours.instance, e.launches));
    ResolvedKernel r;
    r.entry = std::move(hit.entry);
    r.entry.launches = std::move(launches);
    r.stale = hit.stale;
    r.provenance = KernelProvenance::kNearest;
    r.bound = *std::move(ours.instance);
    return r;
  }

  // `ours`'s launches with the lowered names `theirs` got in the stored `launches` (and
  // programmatic only where the stored launch was too: LaunchSpecFor).
  static absl::StatusOr<std::vector<LaunchSpec>> Rebind(const Instance& theirs,
                                                        const Instance& ours,
                                                        const std::vector<LaunchSpec>& launches) {
    std::map<std::string, const LaunchSpec*> stored;
    for (size_t i = 0; i < launches.size(); ++i) {
      stored[theirs.launches[i].name_expression] = &launches[i];
    }
    std::vector<LaunchSpec> out;
    for (const BoundLaunch& l : ours.launches) {
      auto it = stored.find(l.name_expression);
      if (it == stored.end()) return absl::FailedPreconditionError("kernel not in the cubin");
      out.push_back(LaunchSpecFor(l, *it->second));
    }
    return out;
  }

  // The template's default config for the request's shape, compiled now.
  absl::StatusOr<ResolvedKernel> Default(const KernelQuery& q, const TargetInfo& target) {
    absl::StatusOr<Config> config = DefaultConfigFor(q.tmpl, q.dtype, q.shape, target);
    if (!config.ok() && config.status().code() != absl::StatusCode::kFailedPrecondition) {
      // Not the caller's: the manifest's arithmetic fails for a shape it lets through.
      return absl::InternalError(absl::StrCat("template ", q.tmpl->name(),
                                              ": its manifest cannot be evaluated for shape ",
                                              ShapeString(q.shape), ": ",
                                              config.status().message()));
    }
    if (!config.ok()) return config.status();
    KTUNE_ASSIGN_OR_RETURN(BuiltKernel built, BuildKernel(q.tmpl, q.dtype, q.shape, *config,
                                                          target, *options_.compiler));
    if (!built.rejected_because.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("template ", q.tmpl->name(), ": the default config does not fit shape ",
                       ShapeString(q.shape), ": ", built.rejected_because));
    }
    if (!built.compiled.ok) {
      return absl::InternalError(absl::StrCat("template ", q.tmpl->name(),
                                              ": the default config does not compile:\n",
                                              Clip(built.compiled.log)));
    }
    ResolvedKernel r;
    store::Entry& e = r.entry;
    e.key = KeyFor(q);
    e.source_hash = q.tmpl->source_hash();
    e.nvrtc_version = options_.compiler->Version();
    e.config = *config;
    e.cubin = std::move(built.compiled.cubin);
    e.cubin_sha256 = Sha256Hex(e.cubin);
    e.launches = std::move(built.launches);
    r.provenance = KernelProvenance::kDefault;
    return r;
  }

  // The callers of one FALLBACK compile, waiting or running.
  struct PendingFallback {
    std::vector<ResolveCallback> waiters;
    std::vector<std::function<bool()>> abandoned;  // each waiter's KernelQuery::abandoned
    bool started = false;
  };

  const KernelResolverOptions options_;
  const std::vector<GpuTarget> gpus_;
  const GpuTarget compile_only_;
  absl::Mutex mu_;
  std::map<std::string, PendingFallback> pending_ ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;  // queued compiles not started yet
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  ThreadPool threads_;  // last: joined first, while the rest is still there
};

// Without a GPU, lookups go to the one device model the store knows, if it knows one, and
// DEFAULT compiles for its architecture.
GpuTarget CompileOnlyTarget(store::Store& store, const TargetInfo& configured) {
  GpuTarget t{"", configured};
  absl::StatusOr<std::vector<store::Device>> devices = store.ListDevices();
  if (devices.ok() && devices->size() == 1) {
    const store::Device& d = devices->front();
    t.model = d.model_key;
    t.target = TargetForStoredDevice(d, configured);
  }
  return t;
}

}  // namespace

std::unique_ptr<KernelResolver> NewKernelResolver(KernelResolverOptions options) {
  std::vector<GpuTarget> gpus;
  for (const v1::DeviceInfo& info : options.devices) {
    gpus.push_back({DeviceModelKey(info), TargetForDevice(info)});
  }
  GpuTarget compile_only{"", options.compile_only_target};
  if (gpus.empty()) compile_only = CompileOnlyTarget(*options.store, options.compile_only_target);
  return std::make_unique<KernelResolverImpl>(std::move(options), std::move(gpus),
                                              std::move(compile_only));
}

}  // namespace ktune
