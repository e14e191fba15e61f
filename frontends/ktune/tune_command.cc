// `ktune tune`: one tuning job, in this process or through --daemon (tune_backend.h), with a
// live progress line, then the winner (and, in this process, the best candidates with their
// metrics); or, with --spec, every key of a tuning spec (spec_tune.h).
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "frontends/ktune/commands.h"
#include "frontends/ktune/spec_tune.h"
#include "frontends/ktune/tune_backend.h"
#include "server/engine/engine.h"
#include "server/store/store.h"
#include "server/tuning/tuning_job.h"

namespace ktune::cli {
namespace {

struct TuneArgs {
  std::string template_name;
  std::string dtype;
  std::string shape;
  int top = 10;
  SpecTuneArgs spec;  // the job flags; the rest only with --spec (spec_tune.h)
};

// "last" is how full the last wave is: 1.02 waves at 2% runs its tail nearly idle. "batch"
// is runs per timed sample (0: not recorded, by a build before schema v3).
void PrintTrials(const std::vector<store::Trial>& trials, int top) {
  std::printf("%-4s %-40s %-18s %10s %8s %8s %5s %5s %6s %6s %6s %5s %5s\n", "rank", "params",
              "knobs", "time_us", "spread", "GB/s", "ceil", "regs", "spill", "occ", "waves",
              "last", "batch");
  int rank = 0;
  bool unflushed = false;
  for (const store::Trial& t : trials) {
    if (t.outcome != Outcome::kOk || rank >= top) break;
    const TrialMetrics& m = t.metrics;
    std::printf(
        "%-4d %-40s %-18s %10s %7.1f%% %8.0f %4.0f%% %5lld %6lld %5.0f%% %6.2f %4.0f%% %5lld\n",
        ++rank, ParamsText(t.config.params).c_str(), KnobsText(t.config.knobs).c_str(),
        Us(m.time_ns).c_str(), m.time_ns > 0 ? 100.0 * m.spread_ns / m.time_ns : 0.0, m.gbps,
        100.0 * m.ceiling_fraction, static_cast<long long>(m.registers),
        static_cast<long long>(m.spill_bytes), 100.0 * m.occupancy, m.waves,
        100.0 * m.last_wave, static_cast<long long>(m.batch));
    // batch 0 is a trial stored before the settings were recorded: its flush is unknown.
    if (m.batch > 0 && !m.l2_flushed) unflushed = true;
  }
  if (unflushed) {
    std::printf("note: some were timed without an L2 flush before each sample, so a warm L2 "
                "may flatter them\n");
  }
}

// The live progress line on stderr: rewritten in place on a terminal, a line per 10% in a log.
JobProgressFn ProgressLine(bool quiet, bool live) {
  return [quiet, live](const JobProgress& p) {
    if (quiet) return;
    std::string best = p.has_best ? absl::StrCat("best ", Us(p.best_time_ns), " us (",
                                                 p.best_params, ")")
                                  : "no passing candidate yet";
    std::string line =
        absl::StrFormat("[%lld/%lld] %s  %s  elapsed %.0fs ETA %.0fs",
                        static_cast<long long>(p.done), static_cast<long long>(p.total), best,
                        p.last_outcome, p.elapsed_s, p.eta_s);
    if (live) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
    } else if (p.total > 0 && (p.done * 10 / p.total != (p.done - 1) * 10 / p.total)) {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  };
}

// The winner, how the trials ended and where it is stored. Through a daemon there are no
// trials here and no entry id (the daemon's store has them).
void PrintWinner(const TuneResult& result, const std::string& stored_in, bool local) {
  const store::Entry& e = result.entry;
  std::printf("tuned     %s %s %s on %s\n", e.key.template_id.c_str(), e.key.dtype.c_str(),
              e.key.shape.c_str(), e.key.device_model.c_str());
  std::printf("winner    %s  %s\n", ParamsText(e.config.params).c_str(),
              KnobsText(e.config.knobs).c_str());
  std::printf("time      %s us (spread %.1f%%, %lld samples)  %.0f GB/s  %.1f%% of copy ceiling\n",
              Us(e.metrics.time_ns).c_str(),
              e.metrics.time_ns > 0 ? 100 * e.metrics.spread_ns / e.metrics.time_ns : 0.0,
              static_cast<long long>(e.metrics.repeats), e.metrics.gbps,
              100 * e.metrics.ceiling_fraction);
  const LaunchSpec first = e.launches.empty() ? LaunchSpec{"?", {0, 0, 0}, {0, 0, 0}, 0, {}}
                                              : e.launches[0];
  std::printf("kernel    %s  grid [%u,%u,%u] block [%u,%u,%u] smem %u B\n",
              first.lowered_name.c_str(), first.grid[0], first.grid[1], first.grid[2],
              first.block[0], first.block[1], first.block[2], first.shared_bytes);
  if (!local) {
    std::printf("stored    by %s (%.1f s)\n", stored_in.c_str(), result.seconds);
    return;
  }
  int64_t by_outcome[7] = {};
  for (const store::Trial& t : result.trials) ++by_outcome[static_cast<int>(t.outcome)];
  std::vector<std::string> counts;
  for (int o = 0; o < 7; ++o) {
    if (by_outcome[o])
      counts.push_back(absl::StrCat(OutcomeName(static_cast<Outcome>(o)), " ", by_outcome[o]));
  }
  std::printf("trials    %zu in %.1f s (%s)%s\n", result.trials.size(), result.seconds,
              absl::StrJoin(counts, ", ").c_str(),
              result.resumed_trials
                  ? absl::StrCat(", ", result.resumed_trials, " from an earlier run").c_str()
                  : "");
  std::printf("search    %s over %lld candidates; stopped: %s\n", result.strategy.c_str(),
              static_cast<long long>(result.space_size), result.stop_reason.c_str());
  std::vector<std::string> phases;
  for (const auto& [name, seconds] : PhaseList(result.phases)) {
    phases.push_back(absl::StrFormat("%s %.2f", name, seconds));
  }
  if (!phases.empty()) std::printf("phases    %s (s)\n", absl::StrJoin(phases, ", ").c_str());
  std::printf("stored    entry %lld in %s\n\n", static_cast<long long>(e.id), stored_in.c_str());
}

// One key, through the same backend as a spec's keys (tune_backend.h): here or --daemon.
int RunTune(const TuneArgs& args) {
  const SpecTuneArgs& spec = args.spec;
  const TuneJobFlags& job = spec.job;
  if (absl::Status s = CheckTuneJobFlags(job); !s.ok()) return Fail(s);
  if (absl::Status s = CheckDaemonFlags(spec.daemon, job); !s.ok()) return Fail(s);
  absl::StatusOr<TemplateRequest> resolved = ResolveTemplateRequest(
      job.templates_dir, args.template_name, args.dtype, args.shape);
  if (!resolved.ok()) return Fail(resolved.status());
  const SpecKey key{args.template_name, resolved->dtype, resolved->shape};
  absl::StatusOr<std::unique_ptr<TuneBackend>> backend =
      OpenTuneBackend(spec.daemon, spec.token, job, std::move(resolved->registry));
  if (!backend.ok()) return FailOpen(spec.daemon, backend.status());

  const bool live = !job.quiet && ::isatty(STDERR_FILENO);
  absl::StatusOr<TuneResult> result = (*backend)->Tune(key, ProgressLine(job.quiet, live), false);
  if (live) std::fprintf(stderr, "\n");
  if (!result.ok()) return Fail(result.status());
  PrintWinner(*result, (*backend)->stored_in(), spec.daemon.empty());
  if (spec.daemon.empty()) PrintTrials(result->trials, args.top);
  return kExitOk;
}


// TEMPLATE --dtype --shape, or --spec FILE: exactly one; kInvalidArgument naming the flag.
absl::Status CheckMode(const TuneArgs& args) {
  if (!args.spec.file.empty()) {
    for (const auto& [given, flag] : {std::pair{!args.template_name.empty(), "TEMPLATE"},
                                      {!args.dtype.empty(), "--dtype"},
                                      {!args.shape.empty(), "--shape"}}) {
      if (given) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": not with --spec (the spec names templates, dtypes and shapes)"));
      }
    }
    return absl::OkStatus();
  }
  for (const auto& [given, flag] :
       {std::pair{args.spec.json, "--json"}, {args.spec.force, "--force"},
        {!args.spec.only.empty(), "--only"}, {!args.spec.skip.empty(), "--skip"}}) {
    if (given) return absl::InvalidArgumentError(absl::StrCat(flag, ": only with --spec"));
  }
  if (args.template_name.empty()) {
    return absl::InvalidArgumentError("TEMPLATE: required (or --spec FILE)");
  }
  if (args.dtype.empty()) return absl::InvalidArgumentError("--dtype: required with TEMPLATE");
  if (args.shape.empty()) return absl::InvalidArgumentError("--shape: required with TEMPLATE");
  return absl::OkStatus();
}

