#include "server/base/file.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::IsOk;
using ::ktune::testing::IsOkAndHolds;
using ::ktune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "ktune_file_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    // Only what the tests made: a few levels of folders and files.
    ASSERT_EQ(std::system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }

  std::vector<std::string> Names(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return names;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    return names;
  }

  std::string dir_;
};

TEST_F(FileTest, ReadMissingFileIsNotFound) {
  const std::string path = dir_ + "/nope.bin";
  EXPECT_THAT(ReadFile(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
  EXPECT_THAT(ReadFile(dir_ + "/no/such/folder/x"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such/folder/x")));
}

TEST_F(FileTest, WriteThenReadRoundTripsBinary) {
  std::string data;
  for (int i = 0; i < 200000; ++i) data.push_back(static_cast<char>(i * 7919 % 256));
  data += std::string("\0\r\n\xff", 4);
  const std::string path = dir_ + "/cubin.bin";
  ASSERT_OK(AtomicWriteFile(path, data));
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(data));

  // Replaces an existing file whole, even with a shorter one.
  ASSERT_OK(AtomicWriteFile(path, "short"));
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(std::string("short")));
  ASSERT_OK(AtomicWriteFile(path, ""));
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(std::string()));
}

TEST_F(FileTest, AtomicWriteLeavesNoTempFiles) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(AtomicWriteFile(dir_ + "/a", std::to_string(i)));
    ASSERT_OK(AtomicWriteFile(dir_ + "/b", std::string(i * 1000, 'x')));
  }
  std::vector<std::string> names = Names(dir_);
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ElementsAre("a", "b"));
  EXPECT_THAT(ReadFile(dir_ + "/a"), IsOkAndHolds(std::string("19")));
}

TEST_F(FileTest, AtomicWriteFailsCleanly) {
  // The folder does not exist: the temporary cannot be created.
  EXPECT_THAT(AtomicWriteFile(dir_ + "/missing/f", "x"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir_ + "/missing/f")));
  // The target is a folder: the rename fails and the temporary is removed.
  ASSERT_OK(MakeDirs(dir_ + "/sub"));
  EXPECT_THAT(AtomicWriteFile(dir_ + "/sub", "x"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr(dir_ + "/sub")));
  EXPECT_THAT(Names(dir_), ElementsAre("sub"));
}

TEST_F(FileTest, WrittenFileIsPrivate) {
  ASSERT_OK(AtomicWriteFile(dir_ + "/f", "x"));
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(FileTest, MakeDirsNested) {
  const std::string deep = dir_ + "/a/b/c/d";
  ASSERT_OK(MakeDirs(deep));
  struct stat st;
  ASSERT_EQ(::stat(deep.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Existing folders are fine, with or without a trailing slash.
  EXPECT_OK(MakeDirs(deep));
  EXPECT_OK(MakeDirs(dir_ + "/a/b/"));
  EXPECT_OK(MakeDirs(dir_ + "//a//b"));
  // A file written inside proves it is a usable folder.
  EXPECT_OK(AtomicWriteFile(deep + "/f", "x"));
}

TEST_F(FileTest, MakeDirsRelative) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  const absl::Status s = MakeDirs("rel/x");
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_OK(s);
  struct stat st;
  EXPECT_EQ(::stat((dir_ + "/rel/x").c_str(), &st), 0);
}

TEST_F(FileTest, MakeDirsOnAFileFails) {
  const std::string file = dir_ + "/file";
  ASSERT_OK(AtomicWriteFile(file, "x"));
  EXPECT_THAT(MakeDirs(file), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       AllOf(HasSubstr(file), HasSubstr("not a folder"))));
  // A file in the middle of the path.
  EXPECT_THAT(MakeDirs(file + "/sub/deeper"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(file + "/sub"), HasSubstr("not a folder"))));
  EXPECT_THAT(ReadFile(file), IsOkAndHolds(std::string("x")));
}

// With HOME and XDG_CACHE_HOME unset ktune falls back to /tmp/ktune-<uid>, which another
// user may have created first, 0777: the store, socket and cubins went there anyway.
TEST_F(FileTest, MakePrivateDirRefusesFoldersOthersCanWrite) {
  const std::string fresh = dir_ + "/fresh/ktune";
  EXPECT_OK(MakePrivateDir(fresh));
  struct stat st;
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_OK(MakePrivateDir(fresh));  // again: it is ours

  const std::string open = dir_ + "/open";
  ASSERT_EQ(mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);
  EXPECT_THAT(MakePrivateDir(open),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr(open), HasSubstr("mode 0777"), HasSubstr("others may write"))));
  ASSERT_EQ(chmod(open.c_str(), 0770), 0);
  EXPECT_THAT(MakePrivateDir(open), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("0770")));

  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(fresh.c_str(), link.c_str()), 0);
  EXPECT_THAT(MakePrivateDir(link),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("symbolic link")));

  if (geteuid() == 0) {  // only root can give a folder away
    const std::string theirs = dir_ + "/theirs";
    ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(theirs.c_str(), 12345, 12345), 0);
    EXPECT_THAT(MakePrivateDir(theirs),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("owned by uid 12345")));
  }
}

TEST_F(FileTest, MakeDirsEmptyPath) {
  EXPECT_THAT(MakeDirs(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
}

}  // namespace
}  // namespace ktune
