#include "server/tuning/tuning_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fakes.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::OkMeasurement;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

class TuningQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto registry = LoadTemplateRegistry(testing::TestTemplatesDir());
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    auto store = store::OpenSqliteStore(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    pool_ = std::make_unique<CompilePool>(&compiler_, 2);
    request_.template_name = "tiny";
    request_.dtype = DType::kF32;
    request_.shape = {{"n", 1000}};
    request_.search.budget = 4;
  }
  void TearDown() override {
    Release();  // never leave a worker blocked in the script
    queue_.reset();
  }

  void Release() {
    if (!gate_.HasBeenNotified()) gate_.Notify();
  }
  void StartQueue(int capacity) {
    queue_ = std::make_unique<TuningQueue>(
        std::vector<TuningEnv>{{registry_.get(), &compiler_, pool_.get(), &gpu_, store_.get()}},
        capacity);
  }
  // GPU 0 (gpu_) and GPU 1 (other_gpu_), of the device models `models`.
  void StartTwoGpuQueue(std::vector<std::string> models) {
    queue_ = std::make_unique<TuningQueue>(
        std::vector<TuningEnv>{{registry_.get(), &compiler_, pool_.get(), &gpu_, store_.get()},
                               {registry_.get(), &compiler_, pool_.get(), &other_gpu_,
                                store_.get()}},
        64, nullptr, std::move(models));
  }
  // Bounded, so a job that never reaches the gate fails the test instead of hanging it.
  void WaitUntilStarted() {
    absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!started_ && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    ASSERT_TRUE(started_) << "no measurement reached the gate in 20 s";
  }
  // Two jobs asking for GPU 0: n=1000, running once GPU 0 measures (held by GateTheGpu), then
  // n=2000 queued behind it. Null on an error (reported).
  std::pair<std::shared_ptr<TuningJob>, std::shared_ptr<TuningJob>> TwoJobsForGpu0() {
    absl::StatusOr<std::shared_ptr<TuningJob>> a = queue_->Submit(request_, 0);
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return {};
    WaitUntilStarted();
    TuneRequest second = request_;
    second.shape = {{"n", 2000}};
    absl::StatusOr<std::shared_ptr<TuningJob>> b = queue_->Submit(second, 0);
    EXPECT_TRUE(b.ok()) << b.status();
    return {*a, b.ok() ? *b : nullptr};
  }
  // Both GPUs of a two-GPU queue: whichever measures first holds every measurement until
  // gate_ is notified (job n=1000 stays running wherever it landed: GPU 1, idle, may take it
  // before GPU 0 does); the other answers at once. `held_` says which GPU holds.
  void GateWhicheverGpuMeasuresFirst() {
    for (testing::FakeGpu* self : {&gpu_, &other_gpu_}) {
      self->script = [this, self](const std::string&) {
        testing::FakeGpu* none = nullptr;
        held_.compare_exchange_strong(none, self);
        if (held_.load() != self) return OkMeasurement(900);
        started_ = true;
        gate_.WaitForNotification();
        return OkMeasurement(1000);
      };
    }
  }
  // A script that holds every measurement until gate_ is notified.
  void GateTheGpu() {
    gpu_.script = [this](const std::string&) {
      started_ = true;
      gate_.WaitForNotification();
      return OkMeasurement(1000);
    };
  }

  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<store::Store> store_;
  testing::FakeCompiler compiler_;
  std::unique_ptr<CompilePool> pool_;
  testing::FakeGpu gpu_;
  testing::FakeGpu other_gpu_;  // GPU 1 where a test starts two
  TuneRequest request_;
  absl::Notification gate_;
  std::atomic<bool> started_{false};
  std::atomic<testing::FakeGpu*> held_{nullptr};
  std::unique_ptr<TuningQueue> queue_;
};

