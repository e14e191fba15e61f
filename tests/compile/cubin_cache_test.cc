#include "server/compile/cubin_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/base/file.h"
#include "server/compile/cache_key.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/templates/instance.h"
#include "server/templates/registry.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fakes.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::NewTempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

// The tiny template (f32, n = 1000) at its defaults on sm_90, fast math as given.
absl::StatusOr<CompileRequest> TinyRequest(const TemplateRegistry& registry,
                                           bool fast_math = false) {
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> tmpl = registry.Get("tiny");
  if (!tmpl.ok()) return tmpl.status();
  const TargetInfo target = *TargetFromArch("sm_90");
  Config config = DefaultConfig(**tmpl, target);
  config.knobs.fast_math = fast_math;
  absl::StatusOr<BindResult> bound = Bind(*tmpl, DType::kF32, {{"n", 1000}}, config, target);
  if (!bound.ok()) return bound.status();
  if (!bound->instance) return absl::InternalError(bound->rejected_because);
  return BuildCompileRequest(*bound->instance);
}

CompileRequest BrokenRequest() {
  CompileRequest r;
  r.source = "template <int N> __global__ void broken(float* p) { p[0] = N +; }\n";
  r.source_name = "broken.cu";
  r.name_expressions = {"broken<1>"};
  r.options = {"--gpu-architecture=sm_90"};
  return r;
}

void ExpectSameResources(const KernelResources& a, const KernelResources& b) {
  EXPECT_EQ(a.mangled_name, b.mangled_name);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.registers, b.registers);
  EXPECT_EQ(a.barriers, b.barriers);
  EXPECT_EQ(a.static_smem, b.static_smem);
  EXPECT_EQ(a.const_bytes, b.const_bytes);
  EXPECT_EQ(a.local_bytes, b.local_bytes);
  EXPECT_EQ(a.stack_frame, b.stack_frame);
  EXPECT_EQ(a.spill_stores, b.spill_stores);
  EXPECT_EQ(a.spill_loads, b.spill_loads);
  EXPECT_EQ(a.ptxas_ms, b.ptxas_ms);  // exact: the JSON keeps doubles round-trip
}

// Everything but compile_ms and cache_hit.
void ExpectSameResult(const CompileResult& a, const CompileResult& b) {
  EXPECT_EQ(a.ok, b.ok);
  EXPECT_TRUE(a.cubin == b.cubin) << "cubins differ";
  EXPECT_EQ(a.log, b.log);
  EXPECT_EQ(a.key, b.key);
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    EXPECT_EQ(a.kernels[i].name_expression, b.kernels[i].name_expression);
    EXPECT_EQ(a.kernels[i].lowered_name, b.kernels[i].lowered_name);
    ExpectSameResources(a.kernels[i].resources, b.kernels[i].resources);
  }
}

class CubinCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_dir_ = absl::StrCat(NewTempDir(), "/cubins");  // Open creates it
    ASSERT_OK_AND_ASSIGN(cache_, CubinCache::Open(cache_dir_));
    ASSERT_OK_AND_ASSIGN(registry_, LoadTemplateRegistry(testing::TestTemplatesDir()));
    ASSERT_OK_AND_ASSIGN(compiler_, NewTemplateCompiler(*registry_, cache_.get()));
  }

  std::string PathFor(const std::string& key) const {
    return absl::StrCat(cache_dir_, "/", key, ".cubin");
  }

  std::string cache_dir_;
  std::unique_ptr<CubinCache> cache_;
  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<Compiler> compiler_;
};

TEST_F(CubinCacheTest, OpenCreatesThePrivateFolder) {
  struct stat st;
  ASSERT_EQ(::stat(cache_dir_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(cache_->dir(), cache_dir_);
}

TEST_F(CubinCacheTest, SecondCompileIsAHitWithTheSameResult) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  ASSERT_OK_AND_ASSIGN(CompileResult first, compiler_->Compile(request));
  ASSERT_TRUE(first.ok) << first.log;
  EXPECT_FALSE(first.cache_hit);
  EXPECT_EQ(first.key, CompileCacheKey(request, compiler_->Identity()));
  EXPECT_THAT(first.cubin, StartsWith("\x7f"
                                      "ELF"));
  ASSERT_THAT(first.kernels, SizeIs(1));
  EXPECT_GT(first.kernels[0].resources.registers, 0);
  EXPECT_THAT(ListDir(cache_dir_),
              ::ktune::testing::IsOkAndHolds(ElementsAre(absl::StrCat(first.key, ".cubin"))));

  ASSERT_OK_AND_ASSIGN(CompileResult second, compiler_->Compile(request));
  EXPECT_TRUE(second.cache_hit);
  ExpectSameResult(first, second);

  // A new compiler over the same folder (another process, later) hits too.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> other,
                       NewTemplateCompiler(*registry_, cache_.get()));
  ASSERT_OK_AND_ASSIGN(CompileResult third, other->Compile(request));
  EXPECT_TRUE(third.cache_hit);
  ExpectSameResult(first, third);
}

