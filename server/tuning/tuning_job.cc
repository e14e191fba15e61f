#include "server/tuning/tuning_job.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/gpu/device_model.h"
#include "server/gpu/timing_plan.h"
#include "server/templates/instance.h"
#include "server/templates/search_space.h"
#include "absl/strings/str_format.h"
#include "server/tuning/candidate_features.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"
#include "server/tuning/kernel_build.h"
#include "server/tuning/search_strategy.h"
#include "server/tuning/warm_start.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

// Compiler logs of failed candidates can be long; the first part says why.
constexpr size_t kMaxLogBytes = 16 << 10;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs fn, adds its seconds to `*sum` (a TunePhases field) and returns what it returns.
template <typename Fn>
auto Timed(double* sum, Fn&& fn) {
  const Clock::time_point start = Clock::now();
  if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
    fn();
    *sum += SecondsSince(start);
  } else {
    auto result = fn();
    *sum += SecondsSince(start);
    return result;
  }
}

struct Pending {
  Config config;
  Instance instance;
  std::future<absl::StatusOr<CompileResult>> compiled;
};

// The newest interrupted job for this key, source and compiler, if any.
absl::StatusOr<std::optional<store::Job>> FindResumable(store::Store& store, const store::Job& like) {
  std::optional<store::Job> found;
  for (store::JobState state : {store::JobState::kRunning, store::JobState::kAbandoned}) {
    KTUNE_ASSIGN_OR_RETURN(std::vector<store::Job> jobs, store.ListJobs(state));
    for (const store::Job& j : jobs) {
      if (j.key == like.key && j.source_hash == like.source_hash &&
          j.nvrtc_version == like.nvrtc_version && j.strategy == like.strategy &&
          (!found || j.id > found->id)) {
        found = j;
      }
    }
  }
  return found;
}

// The device model's copy ceiling (GB/s): the best of the measurements of every process
// that tuned on it (each measures once: the Gpu keeps its answer), kept in the store. One
// measurement kept for good let a low reading (3890 GB/s once on an H200 that measures
// 4160-4210 every other time) set the denominator of every later ceiling fraction.
absl::StatusOr<double> EnsureCopyCeiling(store::Store& store, Gpu& gpu, const v1::DeviceInfo& info,
                                         const std::string& model) {
  absl::StatusOr<v1::Ceiling> ceiling = gpu.MeasureCeiling();
  if (!ceiling.ok()) {
    // E.g. too little free memory for the copy buffers: a stored figure still serves.
    absl::StatusOr<store::Device> device = store.GetDevice(model);
    if (device.ok() && device->copy_gbps > 0) return device->copy_gbps;
    if (!device.ok() && device.status().code() != absl::StatusCode::kNotFound) {
      return device.status();
    }
    return ceiling.status();
  }
  store::Device d;
  d.model_key = model;
  d.name = info.name();
  d.cc_major = info.cc_major();
  d.cc_minor = info.cc_minor();
  d.sm_count = info.sm_count();
  d.l2_bytes = info.l2_bytes();
  d.memory_bus_bits = info.memory_bus_bits();
  d.memory_clock_khz = info.memory_clock_khz();
  d.copy_gbps = ceiling->copy_gbps();
  d.uuid = info.uuid();
  d.driver_version = info.driver_version();
  return store.RaiseCopyCeiling(d);
}

// Resumes the newest interrupted job like `job` (filling its id and `earlier` with its
// trials) or creates it.
absl::Status OpenJob(store::Store& store, store::Job* job, std::vector<store::Trial>* earlier) {
  KTUNE_ASSIGN_OR_RETURN(std::optional<store::Job> resumable, FindResumable(store, *job));
  if (resumable) {
    job->id = resumable->id;
    KTUNE_ASSIGN_OR_RETURN(*earlier, store.ListTrials(job->id));
    return absl::OkStatus();
  }
  KTUNE_ASSIGN_OR_RETURN(job->id, store.CreateJob(*job));
  return absl::OkStatus();
}

int64_t DynamicSmem(const Instance& instance) {
  return instance.launches.empty() ? 0 : instance.launches[0].shared_bytes;
}

bool Faster(const store::Trial& a, const store::Trial& b) {
  return a.metrics.time_ns < b.metrics.time_ns;
}

