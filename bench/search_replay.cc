// Replays a search strategy without a GPU over a store that holds every candidate's
// measured time (an exhaustive tune): each key's space is enumerated again from today's
// templates, the strategy is built as a tuning job builds it (default config first, the
// candidates' features, warm starts from the keys replayed before it, in the store's job
// order), and every candidate it asks for is answered with its recorded time, optionally
// scattered by a relative noise; the winner is chosen as timing rounds choose it (the
// leaders timed again, less noisily). Per key and in sum: how much of the space it
// measured, and how far its winner is from the best recorded time. What this isolates is
// the strategy: the GPU's own run-to-run spread, which the real comparison
// (search_retime) also meets, is what --noise stands in for. The roofline stop is a tuning
// job's: the search ends once the strategy allows (SearchStrategy::EarliestStop) and the best
// time seen is at --roofline-stop of the problem's bytes over the stored copy ceiling.
// The replay keeps the cubin cache a run would have (a candidate's program does not depend
// on the shape: an earlier key of the template compiled it), tells guided which candidates
// it holds, as a tuning job does, and counts the compiles each key needed against those of
// an exhaustive run of the same keys: the cost ratio per key prices a compile at 1 and a
// measurement at --measure-cost.
//
//   search_replay --db EXHAUSTIVE.db [--templates DIR] [--strategy guided] [--budget 0]
//                 [--noise 0] [--seed 1] [--within 0.02] [--no-warm-start]
//                 [--no-prefer-compiled] [--measure-cost 0.05]
//                 [--min-gain 0.01] [--batch 32] [--roofline-stop 1.0]
//
// A recorded config is matched to today's by its knobs and the params it has (a param the
// template gained since, pinned to one value per shape, is ignored). A candidate with no
// recorded time is answered as a compile failure and counted.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/store/store.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/templates/shape.h"
#include "server/tuning/candidate_features.h"
#include "server/tuning/gpu_problem.h"
#include "server/tuning/search_strategy.h"
#include "server/tuning/warm_start.h"

