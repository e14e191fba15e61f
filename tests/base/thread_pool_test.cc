#include "server/base/thread_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ktune {
namespace {

TEST(ThreadPoolTest, DestructorRunsEverythingQueuedThenJoins) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 100; ++i) pool.Run([&ran] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(ThreadPoolTest, RunsOnAllItsThreadsAtOnce) {
  std::atomic<int> started{0};
  std::atomic<int> saw_all{0};
  {
    ThreadPool pool(3);
    EXPECT_EQ(pool.threads(), 3);
    // Each task waits (up to 10 s) until all three have started: only three threads
    // running at once let every one of them see the others.
    for (int i = 0; i < 3; ++i) {
      pool.Run([&] {
        ++started;
        const absl::Time give_up = absl::Now() + absl::Seconds(10);
        while (started.load() < 3 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
        if (started.load() == 3) ++saw_all;
      });
    }
  }
  EXPECT_EQ(saw_all.load(), 3);
}

TEST(ThreadPoolTest, FewerThanOneThreadMeansOne) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.threads(), 1);
}

}  // namespace
}  // namespace ktune
