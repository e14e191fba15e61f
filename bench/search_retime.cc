// Times two stores' winners of the same keys side by side on one GPU: for each key tuned in
// both (a reference search, e.g. exhaustive, and a candidate, e.g. guided), both configs are
// built again, the key's problem is set once, and the two kernels are measured in alternation
// (A B A B ...) with the tuner's own timer, so clock and temperature drift touch both alike,
// both with the batch (runs per timed sample) the worker chose for A's first run, as a
// tuning job times its finalists: batched apart, near-equal kernels differ by the weight of
// a sample's L2-cold first run alone.
// Prints one line per key and a summary: how many keys the candidate's winner is within
// --within of the reference's (median over the rounds).
//
//   search_retime --reference A.db --candidate B.db [--rounds 5] [--gpu 0] [--within 0.02]
//                 [--min-sample-us 100] [--order ab|pairs|blocks|rotate|shuffle] [--same]
//                 [--runs] [--fresh-worker]
//                 [--no-flush]
//
// --order: A B A B (the default); A A B B, each second run kept; A --rounds times, then B; or
// rotate: A B S A B S ..., S a short measurement of A or B (in turn) whose time is dropped,
// so that the loads of A and B fall at every position of a cycle of 2 or 4 loads; or
// shuffle: half of the rounds A B and half B A in a drawn order (fixed seed), so that neither
// kernel keeps a place in the round: a state that follows the place, not the kernel, then
// lands on both alike. An A/A
// test shows why these exist: with the L2 flushed before each sample, a kernel of a few
// microseconds measured against itself can read 3-8 % apart (about 1 us per sample), one
// side keeping its state over all of a process's rounds, the other side or neither in the
// next process; no order removed it (the spacer did not either, so it is no cycle of loads),
// and without the flush it is gone.
//
// Two searches that agree on a config count as equal without measuring, unless --same: then
// they are timed too, and with one store given twice every key is an A/A test of the timer
// (one kernel loaded and measured in alternation with itself). --runs prints every run's time,
// a '*' on those measured second in their round.
//
// --fresh-worker takes the rounds outermost: round r of every key, then round r + 1 on a new
// worker process. A state that a process keeps for a kernel (the A/A runs found one that kept
// its sign over all of a process's rounds and flipped in the next) is then drawn again in
// every round, and the median over the rounds weighs it like any other noise.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/engine/engine.h"
#include "server/gpu/device_model.h"
#include "server/templates/instance.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"
#include "server/tuning/kernel_build.h"

