// The kernel resolver over the test template "tiny", an in-memory store, a FakeCompiler and
// a FakeGpu behind a real TuningQueue: which kernel each policy answers with.
#include "server/tuning/kernel_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/compile/compile_pool.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fakes.h"
#include "tests/testing/resolve_testing.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

// A FakeCompiler whose compiles wait until the test opens the gate.
class GatedCompiler : public testing::FakeCompiler {
 public:
  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override {
    entered.store(true);
    gate.WaitForNotification();
    return FakeCompiler::Compile(request);
  }
  std::atomic<bool> entered{false};
  absl::Notification gate;
};

// One Resolve's answer, waited for later.
struct Pending {
  absl::Notification answered;
  absl::StatusOr<ResolvedKernel> answer = absl::UnknownError("no answer");
};

class KernelResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TestTemplatesDir()));
    ASSERT_OK_AND_ASSIGN(store_, store::OpenSqliteStore(":memory:"));
    pool_ = std::make_unique<CompilePool>(&compiler_, 2);
  }
  void TearDown() override {
    resolver_.reset();
    queue_.reset();
  }

  // A resolver over one FakeGpu, or none (`with_gpu` false: a compile-only host).
  void Start(bool with_gpu) {
    KernelResolverOptions o;
    o.store = store_.get();
    o.compiler = &compiler_;
    std::vector<TuningEnv> envs;
    if (with_gpu) {
      envs.push_back({registry_.get(), &compiler_, pool_.get(), &gpu_, store_.get()});
      o.devices.push_back(*gpu_.Info());
    } else {
      o.compile_only_reason = "no CUDA driver";
    }
    queue_ = std::make_unique<TuningQueue>(std::move(envs), 8);
    o.queue = queue_.get();
    resolver_ = NewKernelResolver(std::move(o));
  }

  KernelQuery Query(int64_t n) { return testing::TinyQuery(*registry_, *resolver_, n); }

  // A compile-only resolver over the gated compiler: one FALLBACK thread, `queue` waiting.
  void StartGated(int queue) {
    KernelResolverOptions o;
    o.store = store_.get();
    o.compiler = &gated_;
    o.compile_only_reason = "no CUDA driver";
    o.threads = 1;
    o.fallback_queue = queue;
    queue_ = std::make_unique<TuningQueue>(std::vector<TuningEnv>{}, 8);
    o.queue = queue_.get();
    resolver_ = NewKernelResolver(std::move(o));
  }

  std::shared_ptr<Pending> ResolveLater(KernelQuery q, KernelPolicy policy) {
    auto p = std::make_shared<Pending>();
    resolver_->Resolve(q, policy, [p](absl::StatusOr<ResolvedKernel> r) {
      p->answer = std::move(r);
      p->answered.Notify();
    });
    return p;
  }

  static bool Wait(Pending& p) {
    return p.answered.WaitForNotificationWithTimeout(absl::Seconds(20));
  }

  // Resolves and waits for the answer.
  absl::StatusOr<ResolvedKernel> Resolve(int64_t n, KernelPolicy policy) {
    return testing::ResolveAndWait(*resolver_, Query(n), policy);
  }

  static SearchSettings Exhaustive() {
    SearchSettings s;
    s.strategy = "exhaustive";
    return s;
  }

  // Tunes `n` to completion, so the store holds its entry.
  void Tune(int64_t n) {
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<TuningJob> job, resolver_->Tune(Query(n), Exhaustive()));
    ASSERT_OK(job->Wait(absl::Now() + absl::Seconds(20)));
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<store::Store> store_;
  testing::FakeCompiler compiler_;
  GatedCompiler gated_;
  std::unique_ptr<CompilePool> pool_;
  testing::FakeGpu gpu_;
  std::unique_ptr<TuningQueue> queue_;
  std::unique_ptr<KernelResolver> resolver_;
};

