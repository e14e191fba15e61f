#include "server/tuning/regression_forest.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace ktune {
namespace {

struct Split {
  int feature = -1;
  double threshold = 0;
  double gain = 0;  // reduction of the sum of squared errors
};

// Builds one tree over the rows `rows` of (x, y); nodes are appended to `tree`.
class TreeBuilder {
 public:
  TreeBuilder(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
              const ForestOptions& options, std::mt19937_64& rng)
      : x_(x), y_(y), options_(options), rng_(rng), features_(x.empty() ? 0 : x[0].size()) {}

  template <typename Node>
  int Build(std::vector<int> rows, int depth, std::vector<Node>& tree) {
    const int id = static_cast<int>(tree.size());
    tree.emplace_back();
    double sum = 0;
    for (int r : rows) sum += y_[r];
    tree[id].value = rows.empty() ? 0 : sum / rows.size();
    if (depth >= options_.max_depth || rows.size() < 2u * options_.min_leaf) return id;
    const Split split = BestSplit(rows);
    if (split.feature < 0 || split.gain <= 1e-12) return id;
    std::vector<int> left, right;
    for (int r : rows) (x_[r][split.feature] <= split.threshold ? left : right).push_back(r);
    rows.clear();
    rows.shrink_to_fit();
    const int l = Build(std::move(left), depth + 1, tree);
    const int r = Build(std::move(right), depth + 1, tree);
    tree[id].feature = split.feature;
    tree[id].threshold = split.threshold;
    tree[id].left = l;
    tree[id].right = r;
    return id;
  }

 private:
  // The best split over a random third of the features (at least one; more when those
  // tried cannot split these rows, as a constant feature cannot), each feature's candidate
  // thresholds being the midpoints between its distinct values.
  Split BestSplit(const std::vector<int>& rows) {
    std::vector<int> order(features_);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    const size_t tried = std::max<size_t>(1, (features_ + 2) / 3);
    Split best;
    std::vector<int> sorted = rows;
    for (size_t i = 0; i < order.size() && (i < tried || best.feature < 0); ++i) {
      const int f = order[i];
      std::sort(sorted.begin(), sorted.end(), [&](int a, int b) { return x_[a][f] < x_[b][f]; });
      double total = 0, total_sq = 0;
      for (int r : sorted) {
        total += y_[r];
        total_sq += y_[r] * y_[r];
      }
      const double n = sorted.size();
      const double sse = total_sq - total * total / n;
      double left = 0, left_sq = 0;
      for (size_t k = 0; k + 1 < sorted.size(); ++k) {
        left += y_[sorted[k]];
        left_sq += y_[sorted[k]] * y_[sorted[k]];
        const double a = x_[sorted[k]][f], b = x_[sorted[k + 1]][f];
        const double nl = k + 1, nr = n - nl;
        if (a == b || nl < options_.min_leaf || nr < options_.min_leaf) continue;
        const double right = total - left, right_sq = total_sq - left_sq;
        const double split_sse =
            (left_sq - left * left / nl) + (right_sq - right * right / nr);
        if (sse - split_sse > best.gain) best = {f, (a + b) / 2, sse - split_sse};
      }
    }
    return best;
  }

  const std::vector<std::vector<double>>& x_;
  const std::vector<double>& y_;
  const ForestOptions& options_;
  std::mt19937_64& rng_;
  const size_t features_;
};

}  // namespace

void RegressionForest::Fit(const std::vector<std::vector<double>>& x,
                           const std::vector<double>& y, const ForestOptions& options) {
  trees_.clear();
  if (x.empty()) return;
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(x.size()) - 1);
  TreeBuilder builder(x, y, options, rng);
  for (int t = 0; t < options.trees; ++t) {
    std::vector<int> rows(x.size());
    for (int& r : rows) r = pick(rng);
    Tree tree;
    builder.Build(std::move(rows), 0, tree);
    trees_.push_back(std::move(tree));
  }
}

Prediction RegressionForest::Predict(const std::vector<double>& x) const {
  if (trees_.empty()) return {};
  double sum = 0, sum_sq = 0;
  for (const Tree& tree : trees_) {
    int n = 0;
    while (tree[n].feature >= 0) {
      n = x[tree[n].feature] <= tree[n].threshold ? tree[n].left : tree[n].right;
    }
    sum += tree[n].value;
    sum_sq += tree[n].value * tree[n].value;
  }
  const double k = trees_.size();
  const double mean = sum / k;
  return {mean, std::sqrt(std::max(0.0, sum_sq / k - mean * mean))};
}

}  // namespace ktune
