// KernelCache (client/lib/kernel_cache.h) against the fake ktuned of fake_ktune_service.h and
// a fake CUDA driver table: one ask per key, hits from memory, a FALLBACK kernel replaced by
// the tuned one in the background, Prefetch in one GetKernels call, a missing daemon.
#include "client/lib/kernel_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "tests/client/fake_cuda_api.h"
#include "tests/client/fake_ktune_service.h"
#include "tests/testing/status_matchers.h"

namespace ktune::client {
namespace {

using ::ktune::testing::current_context;
using ::ktune::testing::Driver;
using ::ktune::testing::FakeApi;
using ::ktune::testing::FakeKtuned;
using ::ktune::testing::kContext;
using ::ktune::testing::SetCubin;
using ::ktune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// An artifact of one launch of `kernel` over buffers x, out and a scalar n.
v1::KernelArtifact Artifact(const std::string& kernel, v1::Provenance provenance, int64_t n) {
  v1::KernelArtifact a;
  SetCubin(a, "cubin of " + kernel);
  v1::KernelLaunch* l = a.add_launches();
  l->set_lowered_name(kernel);
  for (uint32_t g : {1u, 1u, 1u}) l->add_grid(g);
  for (uint32_t b : {128u, 1u, 1u}) l->add_block(b);
  for (int i : {0, 1, 2}) l->add_args(i);
  l->set_programmatic(true);  // launched so only where the cache's options say
  for (const char* name : {"x", "out"}) {
    v1::KernelArg* arg = a.add_args();
    arg->set_name(name);
    arg->set_is_buffer(true);
    arg->set_dtype("f32");
    arg->set_count(n);
  }
  v1::KernelArg* count = a.add_args();
  count->set_name("n");
  count->set_scalar_type("i32");
  count->set_int_value(n);
  a.set_provenance(provenance);
  a.set_template_id("tiny");
  a.set_dtype("f32");
  return a;
}

KernelKey Key(int64_t n) { return {"tiny", "f32", {{"n", n}}, 0}; }

class KernelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = FakeApi();
    current_context = kContext;
    Driver().ClearLaunches();
  }
  void TearDown() override { current_context = nullptr; }

  // The fake's handlers: GetKernel answers `first` (a DEFAULT kernel) for any key and counts
  // the asks; GetKernels answers CACHE_ONLY keys with the tuned kernel once `tuned` is set
  // (NOT_FOUND before), other policies as GetKernel; n = 13 is a bad key.
  void Serve() {
    daemon_.service().get_kernel = [this](grpc::ServerContext*, const v1::GetKernelRequest& r,
                                          v1::GetKernelResponse* response) {
      ++asks_;
      policies_.push_back(r.policy());
      return Answer(r, response);
    };
    daemon_.service().get_kernels = [this](grpc::ServerContext*, const v1::GetKernelsRequest& r,
                                           v1::GetKernelsResponse* response) {
      ++batches_;
      for (int i = 0; i < r.requests_size(); ++i) {
        const v1::GetKernelRequest& key = r.requests(i);
        v1::KernelResult* result = response->add_results();
        grpc::Status s = key.policy() == v1::CACHE_ONLY ? Poll(key, result->mutable_response())
                                                        : Answer(key, result->mutable_response());
        if (!s.ok()) {
          result->clear_response();
          result->set_code(s.error_code());
          // As ktuned names a key: "requests[i].field: ..." for a bad field, else ": ".
          const char* sep = s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? "." : ": ";
          result->set_message("requests[" + std::to_string(i) + "]" + sep + s.error_message());
        }
      }
      return grpc::Status::OK;
    };
    ASSERT_TRUE(daemon_.Start());
    auto client = Connect(daemon_.target(), {});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::shared_ptr<KtuneClient>(*std::move(client));
  }
  grpc::Status Answer(const v1::GetKernelRequest& r, v1::GetKernelResponse* response) {
    const int64_t n = r.shape().at("n");
    if (n == 13)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "shape: dim 'n' = 13 is unlucky");
    *response->mutable_artifact() = Artifact("k_default", v1::DEFAULT, n);
    return grpc::Status::OK;
  }
  grpc::Status Poll(const v1::GetKernelRequest& r, v1::GetKernelResponse* response) {
    if (!tuned_) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry");
    // The default config may win its tune: the same cubin, now exact.
    *response->mutable_artifact() =
        Artifact(default_won_ ? "k_default" : "k_tuned", v1::EXACT, r.shape().at("n"));
    return grpc::Status::OK;
  }
  std::unique_ptr<KernelCache> Cache(absl::Duration refresh = absl::InfiniteDuration()) {
    KernelCacheOptions o;
    o.api = &api_;
    o.refresh_period = refresh;
    return NewKernelCache(client_, o);
  }
  std::vector<std::string> Launched() {
    std::lock_guard<std::mutex> lock(Driver().mu);
    return Driver().launched;
  }

  CudaApi api_;
  FakeKtuned daemon_;
  std::shared_ptr<KtuneClient> client_;
  std::atomic<int> asks_{0};
  std::atomic<int> batches_{0};
  std::atomic<bool> tuned_{false};
  std::atomic<bool> default_won_{false};
  std::vector<int> policies_;
};