TEST_F(KernelResolverTest, CacheOnlyWithoutAnEntryIsNotFound) {
  Start(/*with_gpu=*/true);
  EXPECT_THAT(Resolve(1000, KernelPolicy::kCacheOnly),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no entry for tiny f32 n=1000 on Fake GPU")));
}

TEST_F(KernelResolverTest, TuneAnswersWithTheJobsWinnerThenTheStoreServesItExactly) {
  Start(/*with_gpu=*/true);
  ASSERT_OK_AND_ASSIGN(ResolvedKernel tuned, Resolve(1000, KernelPolicy::kTune));
  EXPECT_EQ(tuned.provenance, KernelProvenance::kExact);
  EXPECT_GT(tuned.tuning_job_id, 0);
  EXPECT_FALSE(tuned.cacheable);
  EXPECT_GT(tuned.entry.id, 0);

  for (KernelPolicy p : {KernelPolicy::kCacheOnly, KernelPolicy::kTune, KernelPolicy::kFallback}) {
    ASSERT_OK_AND_ASSIGN(ResolvedKernel hit, Resolve(1000, p));
    EXPECT_EQ(hit.provenance, KernelProvenance::kExact);
    EXPECT_EQ(hit.entry.id, tuned.entry.id);
    EXPECT_FALSE(hit.stale);
    EXPECT_TRUE(hit.cacheable);
    EXPECT_EQ(hit.tuning_job_id, 0);
    EXPECT_FALSE(hit.bound.has_value());  // the query's reference gives the arguments
  }
}

TEST_F(KernelResolverTest, FallbackWithNothingStoredCompilesTheDefaultAndTunesBehind) {
  Start(/*with_gpu=*/true);
  ASSERT_OK_AND_ASSIGN(ResolvedKernel fb, Resolve(1000, KernelPolicy::kFallback));
  EXPECT_EQ(fb.provenance, KernelProvenance::kDefault);
  EXPECT_EQ(fb.entry.config.params.at("BLOCK"), 128);  // the manifest's defaults
  EXPECT_EQ(fb.entry.config.params.at("VEC"), 1);
  EXPECT_EQ(fb.entry.id, 0);
  EXPECT_FALSE(fb.entry.cubin.empty());
  EXPECT_EQ(fb.entry.key.shape, "n=1000");
  ASSERT_EQ(fb.entry.launches.size(), 1u);
  EXPECT_FALSE(fb.cacheable);
  EXPECT_GT(fb.tuning_job_id, 0);
}

TEST_F(KernelResolverTest, FallbackTakesTheNearestStoredShapeReboundForTheRequest) {
  Start(/*with_gpu=*/true);
  Tune(1024);
  Tune(65536);
  ASSERT_OK_AND_ASSIGN(ResolvedKernel fb, Resolve(2048, KernelPolicy::kFallback));
  EXPECT_EQ(fb.provenance, KernelProvenance::kNearest);
  EXPECT_EQ(fb.entry.key.shape, "n=1024");  // the neighbour's key...
  ASSERT_TRUE(fb.bound.has_value());         // ...bound for the request's shape
  EXPECT_EQ(fb.bound->shape.at("n"), 2048);
  ASSERT_EQ(fb.entry.launches.size(), 1u);
  const int64_t per_block = fb.entry.config.params.at("BLOCK") * fb.entry.config.params.at("VEC");
  EXPECT_EQ(fb.entry.launches[0].grid[0], static_cast<uint32_t>((2048 + per_block - 1) / per_block));
  EXPECT_GT(fb.tuning_job_id, 0);
}

TEST_F(KernelResolverTest, CompileOnlyRefusesToTuneButFallsBackWithoutAJob) {
  Start(/*with_gpu=*/false);
  EXPECT_THAT(Resolve(1000, KernelPolicy::kTune),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA driver")));
  EXPECT_THAT(Resolve(1000, KernelPolicy::kCacheOnly),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no single device model")));
  ASSERT_OK_AND_ASSIGN(ResolvedKernel fb, Resolve(1000, KernelPolicy::kFallback));
  EXPECT_EQ(fb.provenance, KernelProvenance::kDefault);
  EXPECT_EQ(fb.entry.config.knobs.target, "sm_90");
  EXPECT_EQ(fb.tuning_job_id, 0);  // nothing to tune on
  EXPECT_EQ(resolver_->DeviceModel(0), "");
}

// FALLBACK's compile queue used to be unbounded, compiled for callers long gone, compiled
// identical requests once each, and drained its whole backlog at shutdown.
TEST_F(KernelResolverTest, FallbackQueueIsBoundedAndIdenticalRequestsShareOneCompile) {
  StartGated(/*queue=*/1);
  std::shared_ptr<Pending> a1 = ResolveLater(Query(1000), KernelPolicy::kFallback);
  while (!gated_.entered.load()) absl::SleepFor(absl::Milliseconds(1));
  std::shared_ptr<Pending> a2 = ResolveLater(Query(1000), KernelPolicy::kFallback);  // joins a1
  std::shared_ptr<Pending> b = ResolveLater(Query(2000), KernelPolicy::kFallback);   // waits
  std::shared_ptr<Pending> c = ResolveLater(Query(3000), KernelPolicy::kFallback);   // too many
  ASSERT_TRUE(Wait(*c));
  EXPECT_THAT(c->answer, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("waiting")));
  EXPECT_FALSE(a2->answered.HasBeenNotified());
  gated_.gate.Notify();
  for (Pending* p : {a1.get(), a2.get(), b.get()}) {
    ASSERT_TRUE(Wait(*p));
    EXPECT_OK(p->answer);
  }
  EXPECT_EQ(a1->answer->entry.cubin, a2->answer->entry.cubin);
  EXPECT_EQ(gated_.calls.load(), 2);  // 1000 once, 2000 once
}

TEST_F(KernelResolverTest, FallbackSkipsACallerGoneByItsTurn) {
  StartGated(/*queue=*/4);
  std::shared_ptr<Pending> a = ResolveLater(Query(1000), KernelPolicy::kFallback);
  while (!gated_.entered.load()) absl::SleepFor(absl::Milliseconds(1));
  KernelQuery gone = Query(2000);
  gone.abandoned = [] { return true; };
  std::shared_ptr<Pending> b = ResolveLater(gone, KernelPolicy::kFallback);
  gated_.gate.Notify();
  ASSERT_TRUE(Wait(*a) && Wait(*b));
  EXPECT_OK(a->answer);
  EXPECT_THAT(b->answer, StatusIs(absl::StatusCode::kCancelled, HasSubstr("gone")));
  EXPECT_EQ(gated_.calls.load(), 1);
}

TEST_F(KernelResolverTest, StopAnswersWaitingFallbacksAtOnce) {
  StartGated(/*queue=*/4);
  std::shared_ptr<Pending> a = ResolveLater(Query(1000), KernelPolicy::kFallback);
  while (!gated_.entered.load()) absl::SleepFor(absl::Milliseconds(1));
  std::shared_ptr<Pending> b = ResolveLater(Query(2000), KernelPolicy::kFallback);
  resolver_->Stop();
  ASSERT_TRUE(b->answered.HasBeenNotified());  // answered by Stop itself, compile or not
  EXPECT_THAT(b->answer, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting down")));
  std::shared_ptr<Pending> later = ResolveLater(Query(3000), KernelPolicy::kFallback);
  ASSERT_TRUE(later->answered.HasBeenNotified());
  EXPECT_THAT(later->answer, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting")));
  gated_.gate.Notify();
  ASSERT_TRUE(Wait(*a));
  EXPECT_OK(a->answer);  // the compile that was running finishes
  EXPECT_EQ(gated_.calls.load(), 1);
}

}  // namespace
}  // namespace ktune
