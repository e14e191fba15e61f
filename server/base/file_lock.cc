#include "server/base/file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

absl::Status PosixError(const std::string& call, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(call, " ", path, ": ", std::strerror(err)));
}

// The holder's pid as it wrote it; "" when the file says nothing readable.
std::string HolderPid(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  int64_t pid = 0;
  if (n <= 0 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(buf), &pid) || pid <= 0) return "";
  return absl::StrCat(pid);
}

}  // namespace

FileLock::~FileLock() { close(fd_); }

absl::StatusOr<std::unique_ptr<FileLock>> LockFileExclusive(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return PosixError("open", path, errno);
  auto lock = std::unique_ptr<FileLock>(new FileLock(path, fd));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) return PosixError("flock", path, err);
    const std::string pid = HolderPid(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is held by another process", pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")")));
  }
  // Who holds it, for the message of the next one that tries; the lock does not depend on it.
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    return PosixError("write", path, errno);
  }
  return lock;
}

}  // namespace ktune