TEST_F(CubinCacheTest, FailedCompileIsCachedToo) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> nvrtc, NewNvrtcCompiler(NvrtcOptions{}));
  std::unique_ptr<Compiler> compiler = NewCachingCompiler(std::move(nvrtc), cache_.get());
  ASSERT_OK_AND_ASSIGN(CompileResult first, compiler->Compile(BrokenRequest()));
  EXPECT_FALSE(first.ok);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_THAT(first.log, HasSubstr("error"));
  ASSERT_OK_AND_ASSIGN(CompileResult second, compiler->Compile(BrokenRequest()));
  EXPECT_TRUE(second.cache_hit);
  EXPECT_FALSE(second.ok);
  EXPECT_THAT(second.cubin, IsEmpty());
  ExpectSameResult(first, second);
}

// A FakeCompiler whose compiles wait for `release`.
class GatedCompiler : public testing::FakeCompiler {
 public:
  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override {
    entered.Notify();
    release.WaitForNotification();
    return FakeCompiler::Compile(request);
  }
  absl::Notification entered;
  absl::Notification release;
};

TEST_F(CubinCacheTest, ConcurrentCompilesOfOneKeyCompileItOnce) {
  auto gated = std::make_unique<GatedCompiler>();
  GatedCompiler* inner = gated.get();
  std::unique_ptr<Compiler> compiler = NewCachingCompiler(std::move(gated), cache_.get());
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  absl::StatusOr<CompileResult> first, other[3];
  std::thread compiling([&] { first = compiler->Compile(request); });
  inner->entered.WaitForNotification();
  std::vector<std::thread> waiting;
  for (auto& r : other) waiting.emplace_back([&] { r = compiler->Compile(request); });
  absl::SleepFor(absl::Milliseconds(200));  // the three reach the wait for the first's result
  inner->release.Notify();
  compiling.join();
  for (std::thread& t : waiting) t.join();
  EXPECT_EQ(inner->calls.load(), 1);
  ASSERT_OK(first.status());
  EXPECT_FALSE(first->cache_hit);
  for (const auto& r : other) {
    ASSERT_OK(r.status());
    EXPECT_TRUE(r->cache_hit);
    EXPECT_EQ(r->cubin, first->cubin);
  }
  // The next compile of the key reads the cache.
  ASSERT_OK_AND_ASSIGN(CompileResult again, compiler->Compile(request));
  EXPECT_TRUE(again.cache_hit);
  EXPECT_EQ(inner->calls.load(), 1);
}

// A FakeCompiler whose first compile waits for `release`; later ones do not.
class FirstGatedCompiler : public testing::FakeCompiler {
 public:
  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override {
    if (!first_taken.exchange(true)) {
      entered.Notify();
      release.WaitForNotification();
    }
    return FakeCompiler::Compile(request);
  }
  std::atomic<bool> first_taken{false};
  absl::Notification entered;
  absl::Notification release;
};

// What ktune-warm does, in this process: compiles with a compiler of its own and stores the
// result under the caller's key. With `gated`, each Fill first waits for `release`.
class FakeFiller : public CacheFiller {
 public:
  FakeFiller(const CubinCache* cache, bool gated) : cache_(cache), gated_(gated) {}
  absl::Status Fill(const CompileRequest& request, const std::string& key,
                    const std::string& identity) override {
    ++fills;
    last_identity = identity;
    if (gated_) {
      entered.Notify();
      release.WaitForNotification();
    }
    if (!fail.ok()) return fail;
    absl::StatusOr<CompileResult> result = compiler.Compile(request);
    if (!result.ok()) return result.status();
    result->key = key;
    return cache_->Put(key, *result);
  }
  testing::FakeCompiler compiler;
  std::atomic<int> fills{0};
  std::string last_identity;
  absl::Status fail = absl::OkStatus();
  absl::Notification entered;
  absl::Notification release;

