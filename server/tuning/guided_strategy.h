// The guided search strategy: measures a small, spread-out first sample, then learns the
// space's time from every result (a random forest over the candidates' features, refit as
// trials come in) and hands out the candidates the model rates most promising, until the
// budget is spent or the expected gain of the next batch falls under a threshold.
//
// Order of the hand-out: the default config (the speed-up baseline), the warm-start configs
// (neighbouring keys' winners), a space-filling sample (each next point the farthest, over
// the features' ranks, from those already chosen), then model batches ranked by a lower
// confidence bound on log time (mean minus one spread of the trees), which both exploits
// where the model is sure and explores where it is not. Among near-equals, candidates an
// earlier key already compiled go first (StrategyOptions::compiled).
//
// Not thread-safe: one job drives one strategy.
#ifndef KTUNE_SERVER_TUNING_GUIDED_STRATEGY_H_
#define KTUNE_SERVER_TUNING_GUIDED_STRATEGY_H_

#include <memory>
#include <vector>

#include "server/base/config.h"
#include "server/tuning/search_strategy.h"

namespace ktune {

// The budget guided uses when none is given: 20 % of the space rounded down (so no key
// measures more), at least 16 candidates (all of a space that small).
int64_t GuidedDefaultBudget(size_t space_size);

// REQUIRES: options.features is empty or has one row per config of `space`.
std::unique_ptr<SearchStrategy> NewGuidedStrategy(std::vector<Config> space,
                                                  const StrategyOptions& options);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_GUIDED_STRATEGY_H_
