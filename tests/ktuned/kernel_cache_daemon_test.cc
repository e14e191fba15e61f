// KernelCache (client/lib/kernel_cache.h) against a real ktuned (KtuneServer with fakes at
// the compiler and GPU seams, the test template "tiny", a SQLite file) and the fake CUDA
// driver table: FALLBACK's default kernel at once, the tuned one after the background job,
// Prefetch through GetKernels, and the daemon going away.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "client/lib/kernel_cache.h"
#include "client/lib/ktune_client.h"
#include "frontends/ktuned/ktune_server.h"
#include "tests/client/fake_cuda_api.h"
#include "tests/ktuned/ops_testing.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::client::CachedKernel;
using ::ktune::client::KernelKey;
using ::ktune::client::Provenance;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

class KernelCacheDaemonTest : public testing::TinyServerTest {
 protected:
  void SetUp() override {
    TinyServerTest::SetUp();
    ServerOptions o = BaseOptions("unix://" + dir_ + "/ktuned.sock");
    o.gpu_factory = [](int ordinal) -> absl::StatusOr<std::unique_ptr<Gpu>> {
      if (ordinal > 0) return absl::NotFoundError("no such GPU");
      auto gpu = std::make_unique<testing::FakeGpu>();
      gpu->script = [](const std::string&) {
        absl::SleepFor(absl::Milliseconds(1));  // a job that is still running at first
        return testing::OkMeasurement(1000);
      };
      return gpu;
    };
    auto server = StartKtuneServer(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto connected = client::Connect("unix://" + dir_ + "/ktuned.sock", {});
    ASSERT_TRUE(connected.ok()) << connected.status();
    ktuned_ = std::shared_ptr<client::KtuneClient>(*std::move(connected));
    api_ = testing::FakeApi();
    testing::current_context = testing::kContext;
  }
  void TearDown() override {
    testing::current_context = nullptr;
    if (server_) server_->Shutdown();
  }

  std::unique_ptr<client::KernelCache> Cache() {
    client::KernelCacheOptions o;
    o.api = &api_;
    o.refresh_period = absl::InfiniteDuration();  // the test calls RefreshNow
    o.retry_after = absl::Milliseconds(1);
    return client::NewKernelCache(ktuned_, o);
  }
  static KernelKey Key(int64_t n) { return {"tiny", "f32", {{"n", n}}, 0}; }

  std::unique_ptr<KtuneServer> server_;
  std::shared_ptr<client::KtuneClient> ktuned_;
  client::CudaApi api_;
};

TEST_F(KernelCacheDaemonTest, FallbackFirstThenTheTunedKernel) {
  auto cache = Cache();
  absl::StatusOr<std::shared_ptr<const CachedKernel>> first = cache->Get(Key(1000));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->provenance, Provenance::kDefault);
  EXPECT_EQ((*first)->params.at("BLOCK"), 128);  // the manifest's default config
  // The background job's winner, once stored, settles it (a new kernel, or the same cubin
  // marked exact when the default config won).
  int replaced = 0;
  for (int i = 0; i < 1000 && replaced == 0; ++i) {
    replaced = cache->RefreshNow();
    if (replaced == 0) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(replaced, 1);
  absl::StatusOr<std::shared_ptr<const CachedKernel>> tuned = cache->Get(Key(1000));
  ASSERT_TRUE(tuned.ok());
  EXPECT_EQ((*tuned)->provenance, Provenance::kExact);
  EXPECT_FALSE((*tuned)->provisional());
  void* x = reinterpret_cast<void*>(0x1000);
  void* y = reinterpret_cast<void*>(0x2000);
  ASSERT_TRUE(cache->Launch(Key(1000), nullptr, {x, y, nullptr}).ok());
  EXPECT_EQ(cache->RefreshNow(), 0);
}

TEST_F(KernelCacheDaemonTest, PrefetchThroughGetKernels) {
  auto cache = Cache();
  std::vector<absl::Status> s = cache->Prefetch({Key(1000), Key(0), Key(4096)});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(s[0].ok()) << s[0];
  EXPECT_THAT(s[1], StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("tiny f32 n=0 gpu 0: shape: dim 'n' = 0")));
  EXPECT_TRUE(s[2].ok()) << s[2];
  ASSERT_TRUE(cache->Get(Key(4096)).ok());
}

TEST_F(KernelCacheDaemonTest, HeldKernelsOutliveTheDaemon) {
  auto cache = Cache();
  ASSERT_TRUE(cache->Get(Key(1000)).ok());
  server_->Shutdown();
  server_.reset();
  EXPECT_TRUE(cache->Get(Key(1000)).ok());  // held: no call
  EXPECT_EQ(cache->RefreshNow(), 0);        // no daemon: the provisional kernel stays
  EXPECT_THAT(cache->Get(Key(2000)).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("is unavailable")));
  std::vector<absl::Status> s = cache->Prefetch({Key(1000), Key(3000)});
  EXPECT_TRUE(s[0].ok());
  EXPECT_THAT(s[1], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("tiny f32 n=3000")));
}

}  // namespace
}  // namespace ktune
