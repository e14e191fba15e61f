// KernelBatch (frontends/ktuned/kernel_batch.h): answers collected from any thread, handed on
// once, in order, within the response's size budget.
#include "frontends/ktuned/kernel_batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

v1::GetKernelResponse WithCubin(size_t bytes) {
  v1::GetKernelResponse r;
  r.mutable_artifact()->set_cubin(std::string(bytes, 'c'));
  return r;
}

TEST(KernelBatchTest, SizeIsChecked) {
  EXPECT_THAT(CheckKernelBatchSize(0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("requests: empty")));
  EXPECT_TRUE(CheckKernelBatchSize(1).ok());
  EXPECT_TRUE(CheckKernelBatchSize(v1::MAX_KERNELS_PER_CALL).ok());
  EXPECT_THAT(CheckKernelBatchSize(v1::MAX_KERNELS_PER_CALL + 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 256 per call")));
}

TEST(KernelBatchTest, TheLastAnswerHandsOnEveryResultInOrder) {
  std::optional<v1::GetKernelsResponse> done;
  int calls = 0;
  KernelBatch batch(64, 64 << 20, [&](v1::GetKernelsResponse r) {
    ++calls;
    done = std::move(r);
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&batch, i] {
      if (i % 2 == 0) {
        batch.Set(i, WithCubin(static_cast<size_t>(i + 1)));
      } else {
        batch.Set(i, absl::NotFoundError("requests[" + std::to_string(i) + "]: no entry"));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(calls, 1);
  ASSERT_EQ(done->results_size(), 64);
  for (int i = 0; i < 64; ++i) {
    const v1::KernelResult& r = done->results(i);
    if (i % 2 == 0) {
      EXPECT_EQ(r.code(), 0);
      EXPECT_EQ(r.response().artifact().cubin().size(), static_cast<size_t>(i + 1));
    } else {
      EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kNotFound));
      EXPECT_EQ(r.message(), "requests[" + std::to_string(i) + "]: no entry");
      EXPECT_FALSE(r.has_response());
    }
    EXPECT_FALSE(r.retry());
  }
}

// Artifacts are kept in request order while they fit; the next one is left for another call,
// and one that cannot fit alone is refused for good.
TEST(KernelBatchTest, ArtifactsPastTheBudgetAreLeftForAnotherCall) {
  std::optional<v1::GetKernelsResponse> done;
  const int64_t budget = 200 << 10;  // 200 KiB
  KernelBatch batch(4, budget, [&](v1::GetKernelsResponse r) { done = std::move(r); });
  batch.Set(3, WithCubin(10 << 10));
  batch.Set(2, WithCubin(300 << 10));  // alone above the budget
  batch.Set(1, WithCubin(100 << 10));  // does not fit after 0
  batch.Set(0, WithCubin(100 << 10));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->results(0).code(), 0);
  EXPECT_TRUE(done->results(0).has_response());
  EXPECT_EQ(done->results(1).code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(done->results(1).retry());
  EXPECT_FALSE(done->results(1).has_response());
  EXPECT_THAT(done->results(1).message(), HasSubstr("requests[1]: its artifact"));
  EXPECT_THAT(done->results(1).message(), HasSubstr("ask for it again"));
  EXPECT_EQ(done->results(2).code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(done->results(2).retry());
  EXPECT_THAT(done->results(2).message(), HasSubstr("larger than the daemon's max message"));
  EXPECT_EQ(done->results(3).code(), 0);  // small enough to fit after 0
  EXPECT_TRUE(done->results(3).has_response());
}

}  // namespace
}  // namespace ktune
