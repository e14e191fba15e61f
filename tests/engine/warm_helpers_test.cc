// WarmHelpers: the idle compiles' ktune-warm processes, for real (the built helper and
// NVRTC; no GPU), and stand-in programs that die or hang.
#include "server/engine/warm_helpers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "server/base/file.h"
#include "server/compile/cache_key.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::IsOkAndHolds;
using ::ktune::testing::NewTempDir;
using ::ktune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kHelper[] = KTUNE_BINARY_DIR "/bin/ktune-warm";

// A stand-in helper that reads nothing and never answers.
std::string HungHelper() {
  const std::string path = NewTempDir() + "/hung-warm";
  EXPECT_OK(AtomicWriteFile(path, "#!/bin/sh\nexec sleep 1000\n"));
  EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
  return path;
}

class WarmHelpersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_dir_ = NewTempDir() + "/cubins";
    ASSERT_OK_AND_ASSIGN(cache_, CubinCache::Open(cache_dir_));
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TestTemplatesDir()));
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get("tiny"));
    const TargetInfo target = *TargetFromArch("sm_90");
    ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(tmpl, DType::kF32, {{"n", 1000}},
                                                DefaultConfig(*tmpl, target), target));
    ASSERT_TRUE(bound.instance);
    request_ = BuildCompileRequest(*bound.instance);
  }

  WarmHelperOptions Options(const std::string& program) const {
    WarmHelperOptions o;
    o.program = program;
    o.cache_dir = cache_dir_;
    if (!registry_->include_dir().empty()) o.include_dirs.push_back(registry_->include_dir());
    o.max_helpers = 2;
    return o;
  }

  std::string cache_dir_;
  std::unique_ptr<CubinCache> cache_;
  std::unique_ptr<TemplateRegistry> registry_;
  CompileRequest request_;
};

TEST_F(WarmHelpersTest, WarmCompilesInAHelperWhatTheJobThenReadsFromTheCache) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WarmHelpers> helpers, WarmHelpers::Create(Options(kHelper)));
  EXPECT_EQ(helpers->started(), 0);  // none until the first Fill
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> compiler,
                       NewTemplateCompiler(*registry_, cache_.get(), "", helpers.get()));
  ASSERT_OK(compiler->Warm(request_));
  EXPECT_EQ(helpers->started(), 1);
  const std::string key = CompileCacheKey(request_, compiler->Identity());
  EXPECT_THAT(ListDir(cache_dir_), IsOkAndHolds(ElementsAre(key + ".cubin")));

  ASSERT_OK_AND_ASSIGN(CompileResult hit, compiler->Compile(request_));
  EXPECT_TRUE(hit.cache_hit);
  ASSERT_TRUE(hit.ok) << hit.log;
  // What this process's own NVRTC makes of the same program.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> own, NewTemplateCompiler(*registry_, nullptr));
  ASSERT_OK_AND_ASSIGN(CompileResult mine, own->Compile(request_));
  EXPECT_TRUE(hit.cubin == mine.cubin);
  ASSERT_EQ(hit.kernels.size(), mine.kernels.size());
  EXPECT_EQ(hit.kernels[0].lowered_name, mine.kernels[0].lowered_name);
  EXPECT_EQ(hit.kernels[0].resources.registers, mine.kernels[0].resources.registers);

  // The same helper serves the next program.
  ASSERT_OK(compiler->Warm(request_));  // cached: nothing to do
  CompileRequest other = request_;
  other.options.push_back("--use_fast_math");
  ASSERT_OK(compiler->Warm(other));
  EXPECT_EQ(helpers->started(), 1);
  EXPECT_THAT(ListDir(cache_dir_), IsOkAndHolds(::testing::SizeIs(2)));
}

TEST_F(WarmHelpersTest, AnotherCompilerIdentityIsRefusedAndNothingStored) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WarmHelpers> helpers, WarmHelpers::Create(Options(kHelper)));
  EXPECT_THAT(helpers->Fill(request_, "0123abcd", "some other compiler"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("not the parent's")));
  EXPECT_THAT(ListDir(cache_dir_), IsOkAndHolds(IsEmpty()));
}

TEST_F(WarmHelpersTest, AHelperThatDiesFailsItsFillAndTheNextStartsAnother) {
  // /bin/true exits at once: the request's frame may still fit the pipe, the answer never comes.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WarmHelpers> helpers,
                       WarmHelpers::Create(Options("/bin/true")));
  EXPECT_THAT(helpers->Fill(request_, "k1", "id"), StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT(helpers->Fill(request_, "k2", "id"), StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_EQ(helpers->started(), 2);
}

TEST_F(WarmHelpersTest, ShutdownEndsAFillThatWaitsForAHungHelper) {
  WarmHelperOptions o = Options(HungHelper());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WarmHelpers> helpers, WarmHelpers::Create(o));
  absl::Status filled;
  std::thread filling([&] { filled = helpers->Fill(request_, "k", "id"); });
  while (helpers->started() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto start = std::chrono::steady_clock::now();
  helpers->Shutdown();
  filling.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(filled, StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT(helpers->Fill(request_, "k", "id"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shut down")));
}

TEST_F(WarmHelpersTest, ATimedOutHelperIsStopped) {
  WarmHelperOptions o = Options(HungHelper());
  o.timeout_ms = 200;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WarmHelpers> helpers, WarmHelpers::Create(o));
  EXPECT_THAT(helpers->Fill(request_, "k", "id"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("ktune-warm")));
}

TEST(WarmHelpersCreateTest, AMissingProgramIsNamed) {
  WarmHelperOptions o;
  o.program = "/no/such/ktune-warm";
  o.cache_dir = NewTempDir();
  EXPECT_THAT(WarmHelpers::Create(o),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("/no/such/ktune-warm"), HasSubstr("KTUNE_WARM"))));
}

}  // namespace
}  // namespace ktune