int RunTuneCommand(const TuneArgs& args) {
  if (absl::Status s = CheckMode(args); !s.ok()) return Fail(s);
  if (args.spec.file.empty()) return RunTune(args);
  return RunSpecTune(args.spec);
}

}  // namespace

Command AddTuneCommand(CLI::App& parent) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* app = parent.add_subcommand(
      "tune",
      "Tune one template for a dtype and shape on this host's GPU, store the winner; or, with "
      "--spec FILE, every key of a model's tuning spec (here or through --daemon)");
  app->add_option("template", args->template_name, "Template name (or --spec)");
  app->add_option("--dtype", args->dtype, "f32, f16, bf16, f8e4m3 or f8e5m2");
  app->add_option("--shape", args->shape, "Dims, e.g. tokens=4096,hidden=8192");
  app->add_option("--spec", args->spec.file,
                  "Tuning spec file (proto/ktune/v1/spec.proto), e.g. specs/llama-3-8b.textproto");
  app->add_option("--daemon", args->spec.daemon,
                  "Tune through the ktuned at this target (unix:///PATH or HOST:PORT) instead "
                  "of in this process");
  app->add_option("--token", args->spec.token, "With --daemon: bearer token, if ktuned wants one");
  app->add_flag("--json", args->spec.json, "With --spec: print the summary as JSON");
  app->add_flag("--force", args->spec.force,
                "With --spec: re-tune keys already fresh in the store");
  app->add_option("--only", args->spec.only,
                  "With --spec: tune only the keys of these templates (e.g. gemm)")
      ->delimiter(',');
  app->add_option("--skip", args->spec.skip,
                  "With --spec: leave out the keys of these templates (e.g. gemm: the spec's "
                  "memory-bound kernels alone)")
      ->delimiter(',');
  SearchSettings& search = args->spec.job.search;
  // Which search fields the command line set: those win over a spec's search block.
  auto given = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  given->emplace_back("strategy", app->add_option("--strategy", search.strategy,
                                                  "guided (a model learns from each result, "
                                                  "measures the most promising, stops when it "
                                                  "expects little more), exhaustive or random")
                                      ->capture_default_str());
  given->emplace_back("budget", app->add_option("--budget", search.budget,
                                                "Most candidates to measure (0 = guided: 20 % "
                                                "of the space, at least 16; exhaustive and "
                                                "random: all)"));
  given->emplace_back("time", app->add_option("--time", search.time_limit_s,
                                              "Stop starting candidates after this many seconds"));
  given->emplace_back("min_gain",
                      app->add_option("--min-gain", search.min_gain,
                                      "Guided: stop when the next batch is expected to gain less "
                                      "than this fraction (0 = never on that ground)")
                          ->capture_default_str());
  given->emplace_back("roofline_stop",
                      app->add_option("--roofline-stop", search.roofline_stop,
                                      "Guided and random: stop at a candidate reaching this "
                                      "fraction of the key's roofline bound (0 = never)")
                          ->capture_default_str());
  given->emplace_back("warm_start",
                      app->add_flag("--no-warm-start",
                                    [&search](int64_t) { search.warm_start = false; },
                                    "Guided: do not start from the winners of neighbouring "
                                    "stored keys"));
  app->add_option("--seed", args->spec.job.seed, "Guided and random strategies, input data seed")
      ->capture_default_str();
  app->add_option("--db", args->spec.job.db, "SQLite file (default: the daemon's)");
  app->add_option("--templates", args->spec.job.templates_dir,
                  "Templates folder (default: shipped)");
  app->add_option("--cache-dir", args->spec.job.cache_dir, "Cubin cache folder");
  app->add_option("--worker", args->spec.job.worker,
                  "ktune-worker program (default: beside ktune)");
  app->add_option("--gpu", args->spec.job.ordinal, "GPU ordinal")->capture_default_str();
  app->add_option("--gpus", args->spec.job.gpus,
                  "With --spec: spread the keys over these GPUs (all, or e.g. 0,1), those of "
                  "--gpu's device model; a key whose GPU is lost resumes on another");
  app->add_option("--threads", args->spec.job.threads, "Compile threads (0 = one per core)");
  app->add_option("--idle-compile", args->spec.job.idle_compile, IdleCompileHelp())
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app->add_option("--min-sample-us", args->spec.job.min_sample_us,
                  "Runs shorter than this are timed in back-to-back batches after one L2 flush "
                  "(0 = the worker's 20 us); 0.001 times each run alone after its own flush");
  app->add_option("--decide-sample-us", args->spec.job.decision_min_sample_us,
                  "The same for the runs that decide the winner (promotion, final round); "
                  "0 = --min-sample-us");
  app->add_option("--top", args->top, "Candidates to list")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--quiet", args->spec.job.quiet, "No progress display");
  return {app, [args, given] {
            for (const auto& [field, option] : *given) {
              if (option->count() > 0) args->spec.job.search_flags.insert(field);
            }
            return RunTuneCommand(*args);
          }};
}

}  // namespace ktune::cli
