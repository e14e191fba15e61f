// LogLimiter (frontends/ktuned/log_limiter.h): one line per kind and interval, the held-back
// ones counted on the next.
#include "frontends/ktuned/log_limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace ktune {
namespace {

using ::testing::ElementsAre;

class LogLimiterTest : public ::testing::Test {
 protected:
  LogLimiter limiter_{absl::Seconds(10),
                      [this](const std::string& line) {
                        absl::MutexLock lock(&mu_);
                        lines_.push_back(line);
                      },
                      [this] { return now_; }};
  absl::Mutex mu_;
  std::vector<std::string> lines_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(LogLimiterTest, RepeatsWithinTheIntervalAreCountedOnTheNextLine) {
  limiter_.Log("GetKernel", "bad 1");
  now_ += absl::Seconds(3);
  limiter_.Log("GetKernel", "bad 2");
  now_ += absl::Seconds(6);
  limiter_.Log("GetKernel", "bad 3");
  now_ += absl::Seconds(1);  // 10 s after the first line
  limiter_.Log("GetKernel", "bad 4");
  now_ += absl::Seconds(10);
  limiter_.Log("GetKernel", "bad 5");
  EXPECT_THAT(lines_, ElementsAre("bad 1", "bad 4 (and 2 more like it in the last 10s, not logged)",
                                  "bad 5"));
}

TEST_F(LogLimiterTest, KindsAreLimitedApart) {
  limiter_.Log("GetKernel", "a");
  limiter_.Log("Tune", "b");
  limiter_.Log("GetKernel", "c");
  limiter_.Log("Tune", "d");
  EXPECT_THAT(lines_, ElementsAre("a", "b"));
}

TEST_F(LogLimiterTest, ManyThreadsAtOnceLogOneLine) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([this] {
      for (int i = 0; i < 1000; ++i) limiter_.Log("GetKernel", "bad");
    });
  }
  for (std::thread& t : threads) t.join();
  now_ += absl::Seconds(10);
  limiter_.Log("GetKernel", "bad");
  EXPECT_THAT(lines_,
              ElementsAre("bad", "bad (and 7999 more like it in the last 10s, not logged)"));
}

}  // namespace
}  // namespace ktune
