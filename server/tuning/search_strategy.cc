#include "server/tuning/search_strategy.h"

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

// Hands out a fixed order, skipping what was reported before it was handed out.
class OrderedStrategy : public SearchStrategy {
 public:
  OrderedStrategy(std::vector<Config> order, std::string name)
      : order_(std::move(order)), name_(std::move(name)) {}

  std::vector<Config> Next(size_t max) override {
    std::vector<Config> out;
    while (out.size() < max && pos_ < order_.size()) {
      const Config& c = order_[pos_++];
      if (!reported_.count(c)) out.push_back(c);
    }
    return out;
  }
  void Report(const Config& config, Outcome, double) override { reported_.insert(config); }
  int64_t Planned() const override { return static_cast<int64_t>(order_.size()); }
  std::string Name() const override { return name_; }

 private:
  std::vector<Config> order_;
  std::string name_;
  size_t pos_ = 0;
  std::set<Config> reported_;
};

// The default config moved to the front (it is the baseline every winner's speed-up is
// measured against, so a budget or a time limit must not skip it), then the space cut to
// the budget (0: all).
void DefaultFirstWithinBudget(std::vector<Config>& space, const Config& default_config,
                              int64_t budget) {
  auto d = std::find(space.begin(), space.end(), default_config);
  if (d != space.end()) std::rotate(space.begin(), d, d + 1);
  if (budget > 0 && static_cast<int64_t>(space.size()) > budget) space.resize(budget);
}

}  // namespace

std::unique_ptr<SearchStrategy> NewExhaustiveStrategy(std::vector<Config> space) {
  return std::make_unique<OrderedStrategy>(std::move(space), "exhaustive");
}

std::unique_ptr<SearchStrategy> NewRandomStrategy(std::vector<Config> space, int64_t budget,
                                                  uint64_t seed, const Config& default_config) {
  std::mt19937_64 rng(seed);
  std::shuffle(space.begin(), space.end(), rng);
  DefaultFirstWithinBudget(space, default_config, budget);
  return std::make_unique<OrderedStrategy>(std::move(space),
                                           absl::StrCat("random:", budget, ":", seed));
}

absl::StatusOr<std::unique_ptr<SearchStrategy>> NewStrategy(const std::string& name,
                                                           std::vector<Config> space,
                                                           int64_t budget, uint64_t seed,
                                                           const Config& default_config) {
  if (name == "exhaustive") {
    // The space's order, with the default config first.
    DefaultFirstWithinBudget(space, default_config, budget);
    return NewExhaustiveStrategy(std::move(space));
  }
  if (name == "random") return NewRandomStrategy(std::move(space), budget, seed, default_config);
  return absl::InvalidArgumentError(
      absl::StrCat("strategy: unknown strategy '", name, "'; expected exhaustive or random"));
}

}  // namespace ktune
