// OpenEngine: what ktuned and `ktune tune` both open. It needs no GPU or driver; each part
// that cannot be opened is named with the flag or folder behind it.
#include "server/engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <memory>
#include <string>

#include "server/base/file.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::NewTempDir;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::NotNull;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    testing::WriteTiny(dir_ + "/templates");
  }

  EngineOptions Options() const {
    EngineOptions o;
    o.templates_dir = dir_ + "/templates";
    o.db = dir_ + "/ktune.db";
    o.cache_dir = dir_ + "/cubins";
    o.worker = dir_ + "/no-such-worker";
    o.compile_threads = 1;
    return o;
  }

  std::string dir_;
};

TEST_F(EngineTest, OpensCompileOnlyWithoutAGpu) {
  absl::StatusOr<std::unique_ptr<Engine>> e = OpenEngine(Options());
  ASSERT_OK(e);
  Engine& engine = **e;
  EXPECT_EQ(engine.db_path, dir_ + "/ktune.db");
  EXPECT_TRUE(engine.registry->Get("tiny").ok());
  EXPECT_THAT(engine.store, NotNull());
  EXPECT_THAT(engine.cache, NotNull());
  EXPECT_THAT(engine.compiler, NotNull());
  EXPECT_THAT(engine.pool, NotNull());
  EXPECT_FALSE(engine.compiler->Version().empty());
  EXPECT_TRUE(IsDir(dir_ + "/cubins"));
  // A tuning env over no GPU yet: the daemon's queue fills the GPU in per worker.
  const TuningEnv env = engine.Env(nullptr);
  EXPECT_EQ(env.registry, engine.registry.get());
  EXPECT_EQ(env.pool, engine.pool.get());
  EXPECT_EQ(env.store, engine.store.get());
  // The GPU is reached only through the factory; with no worker program there is none.
  ASSERT_TRUE(engine.gpu_factory);
  absl::StatusOr<std::unique_ptr<Gpu>> gpu = engine.gpu_factory(0);
  if (gpu.ok()) {
    EXPECT_FALSE((*gpu)->Info().ok());
  }
}

// Precompiled headers: auto turns them on from kAutoMinThreads compile threads (the
// 16-core host's gain, the 2-core machine's loss), their state in a private scratch folder
// that goes with the engine.
TEST_F(EngineTest, PrecompiledHeadersFollowTheThreadsOrTheMode) {
  EngineOptions o = Options();  // one thread
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> off, OpenEngine(std::move(o)));
  EXPECT_EQ(off->pch_dir, nullptr);

  o = Options();
  o.compile_threads = kAutoMinThreads;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> many, OpenEngine(std::move(o)));
  ASSERT_NE(many->pch_dir, nullptr);
  EXPECT_EQ(many->pool->threads(), kAutoMinThreads);
  many.reset();

  o = Options();
  o.pch = AutoSwitch::kOn;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> on, OpenEngine(std::move(o)));
  ASSERT_NE(on->pch_dir, nullptr);
  const std::string dir = on->pch_dir->path();
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  on.reset();
  EXPECT_FALSE(IsDir(dir));

  o = Options();
  o.compile_threads = 64;
  o.pch = AutoSwitch::kOff;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> forced_off, OpenEngine(std::move(o)));
  EXPECT_EQ(forced_off->pch_dir, nullptr);

  EXPECT_THAT(ParseAutoSwitch("--pch", "sometimes"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--pch: 'sometimes' is not auto, on or off")));
  EXPECT_THAT(ParseAutoSwitch("--pch", "on"), testing::IsOkAndHolds(AutoSwitch::kOn));
}

TEST_F(EngineTest, UsesARegistryAlreadyLoaded) {
  EngineOptions o = Options();
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
      LoadTemplateRegistry(dir_ + "/templates");
  ASSERT_OK(registry);
  const TemplateRegistry* loaded = registry->get();
  o.registry = *std::move(registry);
  o.templates_dir = dir_ + "/not-read";
  absl::StatusOr<std::unique_ptr<Engine>> e = OpenEngine(std::move(o));
  ASSERT_OK(e);
  EXPECT_EQ((*e)->registry.get(), loaded);
}

TEST_F(EngineTest, ABadDbPathNamesTheFlagAndTheFile) {
  EngineOptions o = Options();
  o.db = dir_ + "/no/such/folder/ktune.db";
  // SQLite's own code for a file it cannot open is kept, whatever it maps to.
  const absl::Status s = OpenEngine(std::move(o)).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("--db " + dir_ + "/no/such/folder/ktune.db"));
}

