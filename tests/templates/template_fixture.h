// Test helpers: copies of the tests' template folders in a fresh temporary folder, so a
// test can break one file without touching the others.
#ifndef KTUNE_TESTS_TEMPLATES_TEMPLATE_FIXTURE_H_
#define KTUNE_TESTS_TEMPLATES_TEMPLATE_FIXTURE_H_

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"

namespace ktune::testing {

// The source tree: $KTUNE_SOURCE_DIR when set (a bundle on the GPU host, where the build's
// path does not exist), else the one the tests were built from.
inline std::string SourceDir() {
  const char* env = std::getenv("KTUNE_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : KTUNE_SOURCE_DIR;
}

// The checked-in test templates (tests/templates/testdata/good).
inline std::string TestTemplatesDir() {
  return absl::StrCat(SourceDir(), "/tests/templates/testdata/good");
}

// The shipped templates; in a bundle, $KTUNE_TEMPLATES.
inline std::string ShippedTemplatesDir() {
  const char* env = std::getenv("KTUNE_TEMPLATES");
  return env != nullptr && *env != '\0' ? env : absl::StrCat(SourceDir(), "/kernel_templates");
}

// The folders NewTempDir made in this process, removed with everything in them when the
// process exits (a whole ctest run left ~470 of them, 20 MB, in /tmp). Only by the process
// that made them: a forked child that exits must not take its parent's folders away.
// Thread-safe.
class TempDirRegistry {
 public:
  static TempDirRegistry& Get() {
    static TempDirRegistry registry;
    return registry;
  }
  void Add(std::string path) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(std::move(path));
  }
  ~TempDirRegistry() {
    if (::getpid() != owner_) return;
    for (const std::string& d : dirs_) {
      std::error_code ignored;
      std::filesystem::remove_all(d, ignored);
    }
  }

 private:
  TempDirRegistry() = default;
  const pid_t owner_ = ::getpid();
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

// A new empty folder under the test's temporary directory, removed when the test program
// exits.
inline std::string NewTempDir() {
  std::string pattern = absl::StrCat(::testing::TempDir(), "/ktune-XXXXXX");
  char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr);
  if (made != nullptr) TempDirRegistry::Get().Add(pattern);
  return pattern;
}

// Writes the test template "tiny" into `root`/tiny with its manifest replaced by
// `manifest` (the original when empty).
inline void WriteTiny(const std::string& root, const std::string& manifest = "") {
  const std::string src = absl::StrCat(TestTemplatesDir(), "/tiny");
  const std::string dst = absl::StrCat(root, "/tiny");
  ASSERT_TRUE(MakeDirs(dst).ok());
  auto text = ReadFile(src + "/tiny.textproto");
  auto cu = ReadFile(src + "/tiny.cu");
  ASSERT_TRUE(text.ok() && cu.ok());
  ASSERT_TRUE(AtomicWriteFile(dst + "/tiny.textproto", manifest.empty() ? *text : manifest).ok());
  ASSERT_TRUE(AtomicWriteFile(dst + "/tiny.cu", *cu).ok());
}

// The tensor-map test template (tests/templates/testdata/tma/tma_copy).
inline std::string TmaTemplatesDir() {
  return absl::StrCat(SourceDir(), "/tests/templates/testdata/tma");
}

// Writes the test template "tma_copy" into `root`/tma_copy with its manifest replaced by
// `manifest`.
inline void WriteTmaCopy(const std::string& root, const std::string& manifest) {
  const std::string src = absl::StrCat(TmaTemplatesDir(), "/tma_copy");
  const std::string dst = absl::StrCat(root, "/tma_copy");
  ASSERT_TRUE(MakeDirs(dst).ok());
  auto cu = ReadFile(src + "/tma_copy.cu");
  ASSERT_TRUE(cu.ok());
  ASSERT_TRUE(AtomicWriteFile(dst + "/tma_copy.textproto", manifest).ok());
  ASSERT_TRUE(AtomicWriteFile(dst + "/tma_copy.cu", *cu).ok());
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TEMPLATES_TEMPLATE_FIXTURE_H_
