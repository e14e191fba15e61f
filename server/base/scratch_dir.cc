#include "server/base/scratch_dir.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ktune {

absl::StatusOr<std::unique_ptr<ScratchDir>> ScratchDir::Create(const std::string& prefix) {
  const char* tmp = ::getenv("TMPDIR");
  const std::string base = tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
  std::string templ = absl::StrCat(base, "/", prefix, "XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    const int err = errno;
    return absl::InternalError(
        absl::StrCat("cannot make a scratch folder ", templ, ": ", ::strerror(err)));
  }
  return std::unique_ptr<ScratchDir>(new ScratchDir(buf.data()));
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;  // a destructor has no one to tell; the folder is the system's then
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace ktune