TEST_F(EngineTest, AMissingTemplatesFolderNamesTheFlag) {
  EngineOptions o = Options();
  o.templates_dir = dir_ + "/nowhere";
  EXPECT_THAT(OpenEngine(std::move(o)).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("--templates " + dir_ + "/nowhere")));
}

// With no --db and no cubin folder, ktune keeps both under its default folder: one another
// user could write in (their /tmp/ktune-<uid>, made 0777) is refused, naming it.
TEST_F(EngineTest, ADefaultFolderOthersCanWriteIsRefused) {
  const char* old = getenv("XDG_CACHE_HOME");
  const std::string saved = old != nullptr ? old : "";
  setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
  ASSERT_OK(MakeDirs(dir_ + "/ktune"));
  ASSERT_EQ(chmod((dir_ + "/ktune").c_str(), 0777), 0);
  EngineOptions o = Options();
  o.db.clear();
  o.cache_dir.clear();
  EXPECT_THAT(OpenEngine(std::move(o)).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("cache folder " + dir_ + "/ktune")));
  ASSERT_EQ(chmod((dir_ + "/ktune").c_str(), 0700), 0);
  o = Options();
  o.db.clear();
  o.cache_dir.clear();
  EXPECT_OK(OpenEngine(std::move(o)));
  if (old != nullptr) {
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    unsetenv("XDG_CACHE_HOME");
  }
}

TEST_F(EngineTest, AnUnusableCubinCacheIsNamed) {
  ASSERT_OK(AtomicWriteFile(dir_ + "/a-file", "not a folder"));
  EngineOptions o = Options();
  o.cache_dir = dir_ + "/a-file/cubins";
  const absl::Status s = OpenEngine(std::move(o)).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("cubin cache " + dir_ + "/a-file/cubins"));
}

// Idle compiles: auto turns them on from kAutoMinThreads compile threads where the helper
// program is found (the 16-core host's gain; neutral on 2 cores), and off without a word
// where it is missing; on asks for them whatever the threads.
TEST_F(EngineTest, IdleCompilesFollowTheThreadsOrTheMode) {
  const std::string helper = KTUNE_BINARY_DIR "/bin/ktune-warm";
  EngineOptions o = Options();  // one thread
  o.warm_program = helper;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> few, OpenEngine(std::move(o)));
  EXPECT_EQ(few->idle, nullptr);
  EXPECT_EQ(few->warm, nullptr);
  EXPECT_EQ(few->Env(nullptr).idle, nullptr);
  few.reset();

  o = Options();
  o.compile_threads = kAutoMinThreads;
  o.warm_program = helper;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> many, OpenEngine(std::move(o)));
  EXPECT_THAT(many->idle, NotNull());
  EXPECT_THAT(many->warm, NotNull());
  many.reset();

  o = Options();
  o.compile_threads = kAutoMinThreads;
  o.warm_program = dir_ + "/no-such-warm";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> missing, OpenEngine(std::move(o)));
  EXPECT_EQ(missing->idle, nullptr);
  EXPECT_EQ(missing->warm, nullptr);
  missing.reset();

  o = Options();
  o.compile_threads = kAutoMinThreads;
  o.warm_program = helper;
  o.idle_compiles = AutoSwitch::kOff;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> off, OpenEngine(std::move(o)));
  EXPECT_EQ(off->idle, nullptr);
  EXPECT_EQ(off->warm, nullptr);

  EXPECT_THAT(ParseAutoSwitch("--idle-compile", "yes"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--idle-compile: 'yes' is not auto, on or off")));
}

TEST_F(EngineTest, IdleCompilesRunInHelperProcesses) {
  EngineOptions o = Options();  // one thread: on is on whatever the threads
  o.idle_compiles = AutoSwitch::kOn;
  o.warm_program = KTUNE_BINARY_DIR "/bin/ktune-warm";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> engine, OpenEngine(std::move(o)));
  ASSERT_THAT(engine->idle, NotNull());
  ASSERT_THAT(engine->warm, NotNull());
  EXPECT_EQ(engine->Env(nullptr).idle, engine->idle.get());
  EXPECT_EQ(engine->warm->started(), 0);
}

TEST_F(EngineTest, IdleCompilesWithoutTheirHelperAreRefused) {
  EngineOptions o = Options();
  o.idle_compiles = AutoSwitch::kOn;
  o.warm_program = dir_ + "/no-such-warm";
  EXPECT_THAT(OpenEngine(std::move(o)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no-such-warm")));
}

}  // namespace
}  // namespace ktune