 private:
  const CubinCache* cache_;
  const bool gated_;
};

TEST_F(CubinCacheTest, WarmFillsTheCacheForALaterCompile) {
  auto fake = std::make_unique<testing::FakeCompiler>();
  testing::FakeCompiler* inner = fake.get();
  FakeFiller filler(cache_.get(), /*gated=*/false);
  std::unique_ptr<Compiler> compiler = NewCachingCompiler(std::move(fake), cache_.get(), &filler);
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  ASSERT_OK(compiler->Warm(request));
  EXPECT_EQ(filler.fills.load(), 1);
  EXPECT_EQ(filler.last_identity, compiler->Identity());
  EXPECT_EQ(inner->calls.load(), 0);  // the filler compiled it, not this compiler
  const std::string key = CompileCacheKey(request, compiler->Identity());
  EXPECT_THAT(ListDir(cache_dir_),
              ::ktune::testing::IsOkAndHolds(ElementsAre(absl::StrCat(key, ".cubin"))));
  ASSERT_OK_AND_ASSIGN(CompileResult later, compiler->Compile(request));
  EXPECT_TRUE(later.cache_hit);
  EXPECT_EQ(later.key, key);
  EXPECT_EQ(inner->calls.load(), 0);
  // A cached key warms to nothing.
  ASSERT_OK(compiler->Warm(request));
  EXPECT_EQ(filler.fills.load(), 1);
}

TEST_F(CubinCacheTest, CompileDoesNotWaitForAWarmOfTheSameKey) {
  auto fake = std::make_unique<testing::FakeCompiler>();
  testing::FakeCompiler* inner = fake.get();
  FakeFiller filler(cache_.get(), /*gated=*/true);
  std::unique_ptr<Compiler> compiler = NewCachingCompiler(std::move(fake), cache_.get(), &filler);
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  absl::Status warmed;
  std::thread warming([&] { warmed = compiler->Warm(request); });
  filler.entered.WaitForNotification();
  // The warm holds the key; a job's compile of it goes ahead instead of waiting (a helper
  // runs at idle priority, behind every busy core).
  ASSERT_OK_AND_ASSIGN(CompileResult compiled, compiler->Compile(request));
  EXPECT_TRUE(compiled.ok);
  EXPECT_FALSE(compiled.cache_hit);
  EXPECT_EQ(inner->calls.load(), 1);
  filler.release.Notify();
  warming.join();
  ASSERT_OK(warmed);
  ASSERT_OK_AND_ASSIGN(CompileResult hit, compiler->Compile(request));
  EXPECT_TRUE(hit.cache_hit);
  EXPECT_EQ(hit.cubin, compiled.cubin);
}

TEST_F(CubinCacheTest, WarmOfAKeyBeingCompiledFillsNothing) {
  auto gated = std::make_unique<FirstGatedCompiler>();
  FirstGatedCompiler* inner = gated.get();
  FakeFiller filler(cache_.get(), /*gated=*/false);
  std::unique_ptr<Compiler> compiler =
      NewCachingCompiler(std::move(gated), cache_.get(), &filler);
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  absl::StatusOr<CompileResult> compiled;
  std::thread compiling([&] { compiled = compiler->Compile(request); });
  inner->entered.WaitForNotification();
  ASSERT_OK(compiler->Warm(request));  // returns at once: the compile in flight fills the cache
  inner->release.Notify();
  compiling.join();
  ASSERT_OK(compiled.status());
  EXPECT_EQ(inner->calls.load(), 1);
  EXPECT_EQ(filler.fills.load(), 0);
}

TEST_F(CubinCacheTest, WarmPassesTheFillersErrorOn) {
  FakeFiller filler(cache_.get(), /*gated=*/false);
  filler.fail = absl::InternalError("ktune-warm: planted");
  std::unique_ptr<Compiler> compiler =
      NewCachingCompiler(std::make_unique<testing::FakeCompiler>(), cache_.get(), &filler);
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  EXPECT_THAT(compiler->Warm(request),
              ::ktune::testing::StatusIs(absl::StatusCode::kInternal, HasSubstr("planted")));
  EXPECT_THAT(ListDir(cache_dir_), ::ktune::testing::IsOkAndHolds(IsEmpty()));
  // The key is free again: a later warm tries once more.
  filler.fail = absl::OkStatus();
  ASSERT_OK(compiler->Warm(request));
  EXPECT_EQ(filler.fills.load(), 2);
}

