#include "client/cli/spec_tune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/lib/ktune_client.h"
#include "server/base/status_macros.h"
#include "server/gpu/device_model.h"
#include "server/store/store.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/tuning_job.h"
#include "server/tuning/tuning_spec.h"

namespace ktune::cli {
namespace {

using Clock = std::chrono::steady_clock;

enum class KeyState { kTuned, kCached, kFailed };

const char* KeyStateName(KeyState s) {
  switch (s) {
    case KeyState::kTuned:
      return "tuned";
    case KeyState::kCached:
      return "cached";
    case KeyState::kFailed:
      return "failed";
  }
  return "?";
}

// One key's line of the summary, whichever backend produced it.
struct KeyResult {
  SpecKey key;
  KeyState state = KeyState::kFailed;
  std::string error;  // kFailed only
  int64_t entry_id = 0;
  std::map<std::string, int64_t> params;
  std::string knobs;
  double time_ns = 0;
  double gbps = 0;
  double ceiling_fraction = 0;
  double default_time_ns = 0;  // 0: not known
  int64_t trials = 0;          // kTuned: trials of the job, earlier runs' included
  int64_t resumed_trials = 0;  // kTuned: of those, from an interrupted run
  double seconds = 0;          // kTuned: this run's wall time for the key

  double speedup() const {
    return time_ns > 0 && default_time_ns > 0 ? default_time_ns / time_ns : 0;
  }
};

// How many keys ended in each state: the live display's, the table's and the JSON's counts.
struct Tally {
  int64_t tuned = 0;
  int64_t cached = 0;
  int64_t failed = 0;

  void Add(KeyState s) {
    switch (s) {
      case KeyState::kTuned:
        ++tuned;
        break;
      case KeyState::kCached:
        ++cached;
        break;
      case KeyState::kFailed:
        ++failed;
        break;
    }
  }
  int64_t total() const { return tuned + cached + failed; }
  static Tally Of(const std::vector<KeyResult>& results) {
    Tally t;
    for (const KeyResult& r : results) t.Add(r.state);
    return t;
  }
};

// A job's progress, as both backends report it.
struct JobProgress {
  int64_t done = 0;
  int64_t total = 0;
  double eta_s = 0;
  double best_time_ns = 0;  // 0: none passed yet
  std::string best_params;
};
using JobProgressFn = std::function<void(const JobProgress&)>;

// Where keys are looked up and tuned. Not thread-safe; one spec run drives one.
class Backend {
 public:
  virtual ~Backend() = default;
  // The key's entry when it exists and is fresh (same template source and NVRTC version);
  // nullopt when it must be tuned.
  virtual absl::StatusOr<std::optional<KeyResult>> Fresh(const SpecKey& key) = 0;
  virtual absl::StatusOr<KeyResult> Tune(const SpecKey& key, const JobProgressFn& progress) = 0;
};

KeyResult FromEntry(const SpecKey& key, const store::Entry& e, KeyState state) {
  KeyResult r;
  r.key = key;
  r.state = state;
  r.entry_id = e.id;
  r.params = e.config.params;
  const Knobs& k = e.config.knobs;
  r.knobs = KnobsText(k.target, k.maxrregcount, k.min_blocks, k.fast_math);
  r.time_ns = e.metrics.time_ns;
  r.gbps = e.metrics.gbps;
  r.ceiling_fraction = e.metrics.ceiling_fraction;
  r.default_time_ns = e.default_time_ns;
  r.trials = e.trials_total;
  return r;
}

// In this process: the store file, NVRTC and a ktune-worker child, as `ktune tune`.
class LocalBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<LocalBackend>> Open(const SpecTuneArgs& args,
                                                            const TemplateRegistry* registry) {
    auto b = std::unique_ptr<LocalBackend>(new LocalBackend(args, registry));
    KTUNE_ASSIGN_OR_RETURN(b->local_, OpenLocalTuning(args.job, *registry));
    // The device model names the keys; it needs the GPU even when every key is fresh.
    KTUNE_ASSIGN_OR_RETURN(v1::DeviceInfo info, b->local_.gpu->Info());
    b->model_ = DeviceModelKey(info);
    return b;
  }