TEST_F(TuningQueueTest, IdenticalSubmitsShareOneJob) {
  GateTheGpu();
  StartQueue(64);
  std::vector<std::shared_ptr<TuningJob>> jobs(20);
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&, i] {
      auto job = queue_->Submit(request_, 0);
      ASSERT_TRUE(job.ok()) << job.status();
      jobs[i] = *job;
    });
  }
  for (auto& t : threads) t.join();
  Release();
  std::vector<absl::StatusOr<TuneResult>> results;
  for (auto& job : jobs) {
    ASSERT_NE(job, nullptr);
    EXPECT_EQ(job->id(), jobs[0]->id());
    results.push_back(job->Wait());
  }
  EXPECT_EQ(gpu_.problems, 1);  // exactly one RunTuning
  for (auto& r : results) {
    ASSERT_OK(r.status());
    EXPECT_EQ(r->entry.id, results[0]->entry.id);
    EXPECT_EQ(r->entry.config, results[0]->entry.config);
  }
}

TEST_F(TuningQueueTest, ProgressReachesSubscribers) {
  StartQueue(64);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<TuningJob> job, queue_->Submit(request_, 0));
  // The job may have started; late subscribers get what is left, so gate nothing here but
  // check the events that do arrive are well formed.
  std::vector<JobProgress> events;
  absl::Mutex mu;
  job->Subscribe([&](const JobProgress& e) {
    absl::MutexLock lock(&mu);
    events.push_back(e);
  });
  ASSERT_OK_AND_ASSIGN(TuneResult r, job->Wait());
  absl::MutexLock lock(&mu);
  for (const JobProgress& e : events) {
    EXPECT_EQ(e.job_id, job->id());
    EXPECT_EQ(e.total, 4);
    EXPECT_EQ(e.last_outcome, "ok");
    EXPECT_FALSE(e.best_params.empty());
  }
  EXPECT_TRUE(job->finished());
  bool called = false;
  job->OnDone([&](const absl::StatusOr<TuneResult>& r2) {
    called = true;
    EXPECT_EQ(r2->entry.id, r.entry.id);
  });
  EXPECT_TRUE(called);
}

TEST_F(TuningQueueTest, FullQueueIsResourceExhausted) {
  GateTheGpu();
  StartQueue(1);
  ASSERT_OK_AND_ASSIGN(auto running, queue_->Submit(request_, 0));
  WaitUntilStarted();  // running, so not queued
  TuneRequest second = request_;
  second.shape = {{"n", 2000}};
  ASSERT_OK_AND_ASSIGN(auto queued, queue_->Submit(second, 0));
  TuneRequest third = request_;
  third.shape = {{"n", 3000}};
  EXPECT_THAT(queue_->Submit(third, 0),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("tuning queue is full (1 jobs)")));
  // Joining a queued job needs no room.
  ASSERT_OK_AND_ASSIGN(auto joined, queue_->Submit(second, 0));
  EXPECT_EQ(joined.get(), queued.get());
  EXPECT_THAT(queue_->Submit(request_, 1), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gpu")));
  Release();
  EXPECT_OK(running->Wait().status());
  EXPECT_OK(queued->Wait().status());
}

TEST_F(TuningQueueTest, DifferentKeysRunOneAfterAnother) {
  std::atomic<int> inflight{0}, most{0};
  gpu_.script = [&](const std::string&) {
    most = std::max(most.load(), ++inflight);
    absl::SleepFor(absl::Milliseconds(1));
    --inflight;
    return OkMeasurement(1000);
  };
  StartQueue(64);
  TuneRequest second = request_;
  second.shape = {{"n", 2000}};
  ASSERT_OK_AND_ASSIGN(auto a, queue_->Submit(request_, 0));
  ASSERT_OK_AND_ASSIGN(auto b, queue_->Submit(second, 0));
  EXPECT_NE(a->id(), b->id());
  ASSERT_OK_AND_ASSIGN(TuneResult ra, a->Wait());
  ASSERT_OK_AND_ASSIGN(TuneResult rb, b->Wait());
  EXPECT_EQ(gpu_.problems, 2);
  EXPECT_EQ(most.load(), 1);
  EXPECT_NE(ra.entry.id, rb.entry.id);
  EXPECT_EQ(rb.entry.key.shape, "n=2000");
  // FIFO: the first was stored first.
  EXPECT_LE(ra.entry.created_unix_ms, rb.entry.created_unix_ms);
}

