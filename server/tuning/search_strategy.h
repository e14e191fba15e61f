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
  // "exhaustive" or "random:<budget>:<seed>", recorded with the job.
  virtual std::string Name() const = 0;
};

// Every candidate, in the space's order.
std::unique_ptr<SearchStrategy> NewExhaustiveStrategy(std::vector<Config> space);

// `budget` candidates drawn uniformly without replacement (all of them if the space is
// smaller), the template's default config first so there is always a baseline.
std::unique_ptr<SearchStrategy> NewRandomStrategy(std::vector<Config> space, int64_t budget,
                                                  uint64_t seed, const Config& default_config);

// "exhaustive" or "random" -> a strategy; kInvalidArgument naming the strategy otherwise.
// Either hands out `default_config` first when the space has it (the speed-up baseline).
absl::StatusOr<std::unique_ptr<SearchStrategy>> NewStrategy(const std::string& name,
                                                           std::vector<Config> space,
                                                           int64_t budget, uint64_t seed,
                                                           const Config& default_config);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_SEARCH_STRATEGY_H_
