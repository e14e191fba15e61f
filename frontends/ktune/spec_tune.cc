#include "frontends/ktune/spec_tune.h"

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
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "frontends/ktune/commands.h"
#include "frontends/ktune/tune_backend.h"
#include "server/store/store.h"
#include "server/tuning/spec_schedule.h"
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
  std::string strategy;        // kTuned here: the job's strategy; "" through a daemon
  std::string stop_reason;     // kTuned here: why its search stopped
  int64_t space_size = 0;      // kTuned here: the key's valid candidates
  TunePhases phases;           // kTuned here: where its wall time went

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

// A key tuned now: the job's own trial count (a daemon reports none: 0), resumed trials
// and wall time.
KeyResult FromTuned(const SpecKey& key, const TuneResult& tuned) {
  KeyResult r = FromEntry(key, tuned.entry, KeyState::kTuned);
  r.trials = static_cast<int64_t>(tuned.trials.size());
  r.resumed_trials = tuned.resumed_trials;
  r.seconds = tuned.seconds;
  r.strategy = tuned.strategy;
  r.stop_reason = tuned.stop_reason;
  r.space_size = tuned.space_size;
  r.phases = tuned.phases;
  return r;
}

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
        if (!r.strategy.empty()) {
          k["strategy"] = r.strategy;
          k["stop_reason"] = r.stop_reason;
          k["space_size"] = r.space_size;
        }
        if (std::vector<std::pair<std::string, double>> phases = PhaseList(r.phases);
            !phases.empty()) {
          nlohmann::json p = nlohmann::json::object();
          for (const auto& [name, seconds] : phases) p[name] = seconds;
          k["phases"] = std::move(p);
        }
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


// The spec's search block under the command line's: each field the spec sets and no flag
// gave.
TuneJobFlags WithSpecSearch(const TuneJobFlags& flags, const TuningSpec& spec) {
  TuneJobFlags out = flags;
  SearchSettings& s = out.search;
  const SearchSettings& from = spec.search;
  auto take = [&](const char* field) {
    return spec.search_fields.count(field) > 0 && flags.search_flags.count(field) == 0;
  };
  if (take("strategy")) s.strategy = from.strategy;
  if (take("budget")) s.budget = from.budget;
  if (take("time")) s.time_limit_s = from.time_limit_s;
  if (take("min_gain")) s.min_gain = from.min_gain;
  if (take("roofline_stop")) s.roofline_stop = from.roofline_stop;
  if (take("warm_start")) s.warm_start = from.warm_start;
  return out;
}

// One key: its fresh entry, else tuned. With `yield_to_lease`, a key another host is tuning
// sets *passed_over instead (the caller comes back to it).
KeyResult RunKey(TuneBackend& backend, const SpecKey& key, bool force, bool yield_to_lease,
                 const JobProgressFn& progress, bool* passed_over) {
  KeyResult result;
  result.key = key;
  std::optional<store::Entry> fresh;
  if (!force) {
    absl::StatusOr<std::optional<store::Entry>> found = backend.Fresh(key);
    if (!found.ok()) {
      result.error = std::string(found.status().message());
      return result;
    }
    fresh = *std::move(found);
  }
  if (fresh) return FromEntry(key, *fresh, KeyState::kCached);
  // A failing key is reported and the spec goes on with the next.
  absl::StatusOr<TuneResult> tuned =
      backend.Tune(key, progress, yield_to_lease);
  if (tuned.ok()) return FromTuned(key, *tuned);
  if (yield_to_lease && tuned.status().code() == absl::StatusCode::kAborted) {
    *passed_over = true;
    return result;
  }
  result.error = std::string(tuned.status().message());
  return result;
}