// Two GPUs of one device model: while one is busy, the other takes the job waiting for it
// (both jobs ask for GPU 0; the first may already have been taken by GPU 1).
TEST_F(TuningQueueTest, AnIdleGpuOfTheSameModelTakesTheJobWaitingForAnother) {
  GateWhicheverGpuMeasuresFirst();
  StartTwoGpuQueue({"m", "m"});
  auto [a, b] = TwoJobsForGpu0();
  ASSERT_TRUE(a && b);
  ASSERT_OK_AND_ASSIGN(TuneResult rb, b->Wait(absl::Now() + absl::Seconds(20)));
  EXPECT_EQ(rb.entry.key.shape, "n=2000");
  testing::FakeGpu* free_gpu = held_.load() == &gpu_ ? &other_gpu_ : &gpu_;
  EXPECT_GT(free_gpu->measures, 0);
  Release();
  EXPECT_OK(a->Wait().status());
}

// Another model's GPU never takes the job.
TEST_F(TuningQueueTest, AnotherModelsGpuLeavesTheJob) {
  GateTheGpu();
  other_gpu_.script = [](const std::string&) { return OkMeasurement(900); };
  StartTwoGpuQueue({"m", "another"});
  auto [a, b] = TwoJobsForGpu0();
  ASSERT_TRUE(a && b);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(queue_->queued(), 1);
  Release();
  EXPECT_OK(a->Wait().status());
  EXPECT_OK(b->Wait().status());
  EXPECT_EQ(other_gpu_.measures, 0);
}

// A GPU that finds itself unusable on a job it took gives the job back, and it runs where
// it was asked for.
TEST_F(TuningQueueTest, AnUnusableGpuGivesTheJobBack) {
  GateTheGpu();
  other_gpu_.info_status = absl::UnavailableError("GPU 1 fell off the bus");
  StartTwoGpuQueue({"m", "m"});
  auto [a, b] = TwoJobsForGpu0();
  ASSERT_TRUE(a && b);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(queue_->queued(), 1);  // taken by GPU 1, given back
  Release();
  EXPECT_OK(a->Wait().status());
  ASSERT_OK_AND_ASSIGN(TuneResult rb, b->Wait());
  EXPECT_EQ(rb.entry.key.shape, "n=2000");
  EXPECT_EQ(other_gpu_.measures, 0);
}

TEST_F(TuningQueueTest, WaitDeadlineLeavesTheJobRunning) {
  GateTheGpu();
  StartQueue(64);
  ASSERT_OK_AND_ASSIGN(auto job, queue_->Submit(request_, 0));
  EXPECT_THAT(job->Wait(absl::Now() + absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("goes on")));
  Release();
  EXPECT_OK(job->Wait().status());
}

TEST_F(TuningQueueTest, ShutdownCancelsAndLeavesTheJobResumable) {
  gpu_.script = [&](const std::string&) {
    started_ = true;
    absl::SleepFor(absl::Milliseconds(2));
    return OkMeasurement(1000);
  };
  request_.search.budget = 0;  // the whole space: far longer than the test waits
  StartQueue(64);
  ASSERT_OK_AND_ASSIGN(auto running, queue_->Submit(request_, 0));
  TuneRequest second = request_;
  second.shape = {{"n", 2000}};
  ASSERT_OK_AND_ASSIGN(auto queued, queue_->Submit(second, 0));
  WaitUntilStarted();
  queue_->Shutdown();
  EXPECT_THAT(running->Wait(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("after")));
  EXPECT_THAT(queued->Wait(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("shutting down")));
  EXPECT_EQ(gpu_.problems, 1);
  ASSERT_OK_AND_ASSIGN(std::vector<store::Job> abandoned,
                       store_->ListJobs(store::JobState::kAbandoned));
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].key.shape, "n=1000");
  EXPECT_GT(abandoned[0].done, 0);
  EXPECT_LT(abandoned[0].done, abandoned[0].total);
  EXPECT_THAT(queue_->Submit(request_, 0), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting down")));
}

}  // namespace
}  // namespace ktune
