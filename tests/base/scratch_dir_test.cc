#include "server/base/scratch_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>

#include "absl/strings/match.h"
#include "server/base/file.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;

// A fresh private folder under $TMPDIR, gone with everything in it when the owner goes.
TEST(ScratchDirTest, PrivateUnderTmpdirAndRemovedWithItsContents) {
  const std::string tmp = ::getenv("TMPDIR") ? ::getenv("TMPDIR") : "/tmp";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ScratchDir> a, ScratchDir::Create("ktune-scratch-test-"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ScratchDir> b, ScratchDir::Create("ktune-scratch-test-"));
  EXPECT_NE(a->path(), b->path());
  EXPECT_TRUE(absl::StartsWith(a->path(), tmp + "/ktune-scratch-test-")) << a->path();
  struct stat st;
  ASSERT_EQ(::stat(a->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_OK(MakeDirs(a->path() + "/deep/er"));
  ASSERT_OK(AtomicWriteFile(a->path() + "/deep/er/state", "x"));
  const std::string path = a->path();
  a.reset();
  EXPECT_FALSE(IsDir(path));
  EXPECT_TRUE(IsDir(b->path()));
}

TEST(ScratchDirTest, AFolderThatCannotBeMadeIsNamed) {
  const char* old = ::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", "/nonexistent-ktune-folder", 1);
  EXPECT_THAT(ScratchDir::Create("x-"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("cannot make a scratch folder /nonexistent-ktune-folder/x-")));
  if (old) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

}  // namespace
}  // namespace ktune