TEST_F(CubinCacheTest, WithoutAFillerWarmCompilesNothing) {
  auto fake = std::make_unique<testing::FakeCompiler>();
  testing::FakeCompiler* inner = fake.get();
  std::unique_ptr<Compiler> compiler = NewCachingCompiler(std::move(fake), cache_.get());
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  ASSERT_OK(compiler->Warm(request));
  EXPECT_EQ(inner->calls.load(), 0);
  EXPECT_THAT(ListDir(cache_dir_), ::ktune::testing::IsOkAndHolds(IsEmpty()));
}

TEST(CompilerWarmTest, ACompilerWithoutACacheWarmsNothing) {
  testing::FakeCompiler compiler;
  ASSERT_OK(compiler.Warm(CompileRequest{}));
  EXPECT_EQ(compiler.calls.load(), 0);
}

TEST_F(CubinCacheTest, CachedSaysWhetherACompileWouldBeAnswered) {
  auto gated = std::make_unique<GatedCompiler>();
  GatedCompiler* inner = gated.get();
  std::unique_ptr<Compiler> compiler = NewCachingCompiler(std::move(gated), cache_.get());
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  ASSERT_OK_AND_ASSIGN(CompileRequest other, TinyRequest(*registry_, /*fast_math=*/true));
  const std::string key = CompileCacheKey(request, compiler->Identity());
  const std::string other_key = CompileCacheKey(other, compiler->Identity());
  EXPECT_FALSE(compiler->Cached(key));
  // Under way: a Compile of it now waits for that one's result.
  absl::StatusOr<CompileResult> first;
  std::thread compiling([&] { first = compiler->Compile(request); });
  inner->entered.WaitForNotification();
  EXPECT_TRUE(compiler->Cached(key));
  EXPECT_FALSE(compiler->Cached(other_key));
  inner->release.Notify();
  compiling.join();
  ASSERT_OK(first.status());
  // Stored: another compiler over the same folder (a later key, another process) sees it.
  EXPECT_TRUE(compiler->Cached(key));
  std::unique_ptr<Compiler> later =
      NewCachingCompiler(std::make_unique<testing::FakeCompiler>(), cache_.get());
  EXPECT_TRUE(later->Cached(key));
  EXPECT_FALSE(later->Cached(other_key));
  EXPECT_EQ(inner->calls.load(), 1);  // asking compiles nothing
}

// A template's keyer (its source hashed once) gives every candidate the key its compile
// request has.
TEST_F(CubinCacheTest, TemplateKeyerGivesEachCandidatesRequestKey) {
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const KernelTemplate> tmpl, registry_->Get("tiny"));
  const TargetInfo target = *TargetFromArch("sm_90");
  const Shape shape = {{"n", 1000}};
  ASSERT_OK_AND_ASSIGN(SearchSpace space, EnumerateSearchSpace(tmpl, DType::kF32, shape, target));
  const CompileCacheKeyer keyer = TemplateKeyer(*tmpl);
  const std::string identity = compiler_->Identity();
  std::set<std::string> keys;
  for (const Config& c : space.configs) {
    ASSERT_OK_AND_ASSIGN(BindResult bound, Bind(tmpl, DType::kF32, shape, c, target));
    ASSERT_TRUE(bound.instance) << bound.rejected_because;
    const std::string key = keyer.Key(bound.instance->NameExpressions(),
                                      bound.instance->CompileOptions(), identity);
    EXPECT_EQ(key, CompileCacheKey(BuildCompileRequest(*bound.instance), identity))
        << ConfigString(c);
    keys.insert(key);
  }
  EXPECT_EQ(keys.size(), space.configs.size());  // one program per candidate
}

TEST(CompilerCachedTest, ACompilerWithoutACacheHasNothing) {
  testing::FakeCompiler compiler;
  EXPECT_FALSE(compiler.Cached(CompileCacheKey(CompileRequest{}, compiler.Identity())));
}

TEST_F(CubinCacheTest, ErrorsAreNotCached) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  request.name_expressions.clear();
  EXPECT_THAT(compiler_->Compile(request),
              ::ktune::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("no name expression")));
  EXPECT_THAT(ListDir(cache_dir_), ::ktune::testing::IsOkAndHolds(IsEmpty()));
}

