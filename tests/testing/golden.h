// Golden files: a test's output compared with a file checked in under the source tree.
// With KTUNE_UPDATE_GOLDEN set in the environment the file is rewritten instead (and the
// check passes, saying so); review its diff before committing it.
#ifndef KTUNE_TESTS_TESTING_GOLDEN_H_
#define KTUNE_TESTS_TESTING_GOLDEN_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"
#include "tests/templates/template_fixture.h"

namespace ktune::testing {

// `relative_path` under the source tree (SourceDir(), so a bundle on the GPU host finds it
// too); `regenerate` says what to run to rewrite it, for the failure message.
inline void ExpectMatchesGolden(const std::string& relative_path, const std::string& actual,
                                const std::string& regenerate) {
  const std::string path = absl::StrCat(SourceDir(), "/", relative_path);
  if (std::getenv("KTUNE_UPDATE_GOLDEN") != nullptr) {
    EXPECT_TRUE(AtomicWriteFile(path, actual).ok()) << path;
    std::cerr << "rewrote " << path << "\n";
    return;
  }
  absl::StatusOr<std::string> golden = ReadFile(path);
  ASSERT_TRUE(golden.ok()) << golden.status();
  EXPECT_EQ(actual, *golden) << "differs from " << path << ". If the change is intended, "
                             << "regenerate it with\n  KTUNE_UPDATE_GOLDEN=1 " << regenerate
                             << "\nand review its diff.";
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_GOLDEN_H_