namespace ktune {
namespace {

struct Args {
  std::string reference, candidate, templates_dir, cache_dir, worker;
  int gpu = 0;
  int rounds = 5;
  // ab: A B A B ...; pairs: A A B B ..., keeping each second run; blocks: A x rounds, B x rounds.
  std::string order = "ab";
  double within = 0.02;
  // Runs shorter than this are timed in batches this long. 100 us, not the worker's 20: the
  // A/A floor (one kernel against itself over the Llama spec's 120 keys, H100 2026-12-07,
  // 6 rounds, shuffled) read 103-119 keys within 2 % at the worker's samples and 120 of 120
  // at 100 us (worst 1.006): a fixed cost per sample weighs a fifth as much. 0: the worker's.
  double min_sample_us = 100;
  bool same = false;         // time configs both stores agree on, too
  bool runs = false;         // print every run's time
  bool no_flush = false;     // time without flushing L2 first (a diagnosis, not the tuner's timer)
  bool fresh_worker = false;  // each round on a worker process of its own
};

std::string KeyName(const store::EntryKey& k) {
  return absl::StrCat(k.template_id, " ", k.dtype, " ", k.shape);
}

absl::StatusOr<std::map<std::string, store::EntrySummary>> Winners(const std::string& db) {
  store::StoreOptions read_only;
  read_only.read_only = true;
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<store::Store> s, store::OpenSqliteStore(db, read_only));
  KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> entries, s->ListEntries({}));
  std::map<std::string, store::EntrySummary> out;
  for (store::EntrySummary& e : entries) out[KeyName(e.key)] = std::move(e);
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Of one of the two configs: its ok runs' times in ns and their median (0 where none was
// ok), and the fewest and most runs per timed sample the worker chose for it (short kernels
// are timed in batches; the first run of a batch follows the L2 flush, the others find warm
// lines).
struct Side {
  std::vector<double> times_ns;
  std::vector<bool> second;  // each run: whether it came second in its round
  double median_ns = 0;
  int64_t min_batch = 0, max_batch = 0;
};

// A side's runs in ns, those that came second in their round marked with a '*'.
std::string RunsString(const Side& s) {
  std::string out;
  for (size_t r = 0; r < s.times_ns.size(); ++r) {
    absl::StrAppend(&out, r == 0 ? "" : " ", static_cast<int64_t>(s.times_ns[r] + 0.5),
                    s.second[r] ? "*" : "");
  }
  return out;
}

std::string BatchString(const Side& s) {
  return s.min_batch == s.max_batch ? absl::StrCat(s.min_batch)
                                    : absl::StrCat(s.min_batch, "-", s.max_batch);
}

// One measurement of the order: which side (0 reference, 1 candidate), whether its time is
// kept (else it only loads the module and runs it), with the spacer's short timing or the
// full one, and whether it comes second in its round.
struct Step {
  int side = 0;
  bool kept = true;
  bool spacer = false;
  bool second = false;
  int round = 0;
};

// --order's measurements, the same for every key.
std::vector<Step> Schedule(const std::string& order, int rounds) {
  std::vector<Step> steps;
  // shuffle: which rounds are B A, half of them in an order drawn with a fixed seed.
  std::vector<int> swapped(rounds, 0);
  if (order == "shuffle") {
    std::fill(swapped.begin(), swapped.begin() + rounds / 2, 1);
    std::mt19937 rng(12345);
    std::shuffle(swapped.begin(), swapped.end(), rng);
  }
  if (order == "blocks") {
    for (int side : {0, 1}) {
      for (int r = 0; r < rounds; ++r) steps.push_back({side, true, false, false, r});
    }
    return steps;
  }
  for (int r = 0; r < rounds; ++r) {
    if (order == "pairs") {  // A A B B, the first of each pair dropped
      for (int side : {0, 1}) {
        steps.push_back({side, false, false, side == 1, r});
        steps.push_back({side, true, false, side == 1, r});
      }
    } else {  // ab, shuffle, rotate
      const int first = swapped[r];
      steps.push_back({first, true, false, false, r});
      steps.push_back({1 - first, true, false, true, r});
      if (order == "rotate") steps.push_back({r % 2, false, true, false, r});
    }
  }
  return steps;
}

// What one key's measurements need, built once: the problem (inputs and the reference's
// outputs, set on the worker before the key's steps) and the two binaries.
struct KeyPlan {
  v1::Problem problem;
  v1::KernelBinary binaries[2];  // {reference, candidate}
};

absl::StatusOr<KeyPlan> PlanKey(Engine& engine, const TargetInfo& target,
                                const store::EntrySummary& a, const store::EntrySummary& b) {
  KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const KernelTemplate> tmpl,
                         engine.registry->Get(a.key.template_id));
  std::optional<DType> dtype = ParseDType(a.key.dtype);
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat("dtype ", a.key.dtype));
  KTUNE_ASSIGN_OR_RETURN(Shape shape, ParseShape(a.key.shape));
  KTUNE_ASSIGN_OR_RETURN(Instance reference, BindReference(tmpl, *dtype, shape, target));
  KTUNE_ASSIGN_OR_RETURN(CompileResult ref, engine.compiler->Compile(BuildCompileRequest(reference)));
  if (!ref.ok) return absl::InternalError("the reference does not compile");
  KeyPlan plan;
  KTUNE_ASSIGN_OR_RETURN(plan.problem, BuildProblem(reference, ref, 1));
  int side = 0;
  for (const store::EntrySummary* e : {&a, &b}) {
    KTUNE_ASSIGN_OR_RETURN(BuiltKernel built,
                           BuildKernel(tmpl, *dtype, shape, e->config, target, *engine.compiler));
    if (!built.ok()) return absl::InternalError(absl::StrCat(ConfigString(e->config), " no longer builds"));
    plan.binaries[side++] = built.binary;
  }
  return plan;
}