TEST_F(KernelCacheTest, FirstCallAsksFallbackLaterCallsAreHits) {
  Serve();
  auto cache = Cache();
  float* x = reinterpret_cast<float*>(0x1000);
  float* out = reinterpret_cast<float*>(0x2000);
  void* stream = reinterpret_cast<void*>(0x5);
  absl::StatusOr<std::shared_ptr<const CachedKernel>> first = cache->Get(Key(1000));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->provenance, Provenance::kDefault);
  EXPECT_TRUE((*first)->provisional());
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::shared_ptr<const CachedKernel>> again = cache->Get(Key(1000));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->get(), first->get());  // the same loaded kernel
  }
  ASSERT_TRUE(cache->Launch(Key(1000), stream, {x, out, nullptr}).ok());
  EXPECT_EQ(asks_, 1);
  EXPECT_THAT(policies_, ElementsAre(v1::FALLBACK));
  EXPECT_THAT(Launched(), ElementsAre("k_default"));
  EXPECT_EQ(Driver().streams.back(), stream);
  // The buffers as given, the scalar n packed once at load (i32 in the low bytes).
  EXPECT_EQ(Driver().params.back()[0], 0x1000u);
  EXPECT_EQ(Driver().params.back()[1], 0x2000u);
  EXPECT_EQ(Driver().params.back()[2] & 0xffffffffu, 1000u);
  // Another shape is another key.
  ASSERT_TRUE(cache->Get(Key(2000)).ok());
  EXPECT_EQ(asks_, 2);
}

TEST_F(KernelCacheTest, ItsLoadOptionsDecideProgrammaticLaunches) {
  Serve();
  for (bool programmatic : {false, true}) {
    KernelCacheOptions o;
    o.api = &api_;
    o.refresh_period = absl::InfiniteDuration();
    o.load.programmatic = programmatic;
    auto cache = NewKernelCache(client_, o);
    ASSERT_OK(cache->Launch(Key(1000), nullptr, {reinterpret_cast<void*>(0x1000),
                                                 reinterpret_cast<void*>(0x2000), nullptr}));
    std::lock_guard<std::mutex> lock(Driver().mu);
    ASSERT_FALSE(Driver().programmatic.empty());
    EXPECT_EQ(Driver().programmatic.back(), programmatic);
  }
}

