// A small random forest of regression trees: the guided search strategy's model of a
// candidate's (log) time from its features.
//
// Trees and not a linear model because tuning spaces are full of thresholds and
// interactions (a vector width that only pays with enough threads per row, a tile that
// stops fitting in shared memory); trees see only the order of each feature's values, so
// raw params, knobs and launch figures need no scaling. The spread of the trees' answers
// stands in for the model's uncertainty where the space has not been measured.
//
// A plain value: Fit builds it, Predict reads it; thread-compatible.
#ifndef KTUNE_SERVER_TUNING_REGRESSION_FOREST_H_
#define KTUNE_SERVER_TUNING_REGRESSION_FOREST_H_

#include <cstdint>
#include <vector>

namespace ktune {

struct ForestOptions {
  int trees = 32;
  int max_depth = 10;
  int min_leaf = 2;  // fewest samples in a leaf
  uint64_t seed = 1;
};

struct Prediction {
  double mean = 0;
  double stddev = 0;  // across the trees
};

class RegressionForest {
 public:
  // Fits `trees` trees, each on a bootstrap sample of (x, y), splitting on a random third of
  // the features at each node. REQUIRES: x.size() == y.size(), every row the same length.
  // With no samples the forest predicts 0 with stddev 0.
  void Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
           const ForestOptions& options = {});

  Prediction Predict(const std::vector<double>& x) const;

  bool empty() const { return trees_.empty(); }

 private:
  struct Node {
    int feature = -1;  // -1: a leaf
    double threshold = 0;  // go left when x[feature] <= threshold
    int left = -1, right = -1;
    double value = 0;  // a leaf's mean
  };
  using Tree = std::vector<Node>;

  std::vector<Tree> trees_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_REGRESSION_FOREST_H_