// The timing of every kept run (batch 0 until the key's first kept run sets it: both sides
// then share the batch the worker chose for it), and the spacer's: one warm-up run and one
// sample, enough to load the module.
struct KeyTiming {
  v1::TimingOptions timing, spacer;
  explicit KeyTiming(const Args& args) {
    timing.set_min_sample_us(args.min_sample_us);
    timing.set_no_l2_flush(args.no_flush);
    spacer = timing;
    spacer.set_warmup(1);
    spacer.set_min_repeats(1);
    spacer.set_max_repeats(1);
  }
};

// Sets the key's problem on `gpu` and measures `steps` of it into sides {reference,
// candidate}.
absl::Status MeasureSteps(Gpu& gpu, const KeyPlan& plan, const std::vector<Step>& steps,
                          KeyTiming& t, Side (&sides)[2]) {
  KTUNE_RETURN_IF_ERROR(gpu.SetProblem(plan.problem).status());
  for (const Step& step : steps) {
    const v1::TimingOptions& timing = step.spacer ? t.spacer : t.timing;
    KTUNE_ASSIGN_OR_RETURN(v1::Measurement m, gpu.Measure(plan.binaries[step.side], timing));
    if (!step.kept || m.outcome() != "ok") continue;
    if (t.timing.batch() == 0) t.timing.set_batch(m.batch());
    Side& s = sides[step.side];
    s.times_ns.push_back(m.time_ns());
    s.second.push_back(step.second);
    s.min_batch = s.min_batch == 0 ? m.batch() : std::min(s.min_batch, m.batch());
    s.max_batch = std::max(s.max_batch, m.batch());
  }
  return absl::OkStatus();
}