// The default config's time in this job (the winner's own, re-measured, when the default
// won); 0 when it was not measured or did not pass.
double DefaultTime(const std::vector<store::Trial>& trials, const Config& default_config,
                   const store::Trial& winner) {
  if (winner.config == default_config) return winner.metrics.time_ns;
  for (const store::Trial& t : trials) {
    if (t.config == default_config && t.outcome == Outcome::kOk) return t.metrics.time_ns;
  }
  return 0;
}

}  // namespace

TrialMetrics DeriveMetrics(const CompileResult& compiled, int64_t dynamic_smem,
                           const v1::Measurement& m, int64_t bytes, int64_t flops,
                           double copy_gbps) {
  TrialMetrics t;
  for (const CompiledKernel& k : compiled.kernels) {
    t.registers = std::max(t.registers, k.resources.registers);
    t.spill_bytes += k.resources.spill_stores + k.resources.spill_loads;
    t.static_smem = std::max(t.static_smem, k.resources.static_smem);
  }
  // The driver's figures, when it gave them, are what actually ran.
  if (m.registers() > 0) t.registers = m.registers();
  if (m.static_smem() > 0) t.static_smem = m.static_smem();
  t.dynamic_smem = dynamic_smem;
  t.time_ns = m.time_ns();
  t.spread_ns = m.spread_ns();
  t.repeats = m.repeats();
  t.occupancy = m.occupancy();
  t.waves = m.waves();
  t.last_wave = m.last_wave();
  t.batch = m.batch();
  t.l2_flushed = m.l2_flushed();
  if (m.time_ns() > 0) {
    t.gbps = static_cast<double>(bytes) / m.time_ns();  // bytes per ns = GB/s
    t.gflops = static_cast<double>(flops) / m.time_ns();
    if (copy_gbps > 0) t.ceiling_fraction = t.gbps / copy_gbps;
  }
  return t;
}

namespace {

// Pointers to the ok trials of `trials` (a vector of store::Trial, const or not), fastest
// first, ties in their order: what the promotion and the final round both rank.
template <typename Trials>
auto OkFastestFirst(Trials& trials) {
  std::vector<decltype(&trials[0])> ranked;
  for (auto& t : trials) {
    if (t.outcome == Outcome::kOk) ranked.push_back(&t);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const store::Trial* a, const store::Trial* b) { return Faster(*a, *b); });
  return ranked;
}

// Timing in rounds (TuneRequest::timing_rounds): the screening timing caps samples and time;
// the leaders promoted from it are the fastest third, within these bounds.
constexpr int64_t kScreenMaxRepeats = 10;
constexpr int64_t kScreenMinRepeats = 3;
constexpr double kScreenTimeCapMs = 100;
constexpr size_t kPromotedFraction = 3;  // the fastest 1 / kPromotedFraction of the ok trials
constexpr size_t kMaxPromoted = 24;

// `full` with its samples and time capped for screening (a field left 0, the worker's
// default, gets the cap).
v1::TimingOptions ScreeningTiming(const v1::TimingOptions& full) {
  v1::TimingOptions t = full;
  const auto cap = [](double value, double limit) { return value > 0 ? std::min(value, limit) : limit; };
  t.set_max_repeats(static_cast<int32_t>(cap(full.max_repeats(), kScreenMaxRepeats)));
  t.set_min_repeats(static_cast<int32_t>(
      cap(full.min_repeats(), std::min<double>(kScreenMinRepeats, t.max_repeats()))));
  t.set_time_cap_ms(cap(full.time_cap_ms(), kScreenTimeCapMs));
  return t;
}

// A finalist's binary: compiled again (a cubin cache read when the compiler has one), so a
// resumed job's candidates from an earlier run are as good as this run's.
struct Finalist {
  store::Trial trial;
  BuiltKernel built;
  std::vector<v1::Measurement> runs;
};

// One run of a job, phase by phase: Prepare (template, device, space, strategy), OpenJob
// (the job's row, an earlier run's trials), SetProblem (the reference on the GPU), Search
// (compile and measure batches until the strategy, the time limit or the caller stops),
// FinalRound (re-measure the fastest few) and Commit (the winner and its entry).
class TuningRun {
 public:
  TuningRun(const TuneRequest& request, const TuningEnv& env, const ProgressCallback& on_progress)
      : request_(request), env_(env), on_progress_(on_progress), start_(Clock::now()) {}

