#include "server/compile/compile_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Ge;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::Le;

// A Compiler that compiles nothing: it counts calls, tracks how many run at once (each
// holds its slot for hold / (1 + its name expressions)), and returns an ok result whose "cubin" is
// the request's source name; a source name starting with "fail" gives kInternal instead.
class FakeCompiler : public Compiler {
 public:
  explicit FakeCompiler(std::chrono::milliseconds hold) : hold_(hold) {}

  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override {
    ++calls_;
    const int now = ++active_;
    for (int seen = max_active_.load();
         now > seen && !max_active_.compare_exchange_weak(seen, now);) {
    }
    // More name expressions hold for less, so results complete out of request order.
    std::this_thread::sleep_for(hold_ / (1 + request.name_expressions.size()));
    --active_;
    if (request.source_name.rfind("fail", 0) == 0) {
      return absl::InternalError(absl::StrCat("fake: ", request.source_name));
    }
    CompileResult r;
    r.ok = true;
    r.cubin = request.source_name;
    r.key = request.source_name;
    return r;
  }
  std::string Identity() const override { return "fake"; }
  std::string Version() const override { return "0.0"; }

  int calls() const { return calls_.load(); }
  int max_active() const { return max_active_.load(); }

 private:
  const std::chrono::milliseconds hold_;
  std::atomic<int> calls_{0};
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
};

// Request i is named "r<i>" and carries i % 4 name expressions, so it holds the fake for
// hold / (1 + i % 4): within each run of four, later requests finish sooner.
std::vector<CompileRequest> Requests(int n) {
  std::vector<CompileRequest> out;
  for (int i = 0; i < n; ++i) {
    CompileRequest r;
    r.source_name = absl::StrCat("r", i);
    r.name_expressions.assign(static_cast<size_t>(i % 4), "k");
    out.push_back(std::move(r));
  }
  return out;
}

TEST(CompilePoolTest, CompileAllKeepsRequestOrderAndRunsInParallel) {
  FakeCompiler fake(std::chrono::milliseconds(60));
  CompilePool pool(&fake, 3);
  EXPECT_EQ(pool.threads(), 3);
  std::vector<absl::StatusOr<CompileResult>> results = pool.CompileAll(Requests(12));
  ASSERT_EQ(results.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK(results[i]);
    EXPECT_TRUE(results[i]->ok);
    EXPECT_EQ(results[i]->cubin, absl::StrCat("r", i));
  }
  EXPECT_EQ(fake.calls(), 12);
  EXPECT_THAT(fake.max_active(), AllOf(Gt(1), Le(3)));
}

TEST(CompilePoolTest, ErrorsPassThroughInPlace) {
  FakeCompiler fake(std::chrono::milliseconds(1));
  CompilePool pool(&fake, 3);
  std::vector<CompileRequest> requests = Requests(5);
  requests[2].source_name = "fail-2";
  std::vector<absl::StatusOr<CompileResult>> results = pool.CompileAll(std::move(requests));
  ASSERT_EQ(results.size(), 5u);
  EXPECT_THAT(results[2], StatusIs(absl::StatusCode::kInternal, HasSubstr("fake: fail-2")));
  for (int i : {0, 1, 3, 4}) {
    ASSERT_OK(results[i]);
    EXPECT_EQ(results[i]->cubin, absl::StrCat("r", i));
  }
}

TEST(CompilePoolTest, DestructorFinishesQueuedWork) {
  FakeCompiler fake(std::chrono::milliseconds(10));
  std::vector<std::future<absl::StatusOr<CompileResult>>> futures;
  {
    CompilePool pool(&fake, 3);
    for (CompileRequest& r : Requests(20)) futures.push_back(pool.Submit(std::move(r)));
  }
  EXPECT_EQ(fake.calls(), 20);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(0)), std::future_status::ready) << i;
    absl::StatusOr<CompileResult> r = futures[i].get();
    ASSERT_OK(r);
    EXPECT_EQ(r->cubin, absl::StrCat("r", i));
  }
}

TEST(CompilePoolTest, SubmitFromManyThreads) {
  FakeCompiler fake(std::chrono::milliseconds(1));
  CompilePool pool(&fake, 2);
  std::vector<std::thread> submitters;
  std::vector<std::vector<std::future<absl::StatusOr<CompileResult>>>> futures(4);
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        CompileRequest r;
        r.source_name = absl::StrCat("t", t, "-", i);
        futures[t].push_back(pool.Submit(std::move(r)));
      }
    });
  }
  for (std::thread& s : submitters) s.join();
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 10; ++i) {
      absl::StatusOr<CompileResult> r = futures[t][i].get();
      ASSERT_OK(r);
      EXPECT_EQ(r->cubin, absl::StrCat("t", t, "-", i));
    }
  }
  EXPECT_EQ(fake.calls(), 40);
}

TEST(CompilePoolTest, NonPositiveThreadsMeansOnePerCore) {
  FakeCompiler fake(std::chrono::milliseconds(0));
  CompilePool pool(&fake, 0);
  EXPECT_THAT(pool.threads(), Ge(1));
  EXPECT_EQ(pool.threads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_THAT(pool.CompileAll({}), ::testing::IsEmpty());
}

}  // namespace
}  // namespace ktune
