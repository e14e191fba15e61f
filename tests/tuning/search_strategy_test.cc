#include "server/tuning/search_strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<Config> Space(int n) {
  std::vector<Config> s;
  for (int i = 0; i < n; ++i) {
    Config c;
    c.params["X"] = i;
    s.push_back(c);
  }
  return s;
}

TEST(SearchStrategyTest, ExhaustiveHandsOutEverythingOnceInOrder) {
  auto s = NewExhaustiveStrategy(Space(5));
  EXPECT_EQ(s->Planned(), 5);
  EXPECT_EQ(s->Name(), "exhaustive");
  std::vector<Config> a = s->Next(3), b = s->Next(3), c = s->Next(3);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(a[0].params.at("X"), 0);
  EXPECT_EQ(b[1].params.at("X"), 4);
}

TEST(SearchStrategyTest, ReportedBeforeHandOutIsSkipped) {
  auto s = NewExhaustiveStrategy(Space(4));
  s->Report(Space(4)[1], Outcome::kOk, 10);
  s->Report(Space(4)[2], Outcome::kCrashed, 0);
  std::vector<Config> all = s->Next(10);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].params.at("X"), 0);
  EXPECT_EQ(all[1].params.at("X"), 3);
}

TEST(SearchStrategyTest, RandomIsSeededBudgetedAndDefaultFirst) {
  const Config def = Space(100)[42];
  auto a = NewRandomStrategy(Space(100), 10, 7, def);
  auto b = NewRandomStrategy(Space(100), 10, 7, def);
  auto c = NewRandomStrategy(Space(100), 10, 8, def);
  std::vector<Config> xa = a->Next(100), xb = b->Next(100), xc = c->Next(100);
  ASSERT_EQ(xa.size(), 10u);
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
  EXPECT_EQ(xa[0], def);
  EXPECT_EQ(xc[0], def);
  std::set<Config> distinct(xa.begin(), xa.end());
  EXPECT_EQ(distinct.size(), 10u);
  EXPECT_EQ(a->Name(), "random:10:7");
  EXPECT_EQ(NewRandomStrategy(Space(5), 10, 1, def)->Planned(), 5);
}

TEST(SearchStrategyTest, ByName) {
  StrategyOptions o;
  o.name = "exhaustive";
  o.budget = 4;
  o.default_config = Space(10)[3];
  ASSERT_OK_AND_ASSIGN(auto e, NewStrategy(Space(10), o));
  std::vector<Config> got = e->Next(10);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], o.default_config);
  EXPECT_TRUE(e->Next(10).empty());
  EXPECT_EQ(e->StopReason(), "budget of 4 reached");
  o.name = "";
  ASSERT_OK_AND_ASSIGN(auto g, NewStrategy(Space(10), o));
  EXPECT_THAT(g->Name(), HasSubstr("guided:"));
  o.name = "bayes";
  EXPECT_THAT(NewStrategy(Space(3), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown strategy 'bayes'")));
  o.name = "random";
  o.budget = -2;
  EXPECT_THAT(NewStrategy(Space(3), o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("budget")));
}

// 8000 bytes at 4000 GB/s: a bound of 2 ns. A best of 2.06 ns runs at 97.1 % of it.
TEST(SearchStrategyTest, TheRooflineStopWaitsForTheStrategy) {
  EXPECT_EQ(RooflineBoundNs(8000, 4000), 2.0);
  EXPECT_EQ(RooflineBoundNs(8000, 0), 0);
  auto random = NewRandomStrategy(Space(10), 0, 1, Config{});
  EXPECT_TRUE(ReachesRoofline(*random, 1, 2.06, 2.0, 0.97));
  EXPECT_FALSE(ReachesRoofline(*random, 1, 2.07, 2.0, 0.97));  // 96.6 %
  EXPECT_FALSE(ReachesRoofline(*random, 1, 2.0, 2.0, 0));      // the stop is off
  EXPECT_FALSE(ReachesRoofline(*random, 1, 2.0, 0, 0.97));     // no ceiling measured
  EXPECT_FALSE(ReachesRoofline(*random, 1, 0, 2.0, 0.97));     // nothing ok yet
  auto exhaustive = NewExhaustiveStrategy(Space(10));
  EXPECT_FALSE(ReachesRoofline(*exhaustive, 10, 1.0, 2.0, 0.97));
}

TEST(SearchStrategyTest, ExhaustiveSaysWhyItStopped) {
  auto s = NewExhaustiveStrategy(Space(3));
  EXPECT_EQ(s->StopReason(), "");
  s->Next(10);
  EXPECT_EQ(s->StopReason(), "space exhausted");
}

}  // namespace
}  // namespace ktune