  absl::StatusOr<TuneResult> Run() {
    KTUNE_RETURN_IF_ERROR(Timed(&phases_.prepare, [&] { return Prepare(); }));
    KTUNE_RETURN_IF_ERROR(Timed(&phases_.prepare, [&] { return OpenJob(); }));
    Timed(&phases_.prepare, [&] { QueueIdleCompiles(); });
    // The first batch compiles while the reference compiles and runs on the GPU: on a key
    // whose search is a few batches long, that set-up is a large part of the job.
    std::vector<Pending> first =
        Timed(&phases_.prepare, [&] { return Submit(strategy_->Next(BatchSize())); });
    KTUNE_RETURN_IF_ERROR(Timed(&phases_.reference, [&] { return SetProblem(); }));
    KTUNE_RETURN_IF_ERROR(Search(std::move(first)));
    KTUNE_ASSIGN_OR_RETURN(std::vector<store::Trial> trials, env_.store->ListTrials(job_.id));
    if (!best_) return Fail(NoCandidatePassed(trials));
    decision_timing_ = DecisionTiming(*best_);
    if (TimingRounds()) {
      KTUNE_RETURN_IF_ERROR(Timed(&phases_.promote, [&] { return Promote(trials); }));
    }
    KTUNE_ASSIGN_OR_RETURN(Finalist winner,
                           Timed(&phases_.final_round, [&] { return FinalRound(trials); }));
    return Commit(std::move(winner), std::move(trials));
  }

 private:
  // Marks the job failed (its trials stay) and returns `s`.
  absl::Status Fail(const absl::Status& s) {
    env_.store->UpdateJob(job_.id, store::JobState::kFailed, done_, job_.total,
                          std::string(s.message()))
        .IgnoreError();
    return s;
  }

  bool TimeUp() const {
    return request_.search.time_limit_s > 0 && SecondsSince(start_) >= request_.search.time_limit_s;
  }

