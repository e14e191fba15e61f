#include "server/tuning/search_strategy.h"

#include <algorithm>
#include <limits>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "server/base/echo.h"
#include "server/base/status_macros.h"
#include "server/tuning/guided_strategy.h"

namespace ktune {
namespace {

// Hands out a fixed order, skipping what was reported before it was handed out. With
// `every_candidate` no rule outside it ends the search early (exhaustive's promise).
class OrderedStrategy : public SearchStrategy {
 public:
  OrderedStrategy(std::vector<Config> order, std::string name, bool every_candidate)
      : order_(std::move(order)), name_(std::move(name)), every_candidate_(every_candidate) {}

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
  std::string StopReason() const override {
    if (pos_ < order_.size()) return "";
    return order_.size() < space_size_ ? absl::StrCat("budget of ", order_.size(), " reached")
                                       : "space exhausted";
  }
  int64_t EarliestStop() const override {
    return every_candidate_ ? std::numeric_limits<int64_t>::max() : 0;
  }
  void set_space_size(size_t n) { space_size_ = n; }

 private:
  std::vector<Config> order_;
  std::string name_;
  bool every_candidate_;
  size_t pos_ = 0;
  size_t space_size_ = 0;
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
  const size_t n = space.size();
  auto s = std::make_unique<OrderedStrategy>(std::move(space), "exhaustive",
                                             /*every_candidate=*/true);
  s->set_space_size(n);
  return s;
}

std::unique_ptr<SearchStrategy> NewRandomStrategy(std::vector<Config> space, int64_t budget,
                                                  uint64_t seed, const Config& default_config) {
  std::mt19937_64 rng(seed);
  std::shuffle(space.begin(), space.end(), rng);
  const size_t n = space.size();
  DefaultFirstWithinBudget(space, default_config, budget);
  auto s = std::make_unique<OrderedStrategy>(
      std::move(space), absl::StrCat("random:", budget, ":", seed), /*every_candidate=*/false);
  s->set_space_size(n);
  return s;
}

double RooflineBoundNs(int64_t bytes, double copy_gbps) {
  return copy_gbps > 0 ? static_cast<double>(bytes) / copy_gbps : 0;  // bytes per GB/s is ns
}

bool ReachesRoofline(const SearchStrategy& strategy, int64_t measured, double best_ns,
                     double bound_ns, double stop) {
  return stop > 0 && bound_ns > 0 && best_ns > 0 && measured >= strategy.EarliestStop() &&
         bound_ns / best_ns >= stop;
}

absl::Status CheckStrategyName(const std::string& name) {
  if (name.empty() || name == "guided" || name == "exhaustive" || name == "random") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("strategy: unknown strategy ", Echo(name),
                                                "; expected guided, exhaustive or random"));
}

absl::StatusOr<std::unique_ptr<SearchStrategy>> NewStrategy(std::vector<Config> space,
                                                           const StrategyOptions& options) {
  KTUNE_RETURN_IF_ERROR(CheckStrategyName(options.name));
  if (options.budget < 0) return absl::InvalidArgumentError("budget: must be >= 0");
  if (options.name == "exhaustive") {
    // The space's order, with the default config first.
    const size_t n = space.size();
    DefaultFirstWithinBudget(space, options.default_config, options.budget);
    auto s = NewExhaustiveStrategy(std::move(space));
    static_cast<OrderedStrategy*>(s.get())->set_space_size(n);
    return s;
  }
  if (options.name == "random") {
    return NewRandomStrategy(std::move(space), options.budget, options.seed,
                             options.default_config);
  }
  return NewGuidedStrategy(std::move(space), options);
}

}  // namespace ktune
