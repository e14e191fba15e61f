// An exclusive advisory lock on a file (flock), held for as long as its owner lives: what
// keeps a second ktuned off a socket path or a store file that one already serves.
//
// The kernel drops the lock when the descriptor closes, so a crashed or killed holder never
// leaves it behind. A FileLock is not copyable; it is safe to destroy from any thread.
#ifndef KTUNE_SERVER_BASE_FILE_LOCK_H_
#define KTUNE_SERVER_BASE_FILE_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ktune {

class FileLock {
 public:
  ~FileLock();  // releases the lock; the file stays
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  friend absl::StatusOr<std::unique_ptr<FileLock>> LockFileExclusive(const std::string& path);
  FileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Takes an exclusive lock on `path`, creating it (mode 0600) if needed, without waiting, and
// writes this process's id into it. kFailedPrecondition "PATH is held by another process
// (pid N)" when another process (or another FileLock of this one) holds it; kInternal naming
// the call and the system's reason on other errors. The descriptor is close-on-exec, so
// child processes never inherit the lock.
absl::StatusOr<std::unique_ptr<FileLock>> LockFileExclusive(const std::string& path);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_FILE_LOCK_H_
