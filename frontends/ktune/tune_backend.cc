#include "frontends/ktune/tune_backend.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "frontends/ktune/commands.h"
#include "client/lib/ktune_client.h"
#include "absl/synchronization/mutex.h"
#include "server/base/status_macros.h"
#include "server/gpu/device_model.h"
#include "server/templates/shape.h"

namespace ktune::cli {
namespace {

// In this process: the engine and a ktune-worker child per GPU, as `ktune tune` without
// --daemon. With several GPUs (--gpus) Tune is called from a thread per GPU: each call takes
// a free GPU; a GPU whose worker is lost (kUnavailable) is retired and the key resumes, from
// its recorded trials, on another.
class LocalBackend : public TuneBackend {
 public:
  LocalBackend(const TuneJobFlags& job, LocalTuning local)
      : job_(job), local_(std::move(local)) {
    free_.push_back(local_.gpu.get());
    for (const std::unique_ptr<Gpu>& g : local_.more_gpus) free_.push_back(g.get());
    live_ = static_cast<int>(free_.size());
  }

  int Parallelism() const override { return 1 + static_cast<int>(local_.more_gpus.size()); }

  std::string where() const override { return "local"; }
  std::string stored_in() const override { return local_.engine->db_path; }

  absl::Status Prepare() override {
    // The device model names the keys; it needs the GPU even when every key is fresh.
    KTUNE_ASSIGN_OR_RETURN(v1::DeviceInfo info, local_.gpu->Info());
    model_ = DeviceModelKey(info);
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<store::Entry>> Fresh(const SpecKey& key) override {
    const Engine& e = *local_.engine;
    KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const KernelTemplate> tmpl,
                           e.registry->Get(key.template_name));
    const store::EntryKey entry_key{model_, key.template_name, std::string(DTypeName(key.dtype)),
                                    ShapeString(key.shape)};
    absl::StatusOr<store::Lookup> hit =
        e.store->LookupEntry(entry_key, tmpl->source_hash(), e.compiler->Version());
    // A damaged cubin (kDataLoss) is never served: tuning again replaces it.
    if (!hit.ok() && (hit.status().code() == absl::StatusCode::kNotFound ||
                      hit.status().code() == absl::StatusCode::kDataLoss)) {
      return std::nullopt;
    }
    if (!hit.ok()) return hit.status();
    if (hit->stale) return std::nullopt;
    return std::move(hit->entry);
  }

  absl::StatusOr<TuneResult> Tune(const SpecKey& key, const JobProgressFn& progress,
                                  bool /*yield_to_lease: no fleet tier here*/) override {
    while (true) {
      Gpu* gpu = TakeGpu();
      if (gpu == nullptr) return absl::UnavailableError("no GPU left: every worker was lost");
      absl::StatusOr<TuneResult> r = TuneOn(*gpu, key, progress);
      // A lost worker reads kUnavailable (no driver, a broken pipe) or kInternal ("died
      // during"); the job's trials are in the store, so the key resumes elsewhere.
      const bool lost = !r.ok() && (r.status().code() == absl::StatusCode::kUnavailable ||
                                    r.status().code() == absl::StatusCode::kInternal);
      if (!lost || Parallelism() == 1) {
        GiveBack(gpu);
        return r;
      }
      std::fprintf(stderr, "ktune: a GPU was lost tuning %s (%s); moving the key to another\n",
                   SpecKeyString(key).c_str(), std::string(r.status().message()).c_str());
      Retire();
    }
  }

 private:
  // Waits for a free GPU; null once none is left.
  Gpu* TakeGpu() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](LocalBackend* b) { return !b->free_.empty() || b->live_ == 0; }, this));
    if (free_.empty()) return nullptr;
    Gpu* g = free_.back();
    free_.pop_back();
    return g;
  }
  void GiveBack(Gpu* gpu) {
    absl::MutexLock lock(&mu_);
    free_.push_back(gpu);
  }
  void Retire() {
    absl::MutexLock lock(&mu_);
    --live_;
  }

  absl::StatusOr<TuneResult> TuneOn(Gpu& gpu, const SpecKey& key, const JobProgressFn& progress) {
    const TuneRequest request = JobRequest(job_, key.template_name, key.dtype, key.shape);
    return RunTuning(request, local_.engine->Env(&gpu), [&](const TuneProgress& p) {
      JobProgress jp;
      jp.done = p.done;
      jp.total = p.total;
      jp.elapsed_s = p.elapsed_s;
      jp.eta_s = p.eta_s;
      if (p.best != nullptr) {
        jp.has_best = true;
        jp.best_time_ns = p.best->metrics.time_ns;
        jp.best_params = ParamsText(p.best->config.params);
      }
      if (p.last != nullptr) jp.last_outcome = std::string(OutcomeName(p.last->outcome));
      progress(jp);
      return true;
    });
  }

  const TuneJobFlags job_;
  LocalTuning local_;
  std::string model_;
  absl::Mutex mu_;
  std::vector<Gpu*> free_ ABSL_GUARDED_BY(mu_);
  int live_ ABSL_GUARDED_BY(mu_) = 0;  // GPUs not retired
};

