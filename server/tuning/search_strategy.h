// Search strategies: which candidates of a search space a tuning job measures, in what
// order. Small plug-ins (KTT's Searcher): a strategy sees the space once and each result
// as it comes, so a run can be replayed without a GPU from its recorded trials.
//
// Not thread-safe: one job drives one strategy.
#ifndef KTUNE_SERVER_TUNING_SEARCH_STRATEGY_H_
#define KTUNE_SERVER_TUNING_SEARCH_STRATEGY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/base/config.h"
#include "server/base/outcome.h"

namespace ktune {

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // Up to `max` candidates not handed out before; empty when the strategy is done.
  virtual std::vector<Config> Next(size_t max) = 0;
  // A finished candidate's outcome and time (ns; 0 unless ok). Also called, before any
  // Next, for the trials a resumed job already has: they are never handed out again.
  virtual void Report(const Config& config, Outcome outcome, double time_ns) = 0;
  // How many candidates the strategy will hand out in all (for progress and ETA).
  virtual int64_t Planned() const = 0;
  // "exhaustive", "random:<budget>:<seed>" or "guided:<budget>:<seed>", recorded with the
  // job (a job resumes only under the same name).
  virtual std::string Name() const = 0;
  // Why Next came back empty, for the job's record: "space exhausted", "budget of N
  // reached", "converged: ...". Empty while the strategy still has candidates.
  virtual std::string StopReason() const = 0;
  // How many candidates must be measured before a stop rule outside the strategy (the
  // job's roofline stop) may end the search. A candidate near the roofline bound is not
  // proof that none beats it by more than the noise: the bound is the copy ceiling, and
  // tuned kernels run at up to 108 % of it (an L2 that absorbs writes, reads that stream
  // better than a copy). So guided first measures its seeds and space-filling sample.
  // 0: at any candidate; exhaustive: never (INT64_MAX).
  virtual int64_t EarliestStop() const { return 0; }
};

// What every strategy is built from, beside the space.
struct StrategyOptions {
  std::string name = "guided";  // "guided", "exhaustive" or "random"
  // Most candidates to hand out; 0: random and exhaustive the whole space, guided 20 % of
  // it (at least 16, or all of a smaller space).
  int64_t budget = 0;
  uint64_t seed = 1;
  // Handed out first when the space has it: the baseline of every winner's speed-up.
  Config default_config;
  // Guided: configs to measure right after the default (the winners and leaders of
  // neighbouring keys: a warm start); those not in the space are ignored.
  std::vector<Config> warm_start;
  // Guided: per config of the space, in its order, what the model learns from
  // (candidate_features.h); empty: the configs' params and knobs only.
  std::vector<std::vector<double>> features;
  // Guided: per config of the space, in its order, whether its cubin is in the compiler's
  // cache already (an earlier key of the template compiled it: a candidate's program does
  // not depend on the shape), so measuring it costs a measurement and no compile. Empty:
  // none known.
  std::vector<bool> compiled;
  // Guided: stop once the model expects the next batch to improve the best time by less
  // than this fraction (after a minimum of measurements); 0 never stops early.
  double min_gain = 0.01;
};

// Every candidate, in the space's order.
std::unique_ptr<SearchStrategy> NewExhaustiveStrategy(std::vector<Config> space);

// `budget` candidates drawn uniformly without replacement (all of them if the space is
// smaller), the template's default config first so there is always a baseline.
std::unique_ptr<SearchStrategy> NewRandomStrategy(std::vector<Config> space, int64_t budget,
                                                  uint64_t seed, const Config& default_config);

// The strategy `options.name` over `space`; kInvalidArgument naming the strategy for an
// unknown name or a negative budget. Each hands out the default config first when the
// space has it.
absl::StatusOr<std::unique_ptr<SearchStrategy>> NewStrategy(std::vector<Config> space,
                                                           const StrategyOptions& options);

// A key's roofline bound: its problem's bytes at the device's copy ceiling, in ns; 0 when
// the ceiling is not known.
double RooflineBoundNs(int64_t bytes, double copy_gbps);

// The roofline stop, as a tuning job applies it (and bench/search_replay replays it): true
// once `strategy` allows an early stop after `measured` candidates and the best time seen
// runs at `stop` (a fraction, 0: never) of `bound_ns` or better.
bool ReachesRoofline(const SearchStrategy& strategy, int64_t measured, double best_ns,
                     double bound_ns, double stop);

// kInvalidArgument "strategy: unknown strategy 'X'; expected guided, exhaustive or random"
// unless `name` is one of those (empty: the default, guided).
absl::Status CheckStrategyName(const std::string& name);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_SEARCH_STRATEGY_H_