  absl::StatusOr<std::optional<KeyResult>> Fresh(const SpecKey& key) override {
    KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const KernelTemplate> tmpl,
                           registry_->Get(key.template_name));
    const store::EntryKey entry_key{model_, key.template_name, std::string(DTypeName(key.dtype)),
                                    ShapeString(key.shape)};
    absl::StatusOr<store::Lookup> hit =
        local_.store->LookupEntry(entry_key, tmpl->source_hash(), local_.compiler->Version());
    // A damaged cubin (kDataLoss) is never served: tuning again replaces it.
    if (!hit.ok() && (hit.status().code() == absl::StatusCode::kNotFound ||
                      hit.status().code() == absl::StatusCode::kDataLoss)) {
      return std::nullopt;
    }
    if (!hit.ok()) return hit.status();
    if (hit->stale) return std::nullopt;
    return FromEntry(key, hit->entry, KeyState::kCached);
  }

  absl::StatusOr<KeyResult> Tune(const SpecKey& key, const JobProgressFn& progress) override {
    const TuneRequest request = JobRequest(args_.job, key.template_name, key.dtype, key.shape);
    const TuningEnv env = local_.Env(*registry_);
    KTUNE_ASSIGN_OR_RETURN(TuneResult result,
                           RunTuning(request, env, [&](const TuneProgress& p) {
                             JobProgress jp;
                             jp.done = p.done;
                             jp.total = p.total;
                             jp.eta_s = p.eta_s;
                             if (p.best != nullptr) {
                               jp.best_time_ns = p.best->metrics.time_ns;
                               jp.best_params = ParamsText(p.best->config.params);
                             }
                             progress(jp);
                             return true;
                           }));
    KeyResult r = FromEntry(key, result.entry, KeyState::kTuned);
    r.trials = static_cast<int64_t>(result.trials.size());
    r.resumed_trials = result.resumed_trials;
    r.seconds = result.seconds;
    return r;
  }

 private:
  LocalBackend(const SpecTuneArgs& args, const TemplateRegistry* registry)
      : args_(args), registry_(registry) {}

  const SpecTuneArgs& args_;
  const TemplateRegistry* registry_;
  LocalTuning local_;
  std::string model_;
};

KeyResult FromArtifact(const SpecKey& key, const client::KernelArtifact& a, KeyState state) {
  KeyResult r;
  r.key = key;
  r.state = state;
  r.entry_id = a.entry_id;
  r.params = a.params;
  r.knobs = KnobsText(a.knobs.target, a.knobs.maxrregcount, a.knobs.min_blocks,
                        a.knobs.fast_math);
  r.time_ns = a.metrics.time_ns;
  r.gbps = a.metrics.gbps;
  r.ceiling_fraction = a.metrics.ceiling_fraction;
  r.default_time_ns = a.metrics.default_time_ns;
  return r;
}

// Through a running ktuned: GetKernel CACHE_ONLY says what is fresh, Tune streams a job.
class DaemonBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonBackend>> Open(const SpecTuneArgs& args) {
    client::ClientOptions options;
    options.bearer_token = args.token;
    KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<client::KtuneClient> c,
                           client::Connect(args.daemon, options));
    // Fails fast, naming the target, when no daemon answers there.
    KTUNE_RETURN_IF_ERROR(c->ListTemplates().status());
    return std::unique_ptr<DaemonBackend>(new DaemonBackend(args, std::move(c)));
  }

  absl::StatusOr<std::optional<KeyResult>> Fresh(const SpecKey& key) override {
    client::KernelRequest request;
    request.template_id = key.template_name;
    request.dtype = std::string(DTypeName(key.dtype));
    request.shape = key.shape;
    request.policy = client::Policy::kCacheOnly;
    request.gpu = args_.job.ordinal;
    absl::StatusOr<client::KernelArtifact> a = client_->GetKernel(request);
    if (!a.ok() && a.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
    if (!a.ok()) return a.status();
    if (a->stale) return std::nullopt;
    return FromArtifact(key, *a, KeyState::kCached);
  }

  absl::StatusOr<KeyResult> Tune(const SpecKey& key, const JobProgressFn& progress) override {
    client::TuneRequest request;
    request.template_id = key.template_name;
    request.dtype = std::string(DTypeName(key.dtype));
    request.shape = key.shape;
    request.gpu = args_.job.ordinal;
    request.strategy = args_.job.strategy;
    request.budget = args_.job.budget;
    // Fresh() found no fresh entry (or --force): the daemon must not hand back a stale one.
    request.force = true;
    const Clock::time_point start = Clock::now();
    KTUNE_ASSIGN_OR_RETURN(client::KernelArtifact a,
                           client_->Tune(request, [&](const client::TuneProgress& p) {
                             JobProgress jp;
                             jp.done = p.done;
                             jp.total = p.total;
                             jp.eta_s = p.eta_s;
                             jp.best_time_ns = p.best_time_ns;
                             jp.best_params = ParamsText(p.best_params);
                             progress(jp);
                             return true;
                           }));
    KeyResult r = FromArtifact(key, a, KeyState::kTuned);
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
  }

 private:
  DaemonBackend(const SpecTuneArgs& args, std::unique_ptr<client::KtuneClient> c)
      : args_(args), client_(std::move(c)) {}

  const SpecTuneArgs& args_;
  std::unique_ptr<client::KtuneClient> client_;
};