// The daemon's artifact as the entry it was read from (no cubin kept: nothing here loads
// it; no repeats: the artifact does not carry them).
store::Entry EntryFromArtifact(const client::KernelArtifact& a) {
  store::Entry e;
  e.id = a.entry_id;
  e.key = {a.device_model, a.template_id, a.dtype, ShapeString(a.shape)};
  e.source_hash = a.template_source_hash;
  e.nvrtc_version = a.nvrtc_version;
  e.config.params = a.params;
  e.config.knobs.target = a.knobs.target;
  e.config.knobs.maxrregcount = a.knobs.maxrregcount;
  e.config.knobs.min_blocks = a.knobs.min_blocks;
  e.config.knobs.fast_math = a.knobs.fast_math;
  for (const client::KernelLaunch& l : a.launches) {
    LaunchSpec s;
    s.lowered_name = l.lowered_name;
    for (size_t i = 0; i < 3 && i < l.grid.size(); ++i) s.grid[i] = l.grid[i];
    for (size_t i = 0; i < 3 && i < l.block.size(); ++i) s.block[i] = l.block[i];
    s.shared_bytes = l.shared_bytes;
    s.programmatic = l.programmatic;
    e.launches.push_back(std::move(s));
  }
  e.metrics.time_ns = a.metrics.time_ns;
  e.metrics.spread_ns = a.metrics.spread_ns;
  e.metrics.registers = a.metrics.registers;
  e.metrics.spill_bytes = a.metrics.spill_bytes;
  e.metrics.occupancy = a.metrics.occupancy;
  e.metrics.gbps = a.metrics.gbps;
  e.metrics.gflops = a.metrics.gflops;
  e.metrics.ceiling_fraction = a.metrics.ceiling_fraction;
  e.default_time_ns = a.metrics.default_time_ns;
  e.created_unix_ms = a.created_unix_ms;
  return e;
}

// Through a running ktuned: GetKernel CACHE_ONLY says what is fresh, Tune streams a job.
class DaemonBackend : public TuneBackend {
 public:
  DaemonBackend(std::string target, const TuneJobFlags& job,
                std::unique_ptr<client::KtuneClient> c)
      : target_(std::move(target)), job_(job), client_(std::move(c)) {}

  std::string where() const override { return target_; }
  std::string stored_in() const override { return "the ktuned at " + target_; }
  absl::Status Prepare() override { return absl::OkStatus(); }

  absl::StatusOr<std::optional<store::Entry>> Fresh(const SpecKey& key) override {
    client::KernelRequest request;
    request.template_id = key.template_name;
    request.dtype = std::string(DTypeName(key.dtype));
    request.shape = key.shape;
    request.policy = client::Policy::kCacheOnly;
    request.gpu = job_.ordinal;
    absl::StatusOr<client::KernelArtifact> a = client_->GetKernel(request);
    if (!a.ok() && a.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
    if (!a.ok()) return a.status();
    if (a->stale) return std::nullopt;
    return EntryFromArtifact(*a);
  }

  absl::StatusOr<TuneResult> Tune(const SpecKey& key, const JobProgressFn& progress,
                                  bool yield_to_lease) override {
    client::TuneRequest request;
    request.yield_to_lease = yield_to_lease;
    request.template_id = key.template_name;
    request.dtype = std::string(DTypeName(key.dtype));
    request.shape = key.shape;
    request.gpu = job_.ordinal;
    request.strategy = job_.search.strategy;
    request.budget = job_.search.budget;
    request.time_s = job_.search.time_limit_s;
    request.min_gain = job_.search.min_gain;
    request.roofline_stop = job_.search.roofline_stop;
    request.warm_start = job_.search.warm_start;
    // Fresh() found no fresh entry (or --force, or one key): the daemon must not hand back
    // a stale one.
    request.force = true;
    const auto start = std::chrono::steady_clock::now();
    KTUNE_ASSIGN_OR_RETURN(client::KernelArtifact a,
                           client_->Tune(request, [&](const client::TuneProgress& p) {
                             JobProgress jp;
                             jp.done = p.done;
                             jp.total = p.total;
                             jp.elapsed_s = p.elapsed_s;
                             jp.eta_s = p.eta_s;
                             jp.has_best = p.best_time_ns > 0;
                             jp.best_time_ns = p.best_time_ns;
                             jp.best_params = ParamsText(p.best_params);
                             jp.last_outcome = p.last_outcome;
                             progress(jp);
                             return true;
                           }));
    TuneResult r;
    r.entry = EntryFromArtifact(a);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }

 private:
  const std::string target_;
  const TuneJobFlags job_;
  std::unique_ptr<client::KtuneClient> client_;
};

}  // namespace

absl::Status CheckDaemonFlags(const std::string& daemon, const TuneJobFlags& job) {
  if (!daemon.empty() && !job.gpus.empty()) {
    return absl::InvalidArgumentError(
        "--gpus: not supported with --daemon (ktuned runs a queue per GPU of its own)");
  }
  if (!daemon.empty() && job.min_sample_us > 0) {
    return absl::InvalidArgumentError(
        "--min-sample-us: not supported with --daemon (ktuned times with its own settings)");
  }
  if (!daemon.empty() && job.decision_min_sample_us > 0) {
    return absl::InvalidArgumentError(
        "--decide-sample-us: not supported with --daemon (ktuned times with its own settings)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TuneBackend>> OpenTuneBackend(
    const std::string& daemon, const std::string& token, const TuneJobFlags& job,
    std::unique_ptr<TemplateRegistry> registry) {
  if (daemon.empty()) {
    KTUNE_ASSIGN_OR_RETURN(LocalTuning local, OpenLocalTuning(job, std::move(registry)));
    return std::make_unique<LocalBackend>(job, std::move(local));
  }
  client::ClientOptions options;
  options.bearer_token = token;
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<client::KtuneClient> c,
                         client::Connect(daemon, options));
  // Fails fast, naming the target, when no daemon answers there.
  KTUNE_RETURN_IF_ERROR(c->ListTemplates().status());
  return std::make_unique<DaemonBackend>(daemon, job, std::move(c));
}

int FailOpen(const std::string& daemon, const absl::Status& status) {
  if (daemon.empty()) return Fail(status);
  std::fprintf(stderr, "ktune: %s\n", std::string(status.message()).c_str());
  return kExitFailure;
}

}  // namespace ktune::cli