namespace ktune {
namespace {

struct Args {
  std::string db, templates_dir = "kernel_templates", strategy = "guided";
  int64_t budget = 0;
  double noise = 0, within = 0.02, min_gain = 0.01, roofline_stop = 1.0;
  size_t batch = 32;
  uint64_t seed = 1;
  bool no_warm_start = false;
  bool no_prefer_compiled = false;
  double measure_cost = 0.05;
};

// The cubins a run has compiled so far: a candidate's program does not depend on the
// shape, so a template's later keys find the earlier keys' candidates in the cache. Keyed
// by template, dtype and config.
using CompiledSet = std::set<std::string>;

std::string CompiledKey(const store::Job& job, const Config& c) {
  return absl::StrCat(job.key.template_id, "/", job.key.dtype, "/", ConfigString(c));
}

struct Recorded {
  std::map<std::string, double> time_ns;  // matched config text -> ok time
  std::vector<std::string> params;        // the param names the store's configs have
};

// The config as text over the knobs and `params` only.
std::string Match(const Config& c, const std::vector<std::string>& params) {
  std::string s = absl::StrCat(c.knobs.target, "/", c.knobs.maxrregcount, "/",
                               c.knobs.min_blocks, "/", c.knobs.fast_math);
  for (const std::string& p : params) {
    auto it = c.params.find(p);
    absl::StrAppend(&s, " ", p, "=", it == c.params.end() ? -1 : it->second);
  }
  return s;
}

Recorded RecordedTimes(const std::vector<store::Trial>& trials) {
  Recorded r;
  if (!trials.empty()) {
    for (const auto& [name, value] : trials.front().config.params) r.params.push_back(name);
  }
  for (const store::Trial& t : trials) {
    if (t.outcome == Outcome::kOk && t.metrics.time_ns > 0) {
      r.time_ns[Match(t.config, r.params)] = t.metrics.time_ns;
    }
  }
  return r;
}

struct KeyResult {
  int64_t space = 0, measured = 0, unrecorded = 0;
  // Candidates compiled for this key (not in the cache from the keys before it), by the
  // strategy and by an exhaustive run of the same keys.
  int64_t compiled = 0, exhaustive_compiled = 0;
  bool roofline = false;  // the roofline stop ended the search
  double best_ns = 0, winner_ns = 0;
  Config winner;
  std::vector<store::Trial> trials;  // what the replay measured, for later keys' warm start
};

struct Screened {
  double seen_ns, recorded_ns;
  Config config;
};

// As a tuning job's timing rounds choose: the fastest third of the screened candidates (at
// least 6, at most 24) timed again in full, where --noise / 3 stands for the spread of a
// full timing (ten times the samples), and the fastest of those wins. Its recorded time is
// what it is worth.
void ChooseWinner(const Args& args, std::mt19937_64& rng, std::vector<Screened> screened,
                  KeyResult* r) {
  std::sort(screened.begin(), screened.end(),
            [](const Screened& a, const Screened& b) { return a.seen_ns < b.seen_ns; });
  const size_t promoted =
      std::min<size_t>({screened.size(), 24, std::max<size_t>(6, (screened.size() + 2) / 3)});
  std::normal_distribution<double> full(0.0, args.noise / 3);
  double best = 0;
  for (size_t i = 0; i < promoted; ++i) {
    const double timed = screened[i].recorded_ns * std::max(0.5, 1 + full(rng));
    if (best == 0 || timed < best) {
      best = timed;
      r->winner = screened[i].config;
      r->winner_ns = screened[i].recorded_ns;
    }
  }
}

// One key's replay: the strategy's requests answered from `rec` until it stops.
absl::StatusOr<KeyResult> ReplayKey(const Args& args, store::Store& replayed,
                                    CompiledSet& compiled, CompiledSet& exhaustive_compiled,
                                    const store::Job& job, const TemplateRegistry& registry,
                                    const TargetInfo& target, double copy_gbps,
                                    const Recorded& rec) {
  KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const KernelTemplate> tmpl,
                         registry.Get(job.key.template_id));
  std::optional<DType> dtype = ParseDType(job.key.dtype);
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat("dtype ", job.key.dtype));
  KTUNE_ASSIGN_OR_RETURN(Shape shape, ParseShape(job.key.shape));
  KTUNE_ASSIGN_OR_RETURN(SearchSpace space, EnumerateSearchSpace(tmpl, *dtype, shape, target));
  StrategyOptions o;
  o.name = args.strategy;
  o.budget = args.budget;
  o.seed = args.seed;
  o.min_gain = args.min_gain;
  absl::StatusOr<Config> def = DefaultConfigFor(tmpl, *dtype, shape, target);
  o.default_config = def.ok() ? *def : DefaultConfig(*tmpl, target);
  KeyResult r;
  r.space = static_cast<int64_t>(space.configs.size());
  o.features = SpaceFeatures(tmpl, *dtype, shape, space.configs, target);
  for (const Config& c : space.configs) {
    auto it = rec.time_ns.find(Match(c, rec.params));
    if (it != rec.time_ns.end() && (r.best_ns == 0 || it->second < r.best_ns)) {
      r.best_ns = it->second;
    }
  }
  for (const Config& c : space.configs) {
    const std::string key = CompiledKey(job, c);
    if (!args.no_prefer_compiled) o.compiled.push_back(compiled.count(key) > 0);
    r.exhaustive_compiled += exhaustive_compiled.insert(key).second;
  }
  if (!args.no_warm_start && o.name == "guided") {
    absl::StatusOr<std::vector<Config>> warm =
        WarmStartConfigs(replayed, job.key.device_model, tmpl->name(), *dtype, shape, {});
    if (warm.ok()) o.warm_start = *std::move(warm);
  }
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<SearchStrategy> strategy,
                         NewStrategy(space.configs, o));
  std::mt19937_64 rng(args.seed ^ std::hash<std::string>()(job.key.shape));
  std::normal_distribution<double> scatter(0.0, args.noise);
  std::vector<Screened> screened;
  absl::StatusOr<Instance> reference = BindReference(tmpl, *dtype, shape, target);
  const double bound_ns = reference.ok() ? RooflineBoundNs(reference->bytes, copy_gbps) : 0;
  double best_seen = 0;
  // As a tuning job does: the next batch is asked for (and compiled) before this one's
  // times are reported, so the model is always a batch behind.
  std::vector<Config> batch = strategy->Next(args.batch);
  while (!batch.empty() && !r.roofline) {
    std::vector<Config> next = strategy->Next(args.batch);
    for (const Config& c : batch) {
      ++r.measured;
      r.compiled += compiled.insert(CompiledKey(job, c)).second;
      store::Trial t;
      t.config = c;
      auto it = rec.time_ns.find(Match(c, rec.params));
      if (it == rec.time_ns.end()) {
        ++r.unrecorded;
        strategy->Report(c, Outcome::kCompileFailed, 0);
        continue;
      }
      const double seen = it->second * std::max(0.5, 1 + scatter(rng));
      strategy->Report(c, Outcome::kOk, seen);
      t.outcome = Outcome::kOk;
      t.metrics.time_ns = seen;
      r.trials.push_back(t);
      screened.push_back({seen, it->second, c});
      if (best_seen == 0 || seen < best_seen) best_seen = seen;
      r.roofline =
          ReachesRoofline(*strategy, r.measured, best_seen, bound_ns, args.roofline_stop);
      if (r.roofline) break;
    }
    batch = std::move(next);
  }
  ChooseWinner(args, rng, screened, &r);
  return r;
}

