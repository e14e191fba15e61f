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
//                 [--min-sample-us US] [--order ab|pairs|blocks|rotate|shuffle] [--same]
//                 [--runs]
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
#include <algorithm>
#include <cstdio>
#include <map>
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
  double min_sample_us = 0;  // 0: the worker's default
  bool same = false;         // time configs both stores agree on, too
  bool runs = false;         // print every run's time
  bool no_flush = false;     // time without flushing L2 first (a diagnosis, not the tuner's timer)
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
      for (int r = 0; r < rounds; ++r) steps.push_back({side, true, false, false});
    }
    return steps;
  }
  for (int r = 0; r < rounds; ++r) {
    if (order == "pairs") {  // A A B B, the first of each pair dropped
      for (int side : {0, 1}) {
        steps.push_back({side, false, false, side == 1});
        steps.push_back({side, true, false, side == 1});
      }
    } else {  // ab, shuffle, rotate
      const int first = swapped[r];
      steps.push_back({first, true, false, false});
      steps.push_back({1 - first, true, false, true});
      if (order == "rotate") steps.push_back({r % 2, false, true, false});
    }
  }
  return steps;
}

// The two configs of one key, measured as `schedule` says: {reference, candidate}.
absl::StatusOr<std::pair<Side, Side>> Retime(Engine& engine, Gpu& gpu, const TargetInfo& target,
                                             const store::EntrySummary& a,
                                             const store::EntrySummary& b, const Args& args,
                                             const std::vector<Step>& schedule) {
  KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const KernelTemplate> tmpl,
                         engine.registry->Get(a.key.template_id));
  std::optional<DType> dtype = ParseDType(a.key.dtype);
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat("dtype ", a.key.dtype));
  KTUNE_ASSIGN_OR_RETURN(Shape shape, ParseShape(a.key.shape));
  KTUNE_ASSIGN_OR_RETURN(Instance reference, BindReference(tmpl, *dtype, shape, target));
  KTUNE_ASSIGN_OR_RETURN(CompileResult ref, engine.compiler->Compile(BuildCompileRequest(reference)));
  if (!ref.ok) return absl::InternalError("the reference does not compile");
  KTUNE_ASSIGN_OR_RETURN(v1::Problem problem, BuildProblem(reference, ref, 1));
  KTUNE_RETURN_IF_ERROR(gpu.SetProblem(problem).status());
  std::vector<v1::KernelBinary> binaries;
  for (const store::EntrySummary* e : {&a, &b}) {
    KTUNE_ASSIGN_OR_RETURN(BuiltKernel built,
                           BuildKernel(tmpl, *dtype, shape, e->config, target, *engine.compiler));
    if (!built.ok()) return absl::InternalError(absl::StrCat(ConfigString(e->config), " no longer builds"));
    binaries.push_back(built.binary);
  }
  Side sides[2];
  v1::TimingOptions timing;
  timing.set_min_sample_us(args.min_sample_us);
  timing.set_no_l2_flush(args.no_flush);
  // The spacer: one warm-up run and one sample, enough to load the module.
  v1::TimingOptions spacer = timing;
  spacer.set_warmup(1);
  spacer.set_min_repeats(1);
  spacer.set_max_repeats(1);
  for (const Step& step : schedule) {
    KTUNE_ASSIGN_OR_RETURN(v1::Measurement m,
                           gpu.Measure(binaries[step.side], step.spacer ? spacer : timing));
    if (!step.kept || m.outcome() != "ok") continue;
    if (timing.batch() == 0) timing.set_batch(m.batch());
    Side& s = sides[step.side];
    s.times_ns.push_back(m.time_ns());
    s.second.push_back(step.second);
    s.min_batch = s.min_batch == 0 ? m.batch() : std::min(s.min_batch, m.batch());
    s.max_batch = std::max(s.max_batch, m.batch());
  }
  for (Side& s : sides) s.median_ns = Median(s.times_ns);
  return std::make_pair(sides[0], sides[1]);
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
  int keys = 0, within = 0, same_config = 0, failed = 0;
  double worst = 0;
  std::printf("%-64s %12s %12s %7s %9s\n", "key", "reference ns", "candidate ns", "ratio",
              "batches");
  for (const auto& [name, a] : *ref) {
    auto it = cand->find(name);
    if (it == cand->end()) continue;
    const store::EntrySummary& b = it->second;
    ++keys;
    if (a.config == b.config && !args.same) {
      ++within;
      ++same_config;
      std::printf("%-64s %12s %12s %7s\n", name.c_str(), "-", "-", "same");
      continue;
    }
    absl::StatusOr<std::pair<Side, Side>> t =
        Retime(**engine, **gpu, target, a, b, args, schedule);
    if (!t.ok() || t->first.median_ns <= 0 || t->second.median_ns <= 0) {
      ++failed;
      std::printf("%-64s failed: %s\n", name.c_str(),
                  t.ok() ? "a run failed" : std::string(t.status().message()).c_str());
      continue;
    }
    const double ratio = t->second.median_ns / t->first.median_ns;
    worst = std::max(worst, ratio);
    if (ratio <= 1 + args.within) ++within;
    if (a.config == b.config) ++same_config;
    std::printf("%-64s %12.0f %12.0f %7.3f %9s", name.c_str(), t->first.median_ns,
                t->second.median_ns, ratio,
                absl::StrCat(BatchString(t->first), "/", BatchString(t->second)).c_str());
    if (args.runs) {
      std::printf("  %s | %s", RunsString(t->first).c_str(), RunsString(t->second).c_str());
    }
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
                 "Shorter runs are timed in batches this long (default: the worker's)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--same", args.same,
               "Time configs both stores agree on too (one store twice: an A/A test of the timer)");
  app.add_flag("--no-flush", args.no_flush, "Do not flush L2 before each sample (diagnosis)");
  app.add_flag("--runs", args.runs,
               "Print every run's time (ns), reference | candidate; * marks those measured "
               "second in their round");
  CLI11_PARSE(app, argc, argv);
  return ktune::Run(args);
}