std::string Duration(double s) {
  if (s < 60) return absl::StrFormat("%.0fs", s);
  if (s < 3600)
    return absl::StrFormat("%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return absl::StrFormat("%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
}

// The progress display on stderr: on a terminal, two lines rewritten in place (the spec's
// keys, then the running job's candidates); otherwise a plain line per finished key and
// one per tenth of a job, so a log stays readable.
class Display {
 public:
  Display(const std::string& model, int64_t total, bool quiet)
      : model_(model), total_(total), quiet_(quiet), tty_(!quiet && ::isatty(STDERR_FILENO)) {}

  void StartKey(const SpecKey& key) {
    key_ = SpecKeyString(key);
    job_ = "looking up";
    Draw();
  }

  void Job(const JobProgress& p) {
    const std::string best =
        p.best_time_ns > 0
            ? absl::StrFormat("best %.2f us (%s)", p.best_time_ns / 1000, p.best_params)
            : "no passing candidate yet";
    job_ = absl::StrFormat("candidates %d/%d  %s  ETA %s", p.done, p.total, best,
                           Duration(p.eta_s));
    if (tty_) {
      Draw();
    } else if (!quiet_ && p.total > 0 && p.done * 10 / p.total != (p.done - 1) * 10 / p.total) {
      std::fprintf(stderr, "  %s: %s\n", key_.c_str(), job_.c_str());
    }
  }

  void KeyDone(const KeyResult& r) {
    tally_.Add(r.state);
    if (r.state == KeyState::kTuned) tuned_seconds_ += r.seconds;
    if (quiet_) return;
    std::string what;
    switch (r.state) {
      case KeyState::kCached:
        what = absl::StrFormat("fresh in the store, %.2f us", r.time_ns / 1000);
        break;
      case KeyState::kTuned:
        what = absl::StrFormat("tuned in %s, %.2f us (%s)", Duration(r.seconds), r.time_ns / 1000,
                               ParamsText(r.params));
        break;
      case KeyState::kFailed:
        what = absl::StrCat("FAILED: ", r.error);
        break;
    }
    const std::string line =
        absl::StrFormat("[%d/%d] %s: %s", tally_.total(), total_, SpecKeyString(r.key), what);
    if (tty_) {
      // The finished key scrolls up above the two live lines.
      std::fprintf(stderr, "\r\033[K%s\n\033[K\n\033[K\033[2A", line.c_str());
      job_.clear();
      Draw();
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

  void Finish() {
    if (tty_) std::fprintf(stderr, "\r\033[K\n\033[K\033[1A");
    std::fflush(stderr);
  }

 private:
  void Draw() {
    if (!tty_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    // Remaining keys at this run's pace per tuned key (fresh keys cost nothing).
    const int64_t left = total_ - tally_.total();
    const std::string eta =
        tally_.tuned > 0 ? absl::StrCat(" ETA ", Duration(tuned_seconds_ / tally_.tuned * left))
                         : "";
    const std::string spec_line =
        absl::StrFormat("%s: keys %d/%d (%d failed) elapsed %s%s  now %s", model_, tally_.total(),
                        total_, tally_.failed, Duration(elapsed), eta, key_);
    std::fprintf(stderr, "\r\033[K%s\n\r\033[K  %s\033[1A\r", spec_line.c_str(), job_.c_str());
    std::fflush(stderr);
  }

  const std::string model_;
  const int64_t total_;
  const bool quiet_;
  const bool tty_;
  const Clock::time_point start_ = Clock::now();
  Tally tally_;  // of the keys finished so far
  double tuned_seconds_ = 0;
  std::string key_;
  std::string job_;
};

void PrintTable(const std::vector<KeyResult>& results) {
  // Key, winner and knobs are as wide as their longest value, so the table stays aligned
  // whatever the templates' param names.
  int key_w = 3, winner_w = 6, knobs_w = 5;
  for (const KeyResult& r : results) {
    key_w = std::max(key_w, static_cast<int>(SpecKeyString(r.key).size()));
    if (r.state == KeyState::kFailed) continue;
    winner_w = std::max(winner_w, static_cast<int>(ParamsText(r.params).size()));
    knobs_w = std::max(knobs_w, static_cast<int>(r.knobs.size()));
  }
  std::printf("%-*s %-7s %-*s %-*s %10s %8s %6s %10s %8s\n", key_w, "key", "status", winner_w,
              "winner", knobs_w, "knobs", "time_us", "GB/s", "ceil", "default_us", "speedup");
  for (const KeyResult& r : results) {
    const std::string key = SpecKeyString(r.key);
    if (r.state == KeyState::kFailed) {
      std::printf("%-*s %-7s %s\n", key_w, key.c_str(), "failed", r.error.c_str());
      continue;
    }
    const std::string def =
        r.default_time_ns > 0 ? absl::StrFormat("%.2f", r.default_time_ns / 1000) : "-";
    const std::string speedup = r.speedup() > 0 ? absl::StrFormat("%.2fx", r.speedup()) : "-";
    std::printf("%-*s %-7s %-*s %-*s %10.2f %8.0f %5.0f%% %10s %8s\n", key_w, key.c_str(),
                KeyStateName(r.state), winner_w, ParamsText(r.params).c_str(), knobs_w,
                r.knobs.c_str(), r.time_ns / 1000, r.gbps, 100 * r.ceiling_fraction, def.c_str(),
                speedup.c_str());
  }
}

nlohmann::json ToJson(const std::string& spec_path, const std::string& model,
                      const std::string& where, const std::vector<KeyResult>& results,
                      const Tally& tally) {
  nlohmann::json keys = nlohmann::json::array();
  for (const KeyResult& r : results) {
    nlohmann::json k;
    k["template"] = r.key.template_name;
    k["dtype"] = std::string(DTypeName(r.key.dtype));
    k["shape"] = r.key.shape;
    k["status"] = KeyStateName(r.state);
    if (r.state == KeyState::kFailed) {
      k["error"] = r.error;
    } else {
      k["entry_id"] = r.entry_id;
      k["params"] = r.params;
      k["knobs"] = r.knobs;
      k["time_ns"] = r.time_ns;
      k["gbps"] = r.gbps;
      k["ceiling_fraction"] = r.ceiling_fraction;
      // null when the default config's time is not known.
      k["default_time_ns"] = r.default_time_ns > 0 ? nlohmann::json(r.default_time_ns) : nullptr;
      k["speedup"] = r.speedup() > 0 ? nlohmann::json(r.speedup()) : nullptr;
      k["trials"] = r.trials;
      if (r.state == KeyState::kTuned) {
        k["resumed_trials"] = r.resumed_trials;
        k["seconds"] = r.seconds;
      }
    }
    keys.push_back(std::move(k));
  }
  nlohmann::json out;
  out["spec"] = spec_path;
  out["model"] = model;
  out["where"] = where;
  out["total"] = results.size();
  out["tuned"] = tally.tuned;
  out["cached"] = tally.cached;
  out["failed"] = tally.failed;
  out["keys"] = std::move(keys);
  return out;
}

}  // namespace

int RunSpecTune(const SpecTuneArgs& args) {
  if (absl::Status s = CheckTuneJobFlags(args.job); !s.ok()) return Fail(s);
  if (args.job.strategy != "exhaustive" && args.job.strategy != "random") {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--strategy: unknown strategy '", args.job.strategy, "'; expected exhaustive or random")));
  }
  if (!args.daemon.empty() && args.job.time_s > 0) {
    return Fail(absl::InvalidArgumentError(
        "--time: not supported with --daemon (ktuned's Tune takes no time limit); use --budget"));
  }
  if (!args.daemon.empty() && args.job.min_sample_us > 0) {
    return Fail(absl::InvalidArgumentError(
        "--min-sample-us: not supported with --daemon (ktuned times with its own settings)"));
  }
  // Every key is checked before anything is tuned; against the local templates also in
  // daemon mode (the shipped ones, or --templates), the daemon checking its own again.
  absl::StatusOr<TuningSpec> spec = LoadTuningSpec(args.file);
  if (!spec.ok()) return Fail(spec.status());
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
      LoadRegistryOrWarn(args.job.templates_dir);
  if (!registry.ok()) return Fail(registry.status());
  absl::StatusOr<std::vector<SpecKey>> keys = ExpandTuningSpec(*spec, **registry);
  if (!keys.ok()) return Fail(keys.status());

  std::unique_ptr<Backend> backend;
  std::string where;
  if (args.daemon.empty()) {
    absl::StatusOr<std::unique_ptr<LocalBackend>> local = LocalBackend::Open(args, registry->get());
    if (!local.ok()) return Fail(local.status());
    backend = *std::move(local);
    where = "local";
  } else {
    absl::StatusOr<std::unique_ptr<DaemonBackend>> daemon = DaemonBackend::Open(args);
    // An unreachable daemon is a failure to do the work, not bad input.
    if (!daemon.ok()) {
      std::fprintf(stderr, "ktune: %s\n", std::string(daemon.status().message()).c_str());
      return kExitFailure;
    }
    backend = *std::move(daemon);
    where = args.daemon;
  }

  if (!args.job.quiet) {
    std::fprintf(stderr, "ktune: spec %s: model %s, %zu keys, tuning %s\n", args.file.c_str(),
                 spec->model.c_str(), keys->size(),
                 args.daemon.empty() ? "on this host's GPU" : ("through " + args.daemon).c_str());
  }
  Display display(spec->model, static_cast<int64_t>(keys->size()), args.job.quiet);
  std::vector<KeyResult> results;
  for (size_t i = 0; i < keys->size(); ++i) {
    const SpecKey& key = (*keys)[i];
    display.StartKey(key);
    KeyResult result;
    result.key = key;
    std::optional<KeyResult> fresh;
    if (!args.force) {
      absl::StatusOr<std::optional<KeyResult>> found = backend->Fresh(key);
      if (!found.ok()) {
        result.error = std::string(found.status().message());
      } else {
        fresh = *std::move(found);
      }
    }
    if (fresh) {
      result = *std::move(fresh);
    } else if (result.error.empty()) {
      // A failing key is reported and the spec goes on with the next.
      absl::StatusOr<KeyResult> tuned =
          backend->Tune(key, [&](const JobProgress& p) { display.Job(p); });
      if (tuned.ok()) {
        result = *std::move(tuned);
      } else {
        result.error = std::string(tuned.status().message());
      }
    }
    display.KeyDone(result);
    results.push_back(std::move(result));
  }
  display.Finish();

  const Tally tally = Tally::Of(results);
  if (args.json) {
    std::printf("%s\n", ToJson(args.file, spec->model, where, results, tally).dump(2).c_str());
  } else {
    PrintTable(results);
    std::printf("\n%s: %zu keys: %lld tuned, %lld fresh in the store, %lld failed\n",
                spec->model.c_str(), results.size(), static_cast<long long>(tally.tuned),
                static_cast<long long>(tally.cached), static_cast<long long>(tally.failed));
  }
  std::fflush(stdout);
  return tally.failed > 0 ? kExitFailure : kExitOk;
}

}  // namespace ktune::cli
