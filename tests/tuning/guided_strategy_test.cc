#include "server/tuning/guided_strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

namespace ktune {
namespace {

using ::testing::HasSubstr;

// A 2-D space: X in [0, nx), Y in [0, ny).
std::vector<Config> Grid(int nx, int ny) {
  std::vector<Config> s;
  for (int x = 0; x < nx; ++x) {
    for (int y = 0; y < ny; ++y) {
      Config c;
      c.params["X"] = x;
      c.params["Y"] = y;
      s.push_back(c);
    }
  }
  return s;
}

Config At(int x, int y) {
  Config c;
  c.params["X"] = x;
  c.params["Y"] = y;
  return c;
}

using Landscape = std::function<double(const Config&)>;

struct DriveResult {
  std::vector<Config> measured;  // in hand-out order
  double best = INFINITY;
};

// Drives `s` as a tuning job does: asks for the next batch before reporting the current one.
DriveResult Drive(SearchStrategy& s, const Landscape& time, size_t batch = 8) {
  DriveResult run;
  std::vector<Config> current = s.Next(batch);
  while (!current.empty()) {
    std::vector<Config> next = s.Next(batch);
    for (const Config& c : current) {
      const double t = time(c);
      s.Report(c, t > 0 ? Outcome::kOk : Outcome::kWrongResult, t > 0 ? t : 0);
      run.measured.push_back(c);
      if (t > 0) run.best = std::min(run.best, t);
    }
    current = std::move(next);
  }
  return run;
}

// A bowl with its floor at (27, 5), steeper in Y.
double Bowl(const Config& c) {
  const double x = c.params.at("X"), y = c.params.at("Y");
  return 1000 + 4 * (x - 27) * (x - 27) + 30 * (y - 5) * (y - 5);
}

TEST(GuidedStrategyTest, FindsTheFloorOfABowlWithinItsBudget) {
  StrategyOptions o;
  o.default_config = At(0, 0);
  auto s = NewGuidedStrategy(Grid(40, 25), o);
  EXPECT_EQ(s->Planned(), 200);  // 20 % of 1000
  DriveResult run = Drive(*s, Bowl);
  EXPECT_LE(run.measured.size(), 200u);
  EXPECT_EQ(run.measured.front(), At(0, 0));
  EXPECT_LE(run.best, 1000 * 1.02);
  std::set<Config> distinct(run.measured.begin(), run.measured.end());
  EXPECT_EQ(distinct.size(), run.measured.size());
  EXPECT_FALSE(s->StopReason().empty());
}

// A stop rule outside the strategy (the job's roofline) waits for the seeds and the
// space-filling sample (a quarter of the budget, 4 to 32 candidates), and for at least 8
// candidates, or all of a smaller budget.
TEST(GuidedStrategyTest, EarlyStopsWaitForTheFirstSample) {
  EXPECT_EQ(NewGuidedStrategy(Grid(40, 25), {})->EarliestStop(), 32);  // budget 200
  EXPECT_EQ(NewGuidedStrategy(Grid(10, 18), {})->EarliestStop(), 9);   // budget 36
  EXPECT_EQ(NewGuidedStrategy(Grid(6, 8), {})->EarliestStop(), 8);     // budget 16
  EXPECT_EQ(NewGuidedStrategy(Grid(2, 2), {})->EarliestStop(), 4);     // all 4
  StrategyOptions o;
  o.budget = 3;
  EXPECT_EQ(NewGuidedStrategy(Grid(2, 2), o)->EarliestStop(), 3);
  // Exhaustive measures every candidate whatever the roofline; random may stop at any.
  EXPECT_EQ(NewExhaustiveStrategy(Grid(2, 2))->EarliestStop(),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(NewRandomStrategy(Grid(2, 2), 2, 1, At(0, 0))->EarliestStop(), 0);
}

// The model must beat luck: at the same budget, guided (median over seeds) gets nearer the
// floor of a narrow valley than uniform random samples do (median over seeds).
TEST(GuidedStrategyTest, BeatsRandomSamplingAtTheSameBudget) {
  auto valley = [](const Config& c) {
    const double x = c.params.at("X"), y = c.params.at("Y");
    return 100 + std::abs(x - 33) * 10 + std::abs(y - 17) * 10 + (x + y == 50 ? 0 : 3);
  };
  std::vector<double> guided_best, random_best;
  for (uint64_t seed = 1; seed <= 9; ++seed) {
    StrategyOptions o;
    o.budget = 40;
    o.min_gain = 0;
    o.seed = seed;
    o.default_config = At(0, 0);
    guided_best.push_back(Drive(*NewGuidedStrategy(Grid(40, 25), o), valley).best);
    random_best.push_back(Drive(*NewRandomStrategy(Grid(40, 25), 40, seed, At(0, 0)), valley).best);
  }
  std::sort(guided_best.begin(), guided_best.end());
  std::sort(random_best.begin(), random_best.end());
  EXPECT_LT(guided_best[4], random_best[4]);
  EXPECT_LE(guided_best[4], 113) << "the valley floor is 100, its neighbours 113";
}

TEST(GuidedStrategyTest, DefaultThenWarmStartThenSpread) {
  StrategyOptions o;
  o.default_config = At(3, 3);
  o.warm_start = {At(9, 9), At(99, 99) /* not in the space */, At(3, 3), At(1, 2)};
  auto s = NewGuidedStrategy(Grid(10, 10), o);
  std::vector<Config> first = s->Next(4);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first[0], At(3, 3));
  EXPECT_EQ(first[1], At(9, 9));
  EXPECT_EQ(first[2], At(1, 2));
  EXPECT_NE(first[3], At(3, 3));
}

// With nothing left to expect (every candidate as fast as the next), guided stops early and
// says so; with min_gain 0 it spends its budget.
TEST(GuidedStrategyTest, ConvergesOnAFlatLandscape) {
  StrategyOptions o;
  auto flat = [](const Config&) { return 500.0; };
  auto s = NewGuidedStrategy(Grid(40, 25), o);
  DriveResult run = Drive(*s, flat);
  EXPECT_LT(run.measured.size(), 200u);
  EXPECT_THAT(s->StopReason(), HasSubstr("converged"));

  o.min_gain = 0;
  auto t = NewGuidedStrategy(Grid(40, 25), o);
  EXPECT_EQ(Drive(*t, flat).measured.size(), 200u);
  EXPECT_EQ(t->StopReason(), "budget of 200 reached");
}

// A resumed job's trials are reported before any hand-out: they are never handed out again
// and they spend the budget.
TEST(GuidedStrategyTest, ResumedTrialsSpendTheBudget) {
  StrategyOptions o;
  o.budget = 20;
  o.min_gain = 0;
  auto s = NewGuidedStrategy(Grid(10, 10), o);
  for (int i = 0; i < 15; ++i) s->Report(At(i % 10, i / 10), Outcome::kOk, Bowl(At(i % 10, i / 10)));
  size_t handed = 0;
  for (std::vector<Config> b = s->Next(8); !b.empty(); b = s->Next(8)) {
    for (const Config& c : b) {
      EXPECT_FALSE(c.params.at("Y") == 0 || (c.params.at("Y") == 1 && c.params.at("X") < 5));
      s->Report(c, Outcome::kOk, Bowl(c));
      ++handed;
    }
  }
  EXPECT_EQ(handed, 5u);
}

TEST(GuidedStrategyTest, FailuresSteerItAwayAndTheSpaceCanRunOut) {
  // Half the space fails; the best passing point is still found.
  auto half = [](const Config& c) { return c.params.at("X") >= 5 ? -1.0 : 100.0 + c.params.at("Y"); };
  StrategyOptions o;
  o.budget = 1000;
  o.min_gain = 0;
  auto s = NewGuidedStrategy(Grid(10, 4), o);
  DriveResult run = Drive(*s, half);
  EXPECT_EQ(run.measured.size(), 40u);
  EXPECT_EQ(run.best, 100);
  EXPECT_EQ(s->StopReason(), "space exhausted");
}

// Candidates an earlier key compiled cost a measurement only: among near-equals they go
// first, but not at the price of the floor.
TEST(GuidedStrategyTest, PrefersCompiledCandidatesAmongNearEquals) {
  const std::vector<Config> space = Grid(40, 25);
  std::vector<bool> even_y;  // the floor (27, 5) and its row are not compiled
  for (const Config& c : space) even_y.push_back(c.params.at("Y") % 2 == 0);
  auto compiled_share = [&](const DriveResult& run) {
    int n = 0;
    for (const Config& c : run.measured) n += c.params.at("Y") % 2 == 0;
    return static_cast<double>(n) / run.measured.size();
  };
  auto flat = [](const Config&) { return 500.0; };
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    StrategyOptions o;
    o.min_gain = 0;
    o.seed = seed;
    const double without = compiled_share(Drive(*NewGuidedStrategy(space, o), flat));
    o.compiled = even_y;
    const double with = compiled_share(Drive(*NewGuidedStrategy(space, o), flat));
    EXPECT_GE(with, 0.8) << "seed " << seed;
    EXPECT_GT(with, without + 0.2) << "seed " << seed;
    DriveResult bowl = Drive(*NewGuidedStrategy(space, o), Bowl);
    EXPECT_LE(bowl.best, 1000 * 1.02) << "seed " << seed;
  }
}

TEST(GuidedStrategyTest, SameSeedSameOrder) {
  StrategyOptions o;
  o.seed = 5;
  DriveResult a = Drive(*NewGuidedStrategy(Grid(20, 20), o), Bowl);
  DriveResult b = Drive(*NewGuidedStrategy(Grid(20, 20), o), Bowl);
  EXPECT_EQ(a.measured, b.measured);
}

}  // namespace
}  // namespace ktune
