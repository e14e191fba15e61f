#include "server/tuning/regression_forest.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ktune {
namespace {

TEST(RegressionForestTest, EmptyPredictsZero) {
  RegressionForest f;
  f.Fit({}, {});
  EXPECT_TRUE(f.empty());
  EXPECT_EQ(f.Predict({1, 2}).mean, 0);
}

// A step in the first feature, noise-free; the second feature is irrelevant.
TEST(RegressionForestTest, LearnsAStepAndIgnoresAnIrrelevantFeature) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int a = 0; a < 20; ++a) {
    for (int b = 0; b < 5; ++b) {
      x.push_back({static_cast<double>(a), static_cast<double>(b)});
      y.push_back(a < 8 ? 1.0 : 3.0);
    }
  }
  RegressionForest f;
  f.Fit(x, y);
  EXPECT_NEAR(f.Predict({2, 4}).mean, 1.0, 0.2);
  EXPECT_NEAR(f.Predict({15, 0}).mean, 3.0, 0.2);
  EXPECT_LT(f.Predict({15, 0}).stddev, 0.5);
}

// Trees disagree where the samples do not reach: more spread between two far-apart clusters
// with different values than inside either.
TEST(RegressionForestTest, SpreadIsLargerBetweenTheSamples) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i < 6; ++i) {
    x.push_back({static_cast<double>(i), 0});
    y.push_back(0);
    x.push_back({static_cast<double>(100 + i), 0});
    y.push_back(10);
  }
  RegressionForest f;
  f.Fit(x, y);
  EXPECT_NEAR(f.Predict({2, 0}).mean, 0, 1.5);
  EXPECT_NEAR(f.Predict({103, 0}).mean, 10, 1.5);
  EXPECT_GE(f.Predict({50, 0}).stddev, f.Predict({2, 0}).stddev);
}

TEST(RegressionForestTest, SameSeedSameModel) {
  std::vector<std::vector<double>> x = {{1}, {2}, {3}, {4}, {5}, {6}};
  std::vector<double> y = {1, 4, 9, 16, 25, 36};
  RegressionForest a, b;
  a.Fit(x, y);
  b.Fit(x, y);
  EXPECT_EQ(a.Predict({3.5}).mean, b.Predict({3.5}).mean);
}

}  // namespace
}  // namespace ktune
