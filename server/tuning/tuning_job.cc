#include "server/tuning/tuning_job.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/gpu/device_model.h"
#include "server/templates/instance.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"
#include "server/tuning/search_strategy.h"

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

absl::StatusOr<TuneResult> RunTuning(const TuneRequest& request, const TuningEnv& env,
                                     const ProgressCallback& on_progress) {
  const Clock::time_point start = Clock::now();
  KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const KernelTemplate> tmpl,
                         env.registry->Get(request.template_name));
  KTUNE_RETURN_IF_ERROR(ValidateRequest(*tmpl, request.dtype, request.shape));
  if (request.budget < 0) return absl::InvalidArgumentError("budget: must be >= 0");
  if (request.time_limit_s < 0) return absl::InvalidArgumentError("time limit: must be >= 0");

  KTUNE_ASSIGN_OR_RETURN(v1::DeviceInfo info, env.gpu->Info());
  const TargetInfo target = TargetForDevice(info);
  const std::string model = DeviceModelKey(info);

  KTUNE_ASSIGN_OR_RETURN(const double copy_gbps, EnsureCopyCeiling(*env.store, *env.gpu, info, model));
  KTUNE_RETURN_IF_ERROR(env.store->PutTemplate(tmpl->name(), tmpl->source_hash()));

  KTUNE_ASSIGN_OR_RETURN(SearchSpace space,
                         EnumerateSearchSpace(tmpl, request.dtype, request.shape, target));
  if (space.configs.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "template ", tmpl->name(), " has no valid candidate for ", ShapeString(request.shape)));
  }
  const Config default_config = DefaultConfig(*tmpl, target);
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<SearchStrategy> strategy,
                         NewStrategy(request.strategy, space.configs, request.budget,
                                     request.seed, default_config));

  store::Job job;
  job.key = {model, tmpl->name(), std::string(DTypeName(request.dtype)),
             ShapeString(request.shape)};
  job.source_hash = tmpl->source_hash();
  job.nvrtc_version = env.compiler->Version();
  job.strategy = strategy->Name();
  job.state = store::JobState::kRunning;
  job.total = strategy->Planned();
  job.created_unix_ms = job.updated_unix_ms = NowUnixMs();
  std::vector<store::Trial> earlier;
  KTUNE_RETURN_IF_ERROR(OpenJob(*env.store, &job, &earlier));
  for (const store::Trial& t : earlier) strategy->Report(t.config, t.outcome, t.metrics.time_ns);
  int64_t done = static_cast<int64_t>(earlier.size());
  auto fail_job = [&](const absl::Status& s) {
    env.store->UpdateJob(job.id, store::JobState::kFailed, done, job.total, std::string(s.message()))
        .IgnoreError();
    return s;
  };
  KTUNE_RETURN_IF_ERROR(env.store->UpdateJob(job.id, store::JobState::kRunning, done, job.total, ""));

  // The reference: compiled and run once; every candidate is checked against its outputs.
  KTUNE_ASSIGN_OR_RETURN(Instance reference,
                         BindReference(tmpl, request.dtype, request.shape, target));
  absl::StatusOr<CompileResult> ref_compiled = env.compiler->Compile(BuildCompileRequest(reference));
  if (!ref_compiled.ok()) return fail_job(ref_compiled.status());
  if (!ref_compiled->ok) {
    return fail_job(absl::FailedPreconditionError(absl::StrCat(
        "template ", tmpl->name(), ": the reference does not compile:\n", ref_compiled->log)));
  }
  absl::StatusOr<v1::Problem> problem = BuildProblem(reference, *ref_compiled, request.seed);
  if (!problem.ok()) return fail_job(problem.status());
  if (absl::StatusOr<v1::ProblemReady> ready = env.gpu->SetProblem(*problem); !ready.ok()) {
    return fail_job(ready.status());
  }

  const size_t batch = request.batch_size > 0 ? request.batch_size : 2 * env.pool->threads();
  auto submit = [&](std::vector<Config> configs) {
    std::vector<Pending> out;
    for (Config& c : configs) {
      absl::StatusOr<BindResult> bound = Bind(tmpl, request.dtype, request.shape, c, target);
      // The space was enumerated with the same binding, so every config binds.
      if (!bound.ok() || !bound->instance) continue;
      Pending p{std::move(c), *std::move(bound->instance), {}};
      p.compiled = env.pool->Submit(BuildCompileRequest(p.instance));
      out.push_back(std::move(p));
    }
    return out;
  };

  std::optional<store::Trial> best;
  for (const store::Trial& t : earlier) {
    if (t.outcome == Outcome::kOk && (!best || Faster(t, *best))) best = t;
  }
  const int64_t done_before = done;
  bool cancelled = false;
  auto time_up = [&] {
    return request.time_limit_s > 0 && SecondsSince(start) >= request.time_limit_s;
  };
  std::vector<Pending> current = submit(strategy->Next(batch));
  while (!current.empty() && !cancelled && !time_up()) {
    // Compile the next batch while this one is measured.
    std::vector<Pending> next = submit(strategy->Next(batch));
    for (Pending& p : current) {
      if (cancelled || time_up()) break;
      absl::StatusOr<CompileResult> compiled = p.compiled.get();
      if (!compiled.ok()) return fail_job(compiled.status());
      store::Trial trial;
      trial.job_id = job.id;
      trial.config = p.config;
      trial.candidate_hash = compiled->key;
      trial.compile_ms = compiled->cache_hit ? 0 : compiled->compile_ms;
      if (!compiled->ok) {
        trial.outcome = Outcome::kCompileFailed;
        trial.log = compiled->log.substr(0, kMaxLogBytes);
      } else {
        absl::StatusOr<v1::KernelBinary> binary = BuildKernelBinary(p.instance, *compiled);
        if (!binary.ok()) return fail_job(binary.status());
        absl::StatusOr<v1::Measurement> m = env.gpu->Measure(*binary, request.timing);
        if (!m.ok()) return fail_job(m.status());
        std::optional<Outcome> outcome = ParseOutcome(m->outcome());
        trial.outcome = outcome.value_or(Outcome::kCrashed);
        trial.log = outcome ? m->detail() : absl::StrCat("unknown outcome '", m->outcome(), "': ", m->detail());
        const int64_t dyn = p.instance.launches.empty() ? 0 : p.instance.launches[0].shared_bytes;
        trial.metrics = DeriveMetrics(*compiled, dyn, *m, p.instance.bytes, p.instance.flops, copy_gbps);
      }
      trial.created_unix_ms = NowUnixMs();
      absl::StatusOr<int64_t> id = env.store->AddTrial(trial);
      if (!id.ok()) return fail_job(id.status());
      trial.id = *id;
      strategy->Report(trial.config, trial.outcome, trial.metrics.time_ns);
      if (trial.outcome == Outcome::kOk && (!best || Faster(trial, *best))) best = trial;
      ++done;
      env.store->UpdateJob(job.id, store::JobState::kRunning, done, job.total, "").IgnoreError();
      if (on_progress) {
        TuneProgress progress;
        progress.done = done;
        progress.total = job.total;
        progress.elapsed_s = SecondsSince(start);
        const int64_t this_run = done - done_before;
        progress.eta_s = progress.elapsed_s / this_run * std::max<int64_t>(0, job.total - done);
        progress.last = &trial;
        progress.best = best ? &*best : nullptr;
        cancelled = !on_progress(progress);
      }
    }
    current = std::move(next);
  }
  if (cancelled) {
    env.store->UpdateJob(job.id, store::JobState::kAbandoned, done, job.total, "cancelled")
        .IgnoreError();
    return absl::CancelledError(absl::StrCat("tuning cancelled after ", done, " of ", job.total,
                                             " candidates; run it again to resume"));
  }

  KTUNE_ASSIGN_OR_RETURN(std::vector<store::Trial> trials, env.store->ListTrials(job.id));
  if (!best) {
    std::map<std::string, int> outcomes;
    for (const store::Trial& t : trials) ++outcomes[std::string(OutcomeName(t.outcome))];
    return fail_job(absl::FailedPreconditionError(absl::StrCat(
        "no candidate passed: ", absl::StrJoin(outcomes, ", ", absl::PairFormatter(" ")))));
  }

  // A finalist's binary: compiled again (a cubin cache read when the compiler has one), so
  // a resumed job's candidates from an earlier run are as good as this run's.
  struct Finalist {
    store::Trial trial;
    Instance instance;
    CompileResult compiled;
    v1::KernelBinary binary;
    std::vector<v1::Measurement> runs;
  };
  auto prepare = [&](const store::Trial& t) -> absl::StatusOr<Finalist> {
    KTUNE_ASSIGN_OR_RETURN(BindResult bound,
                           Bind(tmpl, request.dtype, request.shape, t.config, target));
    if (!bound.instance) {
      return absl::InternalError(absl::StrCat(ConfigString(t.config), " no longer binds: ",
                                              bound.rejected_because));
    }
    KTUNE_ASSIGN_OR_RETURN(CompileResult compiled,
                           env.compiler->Compile(BuildCompileRequest(*bound.instance)));
    if (!compiled.ok) {
      return absl::InternalError(absl::StrCat(ConfigString(t.config), " no longer compiles"));
    }
    KTUNE_ASSIGN_OR_RETURN(v1::KernelBinary binary, BuildKernelBinary(*bound.instance, compiled));
    return Finalist{t, *std::move(bound.instance), std::move(compiled), std::move(binary), {}};
  };
  std::vector<const store::Trial*> ranked;
  for (const store::Trial& t : trials) {
    if (t.outcome == Outcome::kOk) ranked.push_back(&t);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const store::Trial* a, const store::Trial* b) { return Faster(*a, *b); });
  const size_t finalists =
      request.final_rounds > 0 ? std::min<size_t>(std::max(request.finalists, 1), ranked.size()) : 1;
  std::vector<Finalist> final;
  for (size_t i = 0; i < finalists; ++i) {
    absl::StatusOr<Finalist> f = prepare(*ranked[i]);
    if (!f.ok()) return fail_job(f.status());
    final.push_back(*std::move(f));
  }
  if (final.size() > 1) {
    // Interleaved, so drift in clocks or temperature touches every finalist alike.
    for (int round = 0; round < request.final_rounds; ++round) {
      for (Finalist& f : final) {
        absl::StatusOr<v1::Measurement> m = env.gpu->Measure(f.binary, request.timing);
        if (!m.ok()) return fail_job(m.status());
        if (m->outcome() == OutcomeName(Outcome::kOk)) f.runs.push_back(*std::move(m));
      }
    }
  }
  // The winner: the lowest median over the final round (a finalist that failed a rerun is
  // out); with no final round, the fastest trial. Its metrics are those of its median run.
  Finalist* chosen = &final.front();
  const v1::Measurement* chosen_run = nullptr;
  double chosen_ns = 0;
  for (Finalist& f : final) {
    if (final.size() > 1 && f.runs.size() < static_cast<size_t>(request.final_rounds)) continue;
    if (f.runs.empty()) continue;
    std::sort(f.runs.begin(), f.runs.end(), [](const v1::Measurement& a, const v1::Measurement& b) {
      return a.time_ns() < b.time_ns();
    });
    const v1::Measurement& median = f.runs[f.runs.size() / 2];
    if (chosen_run == nullptr || median.time_ns() < chosen_ns) {
      chosen = &f;
      chosen_run = &median;
      chosen_ns = median.time_ns();
    }
  }
  best = chosen->trial;
  if (chosen_run != nullptr) {
    const int64_t dyn =
        chosen->instance.launches.empty() ? 0 : chosen->instance.launches[0].shared_bytes;
    best->metrics = DeriveMetrics(chosen->compiled, dyn, *chosen_run, chosen->instance.bytes,
                                  chosen->instance.flops, copy_gbps);
  }
  const CompileResult* winner = &chosen->compiled;
  const v1::KernelBinary* binary = &chosen->binary;
  const Instance* winner_instance = &chosen->instance;

  TuneResult result;
  store::Entry& e = result.entry;
  e.key = job.key;
  e.source_hash = job.source_hash;
  e.nvrtc_version = job.nvrtc_version;
  e.config = best->config;
  e.cubin = winner->cubin;
  e.cubin_sha256 = Sha256Hex(e.cubin);
  e.launches = LaunchSpecs(*winner_instance, *binary);
  e.metrics = best->metrics;
  e.default_time_ns = DefaultTime(trials, default_config, *best);
  e.job_id = job.id;
  e.trials_total = static_cast<int64_t>(trials.size());
  e.trials_ok = std::count_if(trials.begin(), trials.end(),
                              [](const store::Trial& t) { return t.outcome == Outcome::kOk; });
  result.seconds = SecondsSince(start);
  e.tuning_seconds = result.seconds;
  e.created_unix_ms = NowUnixMs();
  absl::StatusOr<int64_t> entry_id = env.store->CommitWinner(e, {});
  if (!entry_id.ok()) return fail_job(entry_id.status());
  e.id = *entry_id;

  std::stable_sort(trials.begin(), trials.end(), [](const store::Trial& a, const store::Trial& b) {
    const bool aok = a.outcome == Outcome::kOk, bok = b.outcome == Outcome::kOk;
    if (aok != bok) return aok;
    return aok && Faster(a, b);
  });
  result.trials = std::move(trials);
  result.resumed_trials = done_before;
  return result;
}

}  // namespace ktune