TEST_F(KernelCacheTest, ABufferOffItsAlignmentIsRefusedBeforeTheDriver) {
  // A kernel's vector load at a misaligned address would fault and end the context; the
  // launch is refused, naming the buffer, and the kernel stays usable.
  daemon_.service().get_kernel = [](grpc::ServerContext*, const v1::GetKernelRequest& r,
                                    v1::GetKernelResponse* response) {
    v1::KernelArtifact a = Artifact("k_aligned", v1::DEFAULT, r.shape().at("n"));
    a.mutable_args(0)->set_alignment(16);
    a.mutable_args(1)->set_alignment(4);
    *response->mutable_artifact() = a;
    return grpc::Status::OK;
  };
  ASSERT_TRUE(daemon_.Start());
  auto client = Connect(daemon_.target(), {});
  ASSERT_TRUE(client.ok()) << client.status();
  client_ = std::shared_ptr<KtuneClient>(*std::move(client));
  auto cache = Cache();
  void* x = reinterpret_cast<void*>(0x1000);
  void* out = reinterpret_cast<void*>(0x2000);
  auto at = [](uintptr_t address) { return reinterpret_cast<void*>(address); };
  EXPECT_THAT(cache->Launch(Key(1000), nullptr, {at(0x1002), out, nullptr}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'x' (arg 0) at 0x1002 is not 16-byte aligned")));
  EXPECT_THAT(cache->Launch(Key(1000), nullptr, {at(0x1008), out, nullptr}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'x'")));
  EXPECT_THAT(cache->Launch(Key(1000), nullptr, {x, at(0x2002), nullptr}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'out' (arg 1) at 0x2002 is not 4-byte aligned")));
  EXPECT_TRUE(Launched().empty());
  // Within each buffer's alignment: launched.
  ASSERT_TRUE(cache->Launch(Key(1000), nullptr, {x, at(0x2004), nullptr}).ok());
  EXPECT_THAT(Launched(), ElementsAre("k_aligned"));
  EXPECT_EQ(Driver().params.back()[1], 0x2004u);
}

TEST_F(KernelCacheTest, ManyThreadsAskingOneNewKeyAskOnce) {
  Serve();
  auto cache = Cache();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      current_context = kContext;
      if (cache->Get(Key(4096)).ok()) ++ok;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok, 16);
  EXPECT_EQ(asks_, 1);
}

// The background check asks CACHE_ONLY for the provisional kernels, in one GetKernels call,
// and installs the tuned one when ktuned has it; hits never ask.
TEST_F(KernelCacheTest, TheTunedKernelReplacesTheFallbackInTheBackground) {
  Serve();
  auto cache = Cache(absl::Milliseconds(10));
  ASSERT_TRUE(cache->Get(Key(1000)).ok());
  ASSERT_TRUE(cache->Get(Key(2000)).ok());
  ASSERT_TRUE(cache
                  ->Launch(Key(1000), nullptr,
                           {reinterpret_cast<void*>(0x10), reinterpret_cast<void*>(0x20), nullptr})
                  .ok());
  const int batches_before = batches_;
  tuned_ = true;
  std::shared_ptr<const CachedKernel> now;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::shared_ptr<const CachedKernel>> k = cache->Get(Key(1000));
    ASSERT_TRUE(k.ok());
    now = *k;
    if (now->provenance == Provenance::kExact) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(now->provenance, Provenance::kExact);
  EXPECT_FALSE(now->provisional());
  EXPECT_EQ(now->kernel->context(), kContext);  // loaded into the cache's context
  ASSERT_TRUE(cache
                  ->Launch(Key(1000), nullptr,
                           {reinterpret_cast<void*>(0x10), reinterpret_cast<void*>(0x20), nullptr})
                  .ok());
  EXPECT_THAT(Launched(), ElementsAre("k_default", "k_tuned"));
  EXPECT_GT(batches_, batches_before);
  EXPECT_EQ(asks_, 2);  // only the two first calls
}

TEST_F(KernelCacheTest, RefreshNowReplacesOnlyWhatKtunedHasTuned) {
  Serve();
  auto cache = Cache();
  ASSERT_TRUE(cache->Get(Key(1000)).ok());
  EXPECT_EQ(cache->RefreshNow(), 0);  // NOT_FOUND: still tuning
  EXPECT_EQ((*cache->Get(Key(1000)))->provenance, Provenance::kDefault);
  tuned_ = true;
  EXPECT_EQ(cache->RefreshNow(), 1);
  EXPECT_EQ((*cache->Get(Key(1000)))->provenance, Provenance::kExact);
  EXPECT_EQ(cache->RefreshNow(), 0);
}

TEST_F(KernelCacheTest, ADefaultConfigThatWinsIsSettledWithoutAReload) {
  Serve();
  auto cache = Cache();
  absl::StatusOr<std::shared_ptr<const CachedKernel>> first = cache->Get(Key(1000));
  ASSERT_TRUE(first.ok());
  const int loaded = Driver().modules_loaded;
  tuned_ = true;
  default_won_ = true;
  EXPECT_EQ(cache->RefreshNow(), 1);
  absl::StatusOr<std::shared_ptr<const CachedKernel>> now = cache->Get(Key(1000));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ((*now)->provenance, Provenance::kExact);
  EXPECT_EQ((*now)->kernel, (*first)->kernel);  // the same loaded module and functions
  EXPECT_EQ(Driver().modules_loaded, loaded);
  EXPECT_EQ(cache->RefreshNow(), 0);  // nothing provisional is left to ask about
}

TEST_F(KernelCacheTest, PrefetchAsksEveryMissingKeyInOneCall) {
  Serve();
  auto cache = Cache();
  ASSERT_TRUE(cache->Get(Key(1000)).ok());
  std::vector<absl::Status> statuses =
      cache->Prefetch({Key(1000), Key(2000), Key(13), Key(3000), Key(2000)});
  ASSERT_EQ(statuses.size(), 5u);
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_THAT(statuses[2], StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("tiny f32 n=13 gpu 0: shape: dim 'n' = 13")));
  EXPECT_TRUE(statuses[3].ok());
  EXPECT_TRUE(statuses[4].ok());
  EXPECT_EQ(batches_, 1);
  EXPECT_EQ(asks_, 1);  // only the Get before
  // Prefetched keys are hits; the bad key's error is remembered, not asked again.
  ASSERT_TRUE(cache->Get(Key(3000)).ok());
  EXPECT_THAT(cache->Get(Key(13)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n=13")));
  EXPECT_EQ(asks_, 1);
  EXPECT_EQ(batches_, 1);
}

TEST_F(KernelCacheTest, AMissingDaemonGivesAClearStatusAndIsNotAskedOnEveryCall) {
  auto client = Connect("unix:///nonexistent/ktune/ktuned.sock", {});
  ASSERT_TRUE(client.ok());
  KernelCacheOptions o;
  o.api = &api_;
  o.refresh_period = absl::Milliseconds(5);  // the background check finds no daemon either
  auto cache = NewKernelCache(std::shared_ptr<KtuneClient>(*std::move(client)), o);
  absl::StatusOr<std::shared_ptr<const CachedKernel>> k = cache->Get(Key(1000));
  EXPECT_THAT(k.status(), StatusIs(absl::StatusCode::kUnavailable,
                                   HasSubstr("ktuned at unix:///nonexistent/ktune/ktuned.sock")));
  EXPECT_THAT(k.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("tiny f32 n=1000")));
  // Remembered: the next calls answer at once with the same status.
  const absl::Time start = absl::Now();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(cache->Get(Key(1000)).status(), k.status());
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_THAT(cache->Launch(Key(1000), nullptr, {}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("ktuned at")));
  std::vector<absl::Status> statuses = cache->Prefetch({Key(1), Key(2)});
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("tiny f32 n=1")));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("tiny f32 n=2")));
  absl::SleepFor(absl::Milliseconds(20));  // a few background periods pass harmlessly
}

TEST_F(KernelCacheTest, AFailedAskIsRetriedAfterRetryAfter) {
  Serve();
  KernelCacheOptions o;
  o.api = &api_;
  o.refresh_period = absl::InfiniteDuration();
  o.retry_after = absl::Milliseconds(50);
  auto cache = NewKernelCache(client_, o);
  EXPECT_FALSE(cache->Get(Key(13)).ok());
  EXPECT_FALSE(cache->Get(Key(13)).ok());
  EXPECT_EQ(asks_, 1);
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_FALSE(cache->Get(Key(13)).ok());
  EXPECT_EQ(asks_, 2);
}

TEST_F(KernelCacheTest, NoCurrentContextIsFailedPrecondition) {
  Serve();
  auto cache = Cache();
  current_context = nullptr;
  EXPECT_THAT(cache->Get(Key(1000)).status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                       HasSubstr("no current CUDA context")));
}

TEST(KernelKeyTest, KeyStringNamesEveryPart) {
  EXPECT_EQ(KeyString({"rmsnorm", "bf16", {{"tokens", 8}, {"hidden", 4096}}, 1}),
            "rmsnorm bf16 hidden=4096,tokens=8 gpu 1");
}

}  // namespace
}  // namespace ktune::client
