#include "server/base/file_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;
using ::ktune::testing::StatusIs;

std::string NewDir() {
  std::string tmpl = ::testing::TempDir() + "ktune_file_lock_test.XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

TEST(FileLockTest, OneHolderAtATimeAndTheSecondIsToldWho) {
  const std::string path = NewDir() + "/ktuned.sock.lock";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FileLock> first, LockFileExclusive(path));
  EXPECT_EQ(first->path(), path);
  EXPECT_THAT(ReadFile(path), testing::IsOkAndHolds(absl::StrCat(getpid(), "\n")));
  EXPECT_THAT(LockFileExclusive(path).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat(path, " is held by another process (pid ",
                                              getpid(), ")"))));
  first.reset();
  EXPECT_OK(LockFileExclusive(path).status());
}

TEST(FileLockTest, AFolderThatIsNotThereNamesTheCall) {
  EXPECT_THAT(LockFileExclusive(NewDir() + "/no/such/dir/x.lock").status(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("open ")));
}

}  // namespace
}  // namespace ktune