// Damages the entry for `request` with `damage`, then checks the next compile is a miss
// that rewrites the entry, and the one after a hit again.
void ExpectDamageIsAMiss(Compiler* compiler, const CompileRequest& request, const std::string& path,
                         const std::function<void(std::string*)>& damage) {
  ASSERT_OK_AND_ASSIGN(CompileResult first, compiler->Compile(request));
  ASSERT_TRUE(first.ok) << first.log;
  ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(path));
  damage(&bytes);
  ASSERT_OK(AtomicWriteFile(path, bytes));

  ASSERT_OK_AND_ASSIGN(CompileResult again, compiler->Compile(request));
  EXPECT_FALSE(again.cache_hit);
  EXPECT_TRUE(again.cubin == first.cubin);
  ASSERT_OK_AND_ASSIGN(std::string rewritten, ReadFile(path));
  EXPECT_TRUE(rewritten != bytes) << "the damaged entry was not rewritten";

  ASSERT_OK_AND_ASSIGN(CompileResult hit, compiler->Compile(request));
  EXPECT_TRUE(hit.cache_hit);
  EXPECT_TRUE(hit.cubin == first.cubin);
}

TEST_F(CubinCacheTest, FlippedBytesInTheCubinAreAMiss) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  const std::string path = PathFor(CompileCacheKey(request, compiler_->Identity()));
  ExpectDamageIsAMiss(compiler_.get(), request, path, [](std::string* b) {
    // Well past the one-line header: inside the cubin.
    ASSERT_GT(b->size(), 4000u);
    for (size_t i = b->size() - 2000; i < b->size() - 1990; ++i) (*b)[i] ^= 0x5a;
  });
}

TEST_F(CubinCacheTest, FlippedBytesInTheMiddleAreAMiss) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  const std::string path = PathFor(CompileCacheKey(request, compiler_->Identity()));
  ExpectDamageIsAMiss(compiler_.get(), request, path,
                      [](std::string* b) { (*b)[b->size() / 2] ^= 0x01; });
}

TEST_F(CubinCacheTest, TruncatedFileIsAMiss) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  const std::string path = PathFor(CompileCacheKey(request, compiler_->Identity()));
  ExpectDamageIsAMiss(compiler_.get(), request, path,
                      [](std::string* b) { b->resize(b->size() - 1); });
}

TEST_F(CubinCacheTest, TruncatedHeaderIsAMiss) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  const std::string path = PathFor(CompileCacheKey(request, compiler_->Identity()));
  ExpectDamageIsAMiss(compiler_.get(), request, path,
                      [](std::string* b) { b->resize(b->find('\n') / 2); });
}

TEST_F(CubinCacheTest, DamagedHeaderFieldNameIsAMiss) {
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  const std::string path = PathFor(CompileCacheKey(request, compiler_->Identity()));
  ExpectDamageIsAMiss(compiler_.get(), request, path, [](std::string* b) {
    const size_t at = b->find("\"registers\":");
    ASSERT_LT(at, b->find('\n', b->find('\n') + 1));  // in the header line, after the digest
    (*b)[at + 9] = 'z';
  });
}

// The header (registers, log) is covered by the file's digest as much as the cubin is.
TEST_F(CubinCacheTest, DamagedHeaderValueIsAMiss) {
  // The header's values (the registers, the log) are what the tuner reads beside the
  // cubin: a flipped digit there must not come back as a hit either.
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*registry_));
  const std::string path = PathFor(CompileCacheKey(request, compiler_->Identity()));
  ExpectDamageIsAMiss(compiler_.get(), request, path, [](std::string* b) {
    const size_t at = b->find("\"registers\":");
    ASSERT_LT(at, b->find('\n', b->find('\n') + 1));  // in the header line, after the digest
    char& digit = (*b)[at + 12];
    ASSERT_TRUE(digit >= '1' && digit <= '9') << b->substr(at, 20);
    digit = digit == '9' ? '8' : digit + 1;
  });
}

TEST_F(CubinCacheTest, EntryOfAnotherKeyIsAMiss) {
  // A file renamed (or copied) under another key does not answer for it.
  ASSERT_OK_AND_ASSIGN(CompileRequest plain, TinyRequest(*registry_, /*fast_math=*/false));
  ASSERT_OK_AND_ASSIGN(CompileRequest fast, TinyRequest(*registry_, /*fast_math=*/true));
  ASSERT_OK_AND_ASSIGN(CompileResult a, compiler_->Compile(plain));
  ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(PathFor(a.key)));
  const std::string fast_key = CompileCacheKey(fast, compiler_->Identity());
  ASSERT_OK(AtomicWriteFile(PathFor(fast_key), bytes));
  EXPECT_FALSE(cache_->Get(fast_key).has_value());
  ASSERT_OK_AND_ASSIGN(CompileResult b, compiler_->Compile(fast));
  EXPECT_FALSE(b.cache_hit);
}

