#include "server/base/idle_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ktune {
namespace {

// Distinct owners: their addresses.
const int kOwnerA = 1, kOwnerB = 2, kGate = 3;

// n functions that each add one to `count`.
std::vector<std::function<void()>> Counting(std::atomic<int>* count, int n) {
  std::vector<std::function<void()>> work;
  for (int i = 0; i < n; ++i) work.push_back([count] { ++*count; });
  return work;
}

// Holds the pool's only thread in a work item of owner kGate until `release`.
void Block(IdlePool& pool, absl::Notification* entered, absl::Notification* release) {
  pool.Replace(&kGate, {[entered, release] {
                 entered->Notify();
                 release->WaitForNotification();
               }});
  entered->WaitForNotification();
}

TEST(IdlePoolTest, RunsWhatIsQueuedAndCountsIt) {
  IdlePool pool(3);
  EXPECT_EQ(pool.threads(), 3);
  std::atomic<int> ran{0};
  pool.Replace(&kOwnerA, Counting(&ran, 50));
  pool.Replace(&kOwnerB, Counting(&ran, 20));
  pool.WaitUntilDone();
  EXPECT_EQ(ran.load(), 70);
  EXPECT_EQ(pool.completed(), 70);
}

TEST(IdlePoolTest, ReplaceDropsTheOwnersUnstartedWorkOnly) {
  IdlePool pool(1);
  absl::Notification entered, release;
  Block(pool, &entered, &release);
  std::atomic<int> a_old{0}, a_new{0}, b{0};
  pool.Replace(&kOwnerA, Counting(&a_old, 10));
  pool.Replace(&kOwnerB, Counting(&b, 5));
  pool.Replace(&kOwnerA, Counting(&a_new, 3));  // the next job of owner A
  release.Notify();
  pool.WaitUntilDone();
  EXPECT_EQ(a_old.load(), 0);
  EXPECT_EQ(a_new.load(), 3);
  EXPECT_EQ(b.load(), 5);
}

TEST(IdlePoolTest, EmptyReplaceClearsTheOwnersQueue) {
  IdlePool pool(1);
  absl::Notification entered, release;
  Block(pool, &entered, &release);
  std::atomic<int> ran{0};
  pool.Replace(&kOwnerA, Counting(&ran, 10));
  pool.Replace(&kOwnerA, {});
  release.Notify();
  pool.WaitUntilDone();
  EXPECT_EQ(ran.load(), 0);
}

TEST(IdlePoolTest, TakesFromTheOwnersInTurn) {
  IdlePool pool(1);
  absl::Notification entered, release;
  Block(pool, &entered, &release);
  absl::Mutex mu;
  std::string order;
  auto mark = [&](char c) {
    std::vector<std::function<void()>> work;
    for (int i = 0; i < 4; ++i) {
      work.push_back([&, c] {
        absl::MutexLock lock(&mu);
        order += c;
      });
    }
    return work;
  };
  pool.Replace(&kOwnerA, mark('a'));
  pool.Replace(&kOwnerB, mark('b'));
  release.Notify();
  pool.WaitUntilDone();
  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), 8u);
  for (size_t i = 1; i < order.size(); ++i) EXPECT_NE(order[i], order[i - 1]) << order;
}

TEST(IdlePoolTest, DestructorDropsWhatIsQueuedAndWaitsForWhatRuns) {
  auto pool = std::make_unique<IdlePool>(1);
  absl::Notification entered, release;
  std::atomic<bool> blocked_one_finished{false};
  pool->Replace(&kGate, {[&] {
                  entered.Notify();
                  release.WaitForNotification();
                  blocked_one_finished = true;
                }});
  entered.WaitForNotification();
  std::atomic<int> ran{0};
  pool->Replace(&kOwnerA, Counting(&ran, 100));
  std::thread destroy([&] { pool.reset(); });
  // The destructor drops the queue before it joins; give it the time to get there.
  absl::SleepFor(absl::Milliseconds(200));
  release.Notify();
  destroy.join();
  EXPECT_TRUE(blocked_one_finished.load());
  EXPECT_EQ(ran.load(), 0);
}

TEST(IdlePoolTest, ThreadsRunOnlyWhenTheCpuIsIdle) {
  IdlePool pool(2);
  std::atomic<int> policy{-1};
  pool.Replace(&kOwnerA, {[&policy] { policy = sched_getscheduler(0); }});
  pool.WaitUntilDone();
#ifdef SCHED_IDLE
  EXPECT_EQ(policy.load(), SCHED_IDLE);
#endif
  // The caller's own thread keeps its class.
  EXPECT_NE(sched_getscheduler(0), policy.load());
}

}  // namespace
}  // namespace ktune