int Run(const Args& args) {
  absl::StatusOr<std::map<std::string, store::EntrySummary>> ref = Winners(args.reference);
  absl::StatusOr<std::map<std::string, store::EntrySummary>> cand = Winners(args.candidate);
  if (!ref.ok() || !cand.ok()) {
    std::fprintf(stderr, "search_retime: %s\n",
                 (!ref.ok() ? ref.status() : cand.status()).ToString().c_str());
    return 1;
  }
  EngineOptions options;
  options.templates_dir = args.templates_dir;
  options.db = ":memory:";
  options.cache_dir = args.cache_dir;
  options.worker = args.worker;
  absl::StatusOr<std::unique_ptr<Engine>> engine = OpenEngine(std::move(options));
  if (!engine.ok()) {
    std::fprintf(stderr, "search_retime: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Gpu>> gpu = (*engine)->gpu_factory(args.gpu);
  absl::StatusOr<v1::DeviceInfo> info = gpu.ok() ? (*gpu)->Info() : gpu.status();
  if (!info.ok()) {
    std::fprintf(stderr, "search_retime: GPU %d: %s\n", args.gpu, info.status().ToString().c_str());
    return 1;
  }
  const TargetInfo target = TargetForDevice(*info);
  const std::vector<Step> schedule = Schedule(args.order, args.rounds);
  // The keys to time, each with its plan, built before any is measured.
  // Keys whose stores agree on the config are timed only with --same.
  struct Work {
    std::string name;
    bool same_config;
    std::optional<absl::StatusOr<KeyPlan>> plan;  // none: not timed
    KeyTiming timing;
    Side sides[2];
  };
  std::vector<Work> work;
  int keys = 0, within = 0, same_config = 0, failed = 0;
  for (const auto& [name, a] : *ref) {
    auto it = cand->find(name);
    if (it == cand->end()) continue;
    ++keys;
    const store::EntrySummary& b = it->second;
    const bool same = a.config == b.config;
    work.push_back({name, same, std::nullopt, KeyTiming(args), {}});
    if (!same || args.same) work.back().plan = PlanKey(**engine, target, a, b);
  }
  // One pass over the keys with every step, on the one worker; or (--fresh-worker) a pass
  // per round, each on a worker of its own, so that each round's runs of a key come from
  // another process.
  std::vector<std::vector<Step>> passes;
  if (args.fresh_worker) {
    passes.resize(args.rounds);
    for (const Step& step : schedule) passes[step.round].push_back(step);
  } else {
    passes.push_back(schedule);
  }
  std::unique_ptr<Gpu> current = *std::move(gpu);
  for (size_t p = 0; p < passes.size(); ++p) {
    if (p > 0) {
      current.reset();  // the last pass's worker exits before the next starts
      absl::StatusOr<std::unique_ptr<Gpu>> next = (*engine)->gpu_factory(args.gpu);
      if (!next.ok()) {
        std::fprintf(stderr, "search_retime: GPU %d, pass %zu: %s\n", args.gpu, p + 1,
                     next.status().ToString().c_str());
        return 1;
      }
      current = *std::move(next);
    }
    for (Work& w : work) {
      if (!w.plan || !w.plan->ok()) continue;
      if (absl::Status s = MeasureSteps(*current, **w.plan, passes[p], w.timing, w.sides);
          !s.ok()) {
        *w.plan = s;  // its runs so far are dropped with it
      }
    }
  }
  double worst = 0;
  std::printf("%-64s %12s %12s %7s %9s\n", "key", "reference ns", "candidate ns", "ratio",
              "batches");
  for (Work& w : work) {
    const char* name = w.name.c_str();
    if (w.same_config) ++same_config;
    if (!w.plan) {
      ++within;
      std::printf("%-64s %12s %12s %7s\n", name, "-", "-", "same");
      continue;
    }
    for (Side& side : w.sides) side.median_ns = Median(side.times_ns);
    const Side& ra = w.sides[0];
    const Side& rb = w.sides[1];
    if (!w.plan->ok() || ra.median_ns <= 0 || rb.median_ns <= 0) {
      ++failed;
      std::printf("%-64s failed: %s\n", name,
                  w.plan->ok() ? "a run failed" : std::string(w.plan->status().message()).c_str());
      continue;
    }
    const double ratio = rb.median_ns / ra.median_ns;
    worst = std::max(worst, ratio);
    if (ratio <= 1 + args.within) ++within;
    std::printf("%-64s %12.0f %12.0f %7.3f %9s", name, ra.median_ns, rb.median_ns, ratio,
                absl::StrCat(BatchString(ra), "/", BatchString(rb)).c_str());
    if (args.runs) std::printf("  %s | %s", RunsString(ra).c_str(), RunsString(rb).c_str());
    std::printf("\n");
  }
  std::printf("\n%d keys in both: candidate within %.0f %% of the reference on %d (%d the same "
              "config), %d failed to retime; worst ratio %.3f\n",
              keys, 100 * args.within, within, same_config, failed, worst);
  return 0;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  ktune::Args args;
  CLI::App app("Times two stores' winners of the same keys side by side on one GPU");
  app.add_option("--reference", args.reference, "Reference store (e.g. exhaustive)")->required();
  app.add_option("--candidate", args.candidate, "Candidate store (e.g. guided)")->required();
  app.add_option("--templates", args.templates_dir, "Templates folder (default: shipped)");
  app.add_option("--cache-dir", args.cache_dir, "Cubin cache folder");
  app.add_option("--worker", args.worker, "ktune-worker program");
  app.add_option("--gpu", args.gpu, "GPU ordinal");
  app.add_option("--rounds", args.rounds, "Alternating measurements of each")->capture_default_str();
  app.add_option("--order", args.order, "ab (alternate), pairs (A A B B, the second of each "
                 "kept), blocks (A --rounds times, then B), rotate (A B and a spacer load) or "
                 "shuffle (half the rounds A B, half B A, in a drawn order)")
      ->check(CLI::IsMember({"ab", "pairs", "blocks", "rotate", "shuffle"}))
      ->capture_default_str();
  app.add_option("--within", args.within, "Tolerance of 'as fast'")->capture_default_str();
  app.add_option("--min-sample-us", args.min_sample_us,
                 "Shorter runs are timed in batches this long (0: the worker's own)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--same", args.same,
               "Time configs both stores agree on too (one store twice: an A/A test of the timer)");
  app.add_flag("--no-flush", args.no_flush, "Do not flush L2 before each sample (diagnosis)");
  app.add_flag("--fresh-worker", args.fresh_worker,
               "Each round on a worker process of its own (rounds over all keys, outermost)");
  app.add_flag("--runs", args.runs,
               "Print every run's time (ns), reference | candidate; * marks those measured "
               "second in their round");
  CLI11_PARSE(app, argc, argv);
  return ktune::Run(args);
}