// Stores the replayed key as a tuning job would, for the warm starts of the keys after it.
void StoreReplayed(store::Store& replayed, const store::Job& job, const KeyResult& r) {
  store::Job j = job;
  j.id = 0;
  j.state = store::JobState::kRunning;
  absl::StatusOr<int64_t> id = replayed.CreateJob(j);
  if (!id.ok() || r.winner_ns <= 0) return;
  store::Entry e;
  e.key = job.key;
  e.config = r.winner;
  e.cubin = "replay";
  e.cubin_sha256 = Sha256Hex(e.cubin);
  e.metrics.time_ns = r.winner_ns;
  e.job_id = *id;
  std::vector<store::Trial> trials = r.trials;
  for (store::Trial& t : trials) t.job_id = *id;
  replayed.CommitWinner(e, trials).IgnoreError();
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::StatusOr<TargetInfo> TargetOf(store::Store& db, store::Store& replayed,
                                    const std::string& model) {
  KTUNE_ASSIGN_OR_RETURN(store::Device device, db.GetDevice(model));
  KTUNE_RETURN_IF_ERROR(replayed.PutDevice(device));
  KTUNE_ASSIGN_OR_RETURN(TargetInfo base,
                         TargetFromArch(absl::StrCat("sm_", device.cc_major, device.cc_minor)));
  return TargetForStoredDevice(device, base);
}

double CopyGbps(store::Store& db, const std::string& model) {
  absl::StatusOr<store::Device> device = db.GetDevice(model);
  return device.ok() ? device->copy_gbps : 0;
}

int Run(const Args& args) {
  store::StoreOptions read_only;
  read_only.read_only = true;
  absl::StatusOr<std::unique_ptr<store::Store>> db = store::OpenSqliteStore(args.db, read_only);
  absl::StatusOr<std::unique_ptr<store::Store>> replayed = store::OpenSqliteStore(":memory:");
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
      LoadTemplateRegistry(args.templates_dir);
  absl::StatusOr<std::vector<store::Job>> jobs =
      db.ok() ? (*db)->ListJobs(store::JobState::kDone) : db.status();
  for (const absl::Status& s : {db.status(), replayed.status(), registry.status(),
                                jobs.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "search_replay: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  int keys = 0, within = 0, failed = 0, roofline = 0;
  int64_t measured = 0, space = 0, unrecorded = 0, compiles = 0, exhaustive_compiles = 0;
  double worst = 0;
  std::vector<double> fractions, cost_ratios;
  CompiledSet compiled, exhaustive_compiled;
  std::printf("%-56s %6s %8s %6s %12s %12s %7s\n", "key", "space", "measured", "frac",
              "best ns", "winner ns", "ratio");
  for (const store::Job& job : *jobs) {
    const std::string name =
        absl::StrCat(job.key.template_id, " ", job.key.dtype, " ", job.key.shape);
    absl::StatusOr<TargetInfo> target = TargetOf(**db, **replayed, job.key.device_model);
    absl::StatusOr<std::vector<store::Trial>> trials =
        target.ok() ? (*db)->ListTrials(job.id) : target.status();
    absl::StatusOr<KeyResult> r =
        trials.ok() ? ReplayKey(args, **replayed, compiled, exhaustive_compiled, job,
                                **registry, *target,
                                CopyGbps(**db, job.key.device_model), RecordedTimes(*trials))
                    : trials.status();
    if (!r.ok() || r->best_ns <= 0 || r->winner_ns <= 0) {
      ++failed;
      std::printf("%-56s failed: %s\n", name.c_str(),
                  r.ok() ? "no recorded time" : std::string(r.status().message()).c_str());
      continue;
    }
    StoreReplayed(**replayed, job, *r);
    ++keys;
    const double ratio = r->winner_ns / r->best_ns;
    const double frac = static_cast<double>(r->measured) / r->space;
    worst = std::max(worst, ratio);
    within += ratio <= 1 + args.within;
    roofline += r->roofline;
    measured += r->measured;
    space += r->space;
    unrecorded += r->unrecorded;
    fractions.push_back(frac);
    compiles += r->compiled;
    exhaustive_compiles += r->exhaustive_compiled;
    // A key's wall time in compiles: each one the cache lacks, and each measurement at
    // --measure-cost of a compile.
    cost_ratios.push_back((r->compiled + args.measure_cost * r->measured) /
                          (r->exhaustive_compiled + args.measure_cost * r->space));
    std::printf("%-56s %6lld %8lld %6.3f %12.0f %12.0f %7.3f%s\n", name.c_str(),
                static_cast<long long>(r->space), static_cast<long long>(r->measured), frac,
                r->best_ns, r->winner_ns, ratio, r->roofline ? " roofline" : "");
  }
  std::printf("\n%d keys replayed (%d failed): winner within %.0f %% of the best recorded on %d; "
              "measured %lld of %lld candidates (%.1f %%, median per key %.1f %%); %lld asked "
              "for had no recorded time; worst ratio %.3f; the roofline stopped %d\n",
              keys, failed, 100 * args.within, within, static_cast<long long>(measured),
              static_cast<long long>(space), space ? 100.0 * measured / space : 0.0,
              100 * Median(fractions), static_cast<long long>(unrecorded), worst, roofline);
  std::printf("compiled %lld candidates (an exhaustive run %lld); median per-key cost ratio "
              "%.2f (a compile 1, a measurement %.2f)\n",
              static_cast<long long>(compiles), static_cast<long long>(exhaustive_compiles),
              Median(cost_ratios), args.measure_cost);
  return 0;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  ktune::Args args;
  CLI::App app("Replays a search strategy over a store of recorded times, without a GPU");
  app.add_option("--db", args.db, "Store with every candidate's time (an exhaustive tune)")
      ->required();
  app.add_option("--templates", args.templates_dir, "Templates folder")->capture_default_str();
  app.add_option("--strategy", args.strategy, "guided, random or exhaustive")
      ->capture_default_str();
  app.add_option("--budget", args.budget, "Candidates per key (0: the strategy's default)");
  app.add_option("--noise", args.noise, "Relative spread of each answered time (normal)")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--seed", args.seed, "Strategy and noise seed")->capture_default_str();
  app.add_option("--min-gain", args.min_gain, "Guided's stop: least expected gain per batch")
      ->capture_default_str();
  app.add_option("--batch", args.batch, "Candidates asked for at once (a job: 2 x compile "
                                        "threads)")->capture_default_str();
  app.add_option("--within", args.within, "Tolerance of 'as fast'")->capture_default_str();
  app.add_flag("--no-warm-start", args.no_warm_start, "Guided without neighbours' winners");
  app.add_flag("--no-prefer-compiled", args.no_prefer_compiled,
               "Guided not told which candidates earlier keys compiled");
  app.add_option("--measure-cost", args.measure_cost,
                 "A measurement's cost in compiles, for the cost ratio")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--roofline-stop", args.roofline_stop,
                 "End a key's search at this fraction of its roofline bound (0: never)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);
  return ktune::Run(args);
}