  absl::Status Prepare() {
    KTUNE_ASSIGN_OR_RETURN(tmpl_, env_.registry->Get(request_.template_name));
    KTUNE_RETURN_IF_ERROR(ValidateRequest(*tmpl_, request_.dtype, request_.shape));
    KTUNE_RETURN_IF_ERROR(CheckSearchSettings(request_.search));
    KTUNE_ASSIGN_OR_RETURN(v1::DeviceInfo info, env_.gpu->Info());
    target_ = TargetForDevice(info);
    model_ = DeviceModelKey(info);
    KTUNE_ASSIGN_OR_RETURN(copy_gbps_, EnsureCopyCeiling(*env_.store, *env_.gpu, info, model_));
    KTUNE_RETURN_IF_ERROR(env_.store->PutTemplate(tmpl_->name(), tmpl_->source_hash()));
    KTUNE_ASSIGN_OR_RETURN(SearchSpace space, EnumerateSearchSpace(tmpl_, request_.dtype,
                                                                   request_.shape, target_));
    if (space.configs.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("template ", tmpl_->name(),
                                                        " has no valid candidate for ",
                                                        ShapeString(request_.shape)));
    }
    // The baseline of the speed-up; a shape no default fits has none (the strategy then
    // starts anywhere and the entry records no default time).
    absl::StatusOr<Config> default_config =
        DefaultConfigFor(tmpl_, request_.dtype, request_.shape, target_);
    default_config_ = default_config.ok() ? *default_config : DefaultConfig(*tmpl_, target_);
    KTUNE_ASSIGN_OR_RETURN(strategy_, NewStrategy(space.configs, StrategyOptionsFor(space)));
    space_ = std::move(space.configs);
    return absl::OkStatus();
  }

  // A strategy that measures part of the space compiles each batch when it asks for it;
  // the rest of the space compiles meanwhile on idle cores (TuningEnv::idle), so its later
  // batches and the template's next keys (the same programs: a candidate's source and
  // options do not depend on the shape) find their cubins in the cache. Exhaustive
  // compiles every candidate anyway. The queue replaces this GPU's previous job's.
  void QueueIdleCompiles() {
    if (env_.idle == nullptr || request_.search.strategy == "exhaustive") return;
    // What every item binds with, shared rather than copied into each of thousands.
    struct Key {
      std::shared_ptr<const KernelTemplate> tmpl;
      DType dtype;
      Shape shape;
      TargetInfo target;
      Compiler* compiler;
    };
    auto key = std::make_shared<const Key>(
        Key{tmpl_, request_.dtype, request_.shape, target_, env_.compiler});
    std::vector<std::function<void()>> work;
    work.reserve(space_.size());
    for (const Config& c : space_) {
      work.push_back([key, c] {
        absl::StatusOr<BindResult> bound = Bind(key->tmpl, key->dtype, key->shape, c, key->target);
        if (!bound.ok() || !bound->instance) return;
        // A failure here costs the job nothing: its own Compile of the candidate reports it.
        key->compiler->Warm(BuildCompileRequest(*bound->instance)).IgnoreError();
      });
    }
    env_.idle->Replace(env_.gpu, std::move(work));
  }

  bool Guided() const { return request_.search.strategy.empty() || request_.search.strategy == "guided"; }

  bool TimingRounds() const {
    return request_.timing_rounds && request_.search.strategy != "exhaustive";
  }

  // The timing of the runs that decide the winner (the leaders' and the finalists'): the
  // request's (at its decision_min_sample_us where set), with one batch for all of them
  // (TimingOptions.batch), the one the worker would choose for `fastest` by its time. Left
  // to itself the worker sizes each kernel's batch from its own warm-up, and near-equal
  // kernels batched 6 and 7 differ by the weight of their samples' L2-cold first run alone,
  // more than the 1-2 % between them.
  v1::TimingOptions DecisionTiming(const store::Trial& fastest) const {
    v1::TimingOptions t = request_.timing;
    if (request_.decision_min_sample_us > 0) {
      t.set_min_sample_us(request_.decision_min_sample_us);
    }
    if (t.batch() == 0) {
      t.set_batch(SampleBatch(ResolveTiming(t), fastest.metrics.time_ns / 1e6));
    }
    return t;
  }

  // Per config of `configs`, whether the compiler has its cubin already (an earlier key of
  // the template, or this one's idle compiles, made it); empty without a compiler.
  std::vector<bool> CompiledFlags(const std::vector<Config>& configs) const {
    std::vector<bool> out;
    if (env_.compiler == nullptr) return out;
    const CompileCacheKeyer keyer = TemplateKeyer(*tmpl_);
    const std::string identity = env_.compiler->Identity();
    out.reserve(configs.size());
    for (const Config& c : configs) {
      absl::StatusOr<BindResult> bound = Bind(tmpl_, request_.dtype, request_.shape, c, target_);
      out.push_back(bound.ok() && bound->instance &&
                    env_.compiler->Cached(keyer.Key(bound->instance->NameExpressions(),
                                                    bound->instance->CompileOptions(), identity)));
    }
    return out;
  }

  // The strategy's inputs; for guided, every candidate's features (bound for this shape),
  // which of them are compiled already, and the warm start from neighbouring keys in the
  // store.
  StrategyOptions StrategyOptionsFor(const SearchSpace& space) const {
    StrategyOptions o;
    o.name = Guided() ? "guided" : request_.search.strategy;
    o.budget = request_.search.budget;
    o.seed = request_.seed;
    o.default_config = default_config_;
    o.min_gain = request_.search.min_gain;
    if (!Guided()) return o;
    o.features = SpaceFeatures(tmpl_, request_.dtype, request_.shape, space.configs, target_);
    o.compiled = CompiledFlags(space.configs);
    if (request_.search.warm_start) {
      // A store that cannot be read here fails the job later, where it writes; the search
      // itself does not need the neighbours.
      absl::StatusOr<std::vector<Config>> warm = WarmStartConfigs(
          *env_.store, model_, tmpl_->name(), request_.dtype, request_.shape);
      if (warm.ok()) o.warm_start = *std::move(warm);
    }
    return o;
  }

  // The job's row, resumed or new, with the earlier run's trials reported to the strategy.
  absl::Status OpenJob() {
    job_.key = {model_, tmpl_->name(), std::string(DTypeName(request_.dtype)),
                ShapeString(request_.shape)};
    job_.source_hash = tmpl_->source_hash();
    job_.nvrtc_version = env_.compiler->Version();
    job_.strategy = strategy_->Name();
    job_.state = store::JobState::kRunning;
    job_.total = strategy_->Planned();
    job_.created_unix_ms = job_.updated_unix_ms = NowUnixMs();
    std::vector<store::Trial> earlier;
    KTUNE_RETURN_IF_ERROR(ktune::OpenJob(*env_.store, &job_, &earlier));
    for (const store::Trial& t : earlier) {
      strategy_->Report(t.config, t.outcome, t.metrics.time_ns);
      if (t.outcome == Outcome::kOk && (!best_ || Faster(t, *best_))) best_ = t;
    }
    done_ = done_before_ = static_cast<int64_t>(earlier.size());
    return env_.store->UpdateJob(job_.id, store::JobState::kRunning, done_, job_.total, "");
  }

  // The reference: compiled and run once; every candidate is checked against its outputs.
  absl::Status SetProblem() {
    KTUNE_ASSIGN_OR_RETURN(Instance reference,
                           BindReference(tmpl_, request_.dtype, request_.shape, target_));
    absl::StatusOr<CompileResult> compiled =
        env_.compiler->Compile(BuildCompileRequest(reference));
    if (!compiled.ok()) return Fail(compiled.status());
    if (!compiled->ok) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "template ", tmpl_->name(), ": the reference does not compile:\n", compiled->log)));
    }
    // The roofline bound: the problem's own bytes (a candidate's may add scratch traffic).
    bound_ns_ = RooflineBoundNs(reference.bytes, copy_gbps_);
    absl::StatusOr<v1::Problem> problem = BuildProblem(reference, *compiled, request_.seed);
    if (!problem.ok()) return Fail(problem.status());
    if (absl::StatusOr<v1::ProblemReady> ready = env_.gpu->SetProblem(*problem); !ready.ok()) {
      return Fail(ready.status());
    }
    return absl::OkStatus();
  }

  // Binds `configs` and hands them to the compile pool.
  std::vector<Pending> Submit(std::vector<Config> configs) {
    std::vector<Pending> out;
    for (Config& c : configs) {
      absl::StatusOr<BindResult> bound = Bind(tmpl_, request_.dtype, request_.shape, c, target_);
      // The space was enumerated with the same binding, so every config binds.
      if (!bound.ok() || !bound->instance) continue;
      Pending p{std::move(c), *std::move(bound->instance), {}};
      p.compiled = env_.pool->Submit(BuildCompileRequest(p.instance));
      out.push_back(std::move(p));
    }
    return out;
  }

  // Candidates per batch: enough to keep every compile thread busy while a batch is measured.
  size_t BatchSize() const {
    return request_.batch_size > 0 ? request_.batch_size : 2 * env_.pool->threads();
  }

  // Batches, from `current` (submitted already), until the strategy has no more, the time is
  // up or the caller cancels; the pool compiles the next batch while this one is measured.
  absl::Status Search(std::vector<Pending> current) {
    bool cancelled = false;
    while (!current.empty() && !cancelled && stop_reason_.empty()) {
      std::vector<Pending> next =
          Submit(Timed(&phases_.strategy, [&] { return strategy_->Next(BatchSize()); }));
      for (Pending& p : current) {
        if (cancelled || !stop_reason_.empty()) break;
        if (TimeUp()) {
          stop_reason_ = absl::StrCat("time limit of ", request_.search.time_limit_s, " s");
          break;
        }
        absl::StatusOr<bool> go_on = Try(p);
        if (!go_on.ok()) return Fail(go_on.status());
        cancelled = !*go_on;
      }
      current = std::move(next);
    }
    if (!cancelled) {
      if (stop_reason_.empty()) stop_reason_ = strategy_->StopReason();
      if (stop_reason_.empty()) stop_reason_ = "space exhausted";
      absl::Status recorded = env_.store->SetJobStopReason(job_.id, stop_reason_);
      return recorded.ok() ? recorded : Fail(recorded);
    }
    env_.store->UpdateJob(job_.id, store::JobState::kAbandoned, done_, job_.total, "cancelled")
        .IgnoreError();
    return absl::CancelledError(absl::StrCat("tuning cancelled after ", done_, " of ",
                                             job_.total, " candidates; run it again to resume"));
  }

  // Measures one compiled candidate, records its trial and reports progress. False when
  // the caller cancels.
  absl::StatusOr<bool> Try(Pending& p) {
    KTUNE_ASSIGN_OR_RETURN(CompileResult compiled,
                           Timed(&phases_.compile_wait, [&] { return p.compiled.get(); }));
    store::Trial trial;
    trial.job_id = job_.id;
    trial.config = p.config;
    trial.candidate_hash = compiled.key;
    trial.compile_ms = compiled.cache_hit ? 0 : compiled.compile_ms;
    std::optional<v1::Measurement> full_run;  // a run with the request's own timing
    if (!compiled.ok) {
      trial.outcome = Outcome::kCompileFailed;
      trial.log = compiled.log.substr(0, kMaxLogBytes);
    } else {
      KTUNE_ASSIGN_OR_RETURN(v1::KernelBinary binary, BuildKernelBinary(p.instance, compiled));
      const v1::TimingOptions timing =
          TimingRounds() ? ScreeningTiming(request_.timing) : request_.timing;
      KTUNE_ASSIGN_OR_RETURN(v1::Measurement m, Timed(&phases_.measure, [&] {
                               return env_.gpu->Measure(binary, timing);
                             }));
      std::optional<Outcome> outcome = ParseOutcome(m.outcome());
      trial.outcome = outcome.value_or(Outcome::kCrashed);
      trial.log = outcome ? m.detail()
                          : absl::StrCat("unknown outcome '", m.outcome(), "': ", m.detail());
      trial.metrics = DeriveMetrics(compiled, DynamicSmem(p.instance), m, p.instance.bytes,
                                    p.instance.flops, copy_gbps_);
      if (!TimingRounds()) full_run = std::move(m);
    }
    trial.created_unix_ms = NowUnixMs();
    KTUNE_ASSIGN_OR_RETURN(trial.id,
                           Timed(&phases_.store, [&] { return env_.store->AddTrial(trial); }));
    if (full_run && trial.outcome == Outcome::kOk) full_runs_[trial.id] = *std::move(full_run);
    Timed(&phases_.strategy,
          [&] { strategy_->Report(trial.config, trial.outcome, trial.metrics.time_ns); });
    if (trial.outcome == Outcome::kOk && (!best_ || Faster(trial, *best_))) best_ = trial;
    ++done_;
    CheckRoofline();
    Timed(&phases_.store, [&] {
      return env_.store->UpdateJob(job_.id, store::JobState::kRunning, done_, job_.total, "");
    }).IgnoreError();
    return on_progress_ ? on_progress_(Progress(trial)) : true;
  }

  // Ends the search when the best candidate runs at roofline_stop of the bound or better,
  // once the strategy allows (ReachesRoofline): no other candidate is then likely to beat
  // it by more than the timing noise.
  void CheckRoofline() {
    if (!best_ || !ReachesRoofline(*strategy_, done_, best_->metrics.time_ns, bound_ns_,
                                   request_.search.roofline_stop)) {
      return;
    }
    const store::Trial& t = *best_;
    const double fraction = bound_ns_ / t.metrics.time_ns;
    stop_reason_ = absl::StrFormat(
        "roofline: %s ran at %.1f %% of the bound (%.0f ns: the problem's bytes at the "
        "copy ceiling), at or above the %.0f %% stop",
        ConfigString(t.config), 100 * fraction, bound_ns_, 100 * request_.search.roofline_stop);
  }

  TuneProgress Progress(const store::Trial& last) const {
    TuneProgress progress;
    progress.done = done_;
    progress.total = job_.total;
    progress.elapsed_s = SecondsSince(start_);
    const int64_t this_run = done_ - done_before_;
    progress.eta_s = progress.elapsed_s / this_run * std::max<int64_t>(0, job_.total - done_);
    progress.last = &last;
    progress.best = best_ ? &*best_ : nullptr;
    return progress;
  }

  static absl::Status NoCandidatePassed(const std::vector<store::Trial>& trials) {
    std::map<std::string, int> outcomes;
    for (const store::Trial& t : trials) ++outcomes[std::string(OutcomeName(t.outcome))];
    return absl::FailedPreconditionError(absl::StrCat(
        "no candidate passed: ", absl::StrJoin(outcomes, ", ", absl::PairFormatter(" "))));
  }

  absl::StatusOr<Finalist> PrepareFinalist(const store::Trial& t) {
    KTUNE_ASSIGN_OR_RETURN(BuiltKernel built, BuildKernel(tmpl_, request_.dtype, request_.shape,
                                                          t.config, target_, *env_.compiler));
    if (!built.rejected_because.empty()) {
      return absl::InternalError(absl::StrCat(ConfigString(t.config), " no longer binds: ",
                                              built.rejected_because));
    }
    if (!built.compiled.ok) {
      return absl::InternalError(absl::StrCat(ConfigString(t.config), " no longer compiles"));
    }
    return Finalist{t, std::move(built), {}};
  }

  // Timing in rounds: the fastest ok trials by their screening times, a third of them (at
  // least 2 x finalists, at most kMaxPromoted), are timed again with the decision's timing,
  // and those times replace the screening ones in `trials` (the store keeps the screening
  // trials). A leader whose full run is not ok leaves the race with that outcome.
  absl::Status Promote(std::vector<store::Trial>& trials) {
    const std::vector<store::Trial*> ranked = OkFastestFirst(trials);
    const size_t wanted = std::max<size_t>(2 * std::max(request_.finalists, 1),
                                           (ranked.size() + kPromotedFraction - 1) / kPromotedFraction);
    const size_t count = std::min({ranked.size(), wanted, kMaxPromoted});
    for (size_t i = 0; i < count; ++i) {
      store::Trial& t = *ranked[i];
      absl::StatusOr<Finalist> f = PrepareFinalist(t);
      if (!f.ok()) return Fail(f.status());
      absl::StatusOr<v1::Measurement> m = env_.gpu->Retime(f->built.binary, decision_timing_);
      if (!m.ok()) return Fail(m.status());
      if (std::optional<Outcome> o = ParseOutcome(m->outcome()); o != Outcome::kOk) {
        t.outcome = o.value_or(Outcome::kCrashed);
        t.log = m->detail();
        continue;
      }
      const Instance& inst = f->built.instance;
      t.metrics = DeriveMetrics(f->built.compiled, DynamicSmem(inst), *m, inst.bytes, inst.flops,
                                copy_gbps_);
      full_runs_[t.id] = *std::move(m);
    }
    return absl::OkStatus();
  }

  // The fastest few ok trials, each with `final_rounds` full runs, the later ones
  // interleaved so that drift in clocks or temperature touches every finalist alike. A
  // finalist already timed in full in this run (promoted, or measured by exhaustive) with
  // the decision's batch counts that run as its first: it is the same binary on the same
  // problem with the same timing, and timing it once more only to throw that run away cost
  // a third of the round. The winner: the lowest median over the final round (a finalist
  // that failed a rerun is out); with no final round, the fastest trial. Its metrics are
  // those of its median run.
  absl::StatusOr<Finalist> FinalRound(const std::vector<store::Trial>& trials) {
    const std::vector<const store::Trial*> ranked = OkFastestFirst(trials);
    const size_t finalists = request_.final_rounds > 0
                                 ? std::min<size_t>(std::max(request_.finalists, 1), ranked.size())
                                 : 1;
    std::vector<Finalist> final;
    for (size_t i = 0; i < finalists; ++i) {
      absl::StatusOr<Finalist> f = PrepareFinalist(*ranked[i]);
      if (!f.ok()) return Fail(f.status());
      if (auto run = full_runs_.find(ranked[i]->id);
          run != full_runs_.end() && run->second.batch() == decision_timing_.batch()) {
        f->runs.push_back(run->second);
      }
      final.push_back(*std::move(f));
    }
    for (int round = 0; final.size() > 1 && round < request_.final_rounds; ++round) {
      for (Finalist& f : final) {
        if (round == 0 && !f.runs.empty()) continue;  // its earlier run is this round's
        absl::StatusOr<v1::Measurement> m = env_.gpu->Retime(f.built.binary, decision_timing_);
        if (!m.ok()) return Fail(m.status());
        if (m->outcome() == OutcomeName(Outcome::kOk)) f.runs.push_back(*std::move(m));
      }
    }
    return Choose(final);
  }

  Finalist Choose(std::vector<Finalist>& final) const {
    Finalist* chosen = &final.front();
    const v1::Measurement* chosen_run = nullptr;
    for (Finalist& f : final) {
      if (final.size() > 1 && f.runs.size() < static_cast<size_t>(request_.final_rounds)) continue;
      if (f.runs.empty()) continue;
      std::sort(f.runs.begin(), f.runs.end(),
                [](const v1::Measurement& a, const v1::Measurement& b) {
                  return a.time_ns() < b.time_ns();
                });
      const v1::Measurement& median = f.runs[f.runs.size() / 2];
      if (chosen_run == nullptr || median.time_ns() < chosen_run->time_ns()) {
        chosen = &f;
        chosen_run = &median;
      }
    }
    if (chosen_run != nullptr) {
      const Instance& i = chosen->built.instance;
      chosen->trial.metrics = DeriveMetrics(chosen->built.compiled, DynamicSmem(i), *chosen_run,
                                            i.bytes, i.flops, copy_gbps_);
    }
    return std::move(*chosen);
  }

  // Stores the winner as the key's entry (one transaction) and returns it with every trial.
  absl::StatusOr<TuneResult> Commit(Finalist winner, std::vector<store::Trial> trials) {
    const store::Trial& best = winner.trial;
    TuneResult result;
    store::Entry& e = result.entry;
    e.key = job_.key;
    e.source_hash = job_.source_hash;
    e.nvrtc_version = job_.nvrtc_version;
    e.config = best.config;
    e.cubin = winner.built.compiled.cubin;
    e.cubin_sha256 = Sha256Hex(e.cubin);
    e.launches = std::move(winner.built.launches);
    e.metrics = best.metrics;
    e.default_time_ns = DefaultTime(trials, default_config_, best);
    e.job_id = job_.id;
    e.trials_total = static_cast<int64_t>(trials.size());
    e.trials_ok = std::count_if(trials.begin(), trials.end(),
                                [](const store::Trial& t) { return t.outcome == Outcome::kOk; });
    e.tuning_seconds = SecondsSince(start_);
    e.created_unix_ms = NowUnixMs();
    absl::StatusOr<int64_t> entry_id =
        Timed(&phases_.commit, [&] { return env_.store->CommitWinner(e, {}); });
    if (!entry_id.ok()) return Fail(entry_id.status());
    result.seconds = SecondsSince(start_);
    result.phases = phases_;
    e.id = *entry_id;
    std::stable_sort(trials.begin(), trials.end(),
                     [](const store::Trial& a, const store::Trial& b) {
                       const bool aok = a.outcome == Outcome::kOk, bok = b.outcome == Outcome::kOk;
                       if (aok != bok) return aok;
                       return aok && Faster(a, b);
                     });
    result.trials = std::move(trials);
    result.resumed_trials = done_before_;
    result.strategy = job_.strategy;
    result.stop_reason = stop_reason_;
    result.space_size = static_cast<int64_t>(space_.size());
    return result;
  }

  const TuneRequest& request_;
  const TuningEnv& env_;
  const ProgressCallback& on_progress_;
  const Clock::time_point start_;
  std::shared_ptr<const KernelTemplate> tmpl_;
  TargetInfo target_;
  std::string model_;
  double copy_gbps_ = 0;
  double bound_ns_ = 0;  // the roofline bound of this key; 0: not known
  std::vector<Config> space_;  // every candidate, in the space's order
  std::string stop_reason_;
  Config default_config_;
  std::unique_ptr<SearchStrategy> strategy_;
  store::Job job_;
  int64_t done_ = 0;         // trials of this job so far, an earlier run's included
  int64_t done_before_ = 0;  // trials of an earlier run
  std::optional<store::Trial> best_;  // the fastest ok trial so far
  // Full timings (the request's `timing`, not a screening) of ok trials made in this run,
  // by trial id: the final round's first run of a finalist that has one.
  std::map<int64_t, v1::Measurement> full_runs_;
  v1::TimingOptions decision_timing_;  // DecisionTiming, once the search is over
  TunePhases phases_;
};

}  // namespace

std::vector<std::pair<std::string, double>> PhaseList(const TunePhases& p) {
  std::vector<std::pair<std::string, double>> out = {
      {"prepare", p.prepare},   {"reference", p.reference},     {"compile_wait", p.compile_wait},
      {"measure", p.measure},   {"store", p.store},             {"strategy", p.strategy},
      {"promote", p.promote},   {"final_round", p.final_round}, {"commit", p.commit}};
  for (const auto& [name, seconds] : out) {
    if (seconds > 0) return out;
  }
  return {};
}

absl::StatusOr<TuneResult> RunTuning(const TuneRequest& request, const TuningEnv& env,
                                     const ProgressCallback& on_progress) {
  return TuningRun(request, env, on_progress).Run();
}

}  // namespace ktune