// Every key, fresh or tuned, results in spec order: over the backend's GPUs at once (--gpus),
// else one after the other.
std::vector<KeyResult> TuneKeys(TuneBackend& backend, const std::vector<SpecKey>& keys,
                                bool force, Display& display) {
  std::vector<KeyResult> results(keys.size());
  const int workers = std::min<int>(backend.Parallelism(), static_cast<int>(keys.size()));
  if (workers > 1) {
    // --gpus: a thread per GPU takes the next key the schedule gives it (a chain of one
    // entry's shapes per GPU, largest first); the display shows finished keys only (several
    // jobs' candidates at once would not read), in the order they finish.
    absl::Mutex mu;
    SpecSchedule schedule(keys);
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        while (true) {
          size_t i;
          {
            absl::MutexLock lock(&mu);
            const std::optional<size_t> next = schedule.Next(w);
            if (!next) return;
            i = *next;
            display.StartKey(keys[i]);
          }
          bool passed_over = false;  // no fleet tier in this process: never set
          KeyResult r = RunKey(backend, keys[i], force, /*yield_to_lease=*/false,
                               [](const JobProgress&) {}, &passed_over);
          absl::MutexLock lock(&mu);
          display.KeyDone(r);
          results[i] = std::move(r);
        }
      });
    }
    for (std::thread& t : threads) t.join();
  } else {
    // Through a daemon with a fleet tier, several hosts running one spec divide its keys: a
    // key another host is tuning now is passed over (its Tune ends ABORTED at once) and
    // taken up again after the others, when its winner is usually in the shared tier.
    std::vector<size_t> order(keys.size()), later;
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (bool first_pass : {true, false}) {
      for (size_t i : order) {
        const SpecKey& key = keys[i];
        display.StartKey(key);
        bool passed_over = false;
        KeyResult result = RunKey(backend, key, force, first_pass,
                                  [&](const JobProgress& p) { display.Job(p); }, &passed_over);
        if (passed_over) {
          later.push_back(i);
          continue;
        }
        display.KeyDone(result);
        results[i] = std::move(result);
      }
      order = std::move(later);
      later.clear();
    }
  }
  return results;
}

}  // namespace

int RunSpecTune(const SpecTuneArgs& given) {
  if (absl::Status s = CheckTuneJobFlags(given.job); !s.ok()) return Fail(s);
  if (absl::Status s = CheckDaemonFlags(given.daemon, given.job); !s.ok()) return Fail(s);
  // Every key is checked before anything is tuned; against the local templates also in
  // daemon mode (the shipped ones, or --templates), the daemon checking its own again.
  absl::StatusOr<TuningSpec> spec = LoadTuningSpec(given.file);
  if (!spec.ok()) return Fail(spec.status());
  SpecTuneArgs args = given;
  args.job = WithSpecSearch(given.job, *spec);
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
      LoadRegistryOrWarn(args.job.templates_dir);
  if (!registry.ok()) return Fail(registry.status());
  absl::StatusOr<std::vector<SpecKey>> keys = ExpandTuningSpec(*spec, **registry);
  if (keys.ok() && (!args.only.empty() || !args.skip.empty())) {
    keys = SelectSpecKeys(*std::move(keys), args.only, args.skip, "--only", "--skip");
  }
  if (!keys.ok()) return Fail(keys.status());

  absl::StatusOr<std::unique_ptr<TuneBackend>> opened =
      OpenTuneBackend(args.daemon, args.token, args.job, *std::move(registry));
  if (!opened.ok()) return FailOpen(args.daemon, opened.status());
  TuneBackend& backend = **opened;
  if (absl::Status s = backend.Prepare(); !s.ok()) return Fail(s);
  const std::string where = backend.where();

  if (!args.job.quiet) {
    std::fprintf(stderr, "ktune: spec %s: model %s, %zu keys, tuning %s\n", args.file.c_str(),
                 spec->model.c_str(), keys->size(),
                 args.daemon.empty()
                     ? (backend.Parallelism() > 1
                            ? absl::StrCat("on ", backend.Parallelism(), " GPUs of this host")
                            : std::string("on this host's GPU"))
                           .c_str()
                     : ("through " + args.daemon).c_str());
  }
  Display display(spec->model, static_cast<int64_t>(keys->size()), args.job.quiet);
  std::vector<KeyResult> results = TuneKeys(backend, *keys, args.force, display);
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