TEST_F(CubinCacheTest, GarbageFileIsAMissAndRemoved) {
  const std::string key(64, 'a');
  ASSERT_OK(AtomicWriteFile(PathFor(key), "not a cache entry"));
  EXPECT_FALSE(cache_->Get(key).has_value());
  EXPECT_THAT(ReadFile(PathFor(key)),
              ::ktune::testing::StatusIs(absl::StatusCode::kNotFound, HasSubstr(key)));
  EXPECT_FALSE(cache_->Get(std::string(64, 'b')).has_value());  // no file at all
}

TEST_F(CubinCacheTest, DifferentOptionIsADifferentKey) {
  ASSERT_OK_AND_ASSIGN(CompileRequest plain, TinyRequest(*registry_, /*fast_math=*/false));
  ASSERT_OK_AND_ASSIGN(CompileRequest fast, TinyRequest(*registry_, /*fast_math=*/true));
  ASSERT_THAT(fast.options, ::testing::Contains("--use_fast_math"));
  ASSERT_OK_AND_ASSIGN(CompileResult a, compiler_->Compile(plain));
  ASSERT_OK_AND_ASSIGN(CompileResult b, compiler_->Compile(fast));
  EXPECT_FALSE(a.cache_hit);
  EXPECT_FALSE(b.cache_hit);
  EXPECT_NE(a.key, b.key);
  EXPECT_THAT(ListDir(cache_dir_), ::ktune::testing::IsOkAndHolds(SizeIs(2)));
}

TEST(CubinCacheIdentityTest, SharedHeaderChangeChangesIdentityAndKey) {
  const std::string root = NewTempDir();
  ASSERT_NO_FATAL_FAILURE(testing::WriteTiny(root));
  ASSERT_OK(MakeDirs(absl::StrCat(root, "/include/ktune")));
  const std::string header = absl::StrCat(root, "/include/ktune/shared.cuh");
  ASSERT_OK(AtomicWriteFile(header, "#define KTUNE_SHARED 1\n"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CubinCache> cache,
                       CubinCache::Open(NewTempDir()));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> before, LoadTemplateRegistry(root));
  ASSERT_EQ(before->include_dir(), absl::StrCat(root, "/include"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> c1, NewTemplateCompiler(*before, cache.get()));
  ASSERT_OK_AND_ASSIGN(CompileRequest request, TinyRequest(*before));
  ASSERT_OK_AND_ASSIGN(CompileResult r1, c1->Compile(request));
  ASSERT_TRUE(r1.ok) << r1.log;

  // The same bytes again: same identity, a hit.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> same, NewTemplateCompiler(*before, cache.get()));
  EXPECT_EQ(same->Identity(), c1->Identity());
  ASSERT_OK_AND_ASSIGN(CompileResult r_same, same->Compile(request));
  EXPECT_TRUE(r_same.cache_hit);

  ASSERT_OK(AtomicWriteFile(header, "#define KTUNE_SHARED 2\n"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> after, LoadTemplateRegistry(root));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> c2, NewTemplateCompiler(*after, cache.get()));
  EXPECT_NE(c2->Identity(), c1->Identity());
  ASSERT_OK_AND_ASSIGN(CompileRequest request2, TinyRequest(*after));
  // The request itself is unchanged (tiny.cu does not include the header); only the
  // compiler's identity moves the key.
  EXPECT_EQ(request2.source, request.source);
  EXPECT_EQ(request2.options, request.options);
  EXPECT_NE(CompileCacheKey(request2, c2->Identity()), r1.key);
  ASSERT_OK_AND_ASSIGN(CompileResult r2, c2->Compile(request2));
  EXPECT_FALSE(r2.cache_hit);
  EXPECT_NE(r2.key, r1.key);

  // A new header file counts as much as a changed one.
  ASSERT_OK(AtomicWriteFile(absl::StrCat(root, "/include/ktune/more.cuh"), "\n"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TemplateRegistry> more, LoadTemplateRegistry(root));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Compiler> c3, NewTemplateCompiler(*more, cache.get()));
  EXPECT_NE(c3->Identity(), c2->Identity());
  EXPECT_NE(c3->Identity(), c1->Identity());
}

}  // namespace
}  // namespace ktune
