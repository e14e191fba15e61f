#include "server/base/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"

namespace ktune {
namespace {

absl::Status ErrnoStatus(absl::string_view what, const std::string& path, int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path, errno);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoStatus("read", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status AtomicWriteFile(const std::string& path, absl::string_view data) {
  // A unique temporary name per process and call, so two writers never share one.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create", tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus("write", tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  // Without fsync the rename can reach the disk before the data does, and a power loss
  // leaves an empty or partial file under `path`: the very thing this function promises not
  // to do.
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus("fsync", tmp, err);
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("close", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename to", path, err);
  }
  // Make the rename itself durable. Best effort: either the old or the new file survives a
  // crash whether or not this succeeds, so a failure here is not the caller's problem.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0                ? "/"
                                                      : path.substr(0, slash);
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("MakeDirs: empty path");
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      const int err = errno;
      if (err == ENOTDIR) {
        // A file where a parent folder should be: the caller's setup, not an I/O fault.
        return absl::FailedPreconditionError(
            absl::StrCat("mkdir ", prefix, ": a parent of it is not a folder"));
      }
      return ErrnoStatus("mkdir", prefix, err);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path, errno);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a folder"));
  return absl::OkStatus();
}

absl::Status MakePrivateDir(const std::string& path) {
  KTUNE_RETURN_IF_ERROR(MakeDirs(path));
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus("lstat", path, errno);
  if (S_ISLNK(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, " is a symbolic link; ktune keeps its files only in a real folder of its own"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, " is owned by uid ", st.st_uid, ", not by this user (uid ", ::geteuid(),
        "); another user may have created it: remove it, or point ktune elsewhere "
        "(XDG_CACHE_HOME, --db)"));
  }
  if ((st.st_mode & 022) != 0) {
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return absl::PermissionDeniedError(absl::StrCat(
        path, " has mode ", mode, ": others may write in it; make it 0700 (chmod go-w)"));
  }
  return absl::OkStatus();
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("cannot read folder", dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

absl::Status AddFolder(const std::string& root, const std::string& rel, Sha256Builder* digest) {
  const std::string dir = rel.empty() ? root : absl::StrCat(root, "/", rel);
  KTUNE_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  for (const std::string& n : names) {
    const std::string child_rel = rel.empty() ? n : absl::StrCat(rel, "/", n);
    const std::string child = absl::StrCat(root, "/", child_rel);
    if (IsDir(child)) {
      KTUNE_RETURN_IF_ERROR(AddFolder(root, child_rel, digest));
    } else {
      KTUNE_ASSIGN_OR_RETURN(std::string bytes, ReadFile(child));
      digest->AddField(child_rel).AddField(bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DigestFolder(const std::string& dir) {
  if (!IsDir(dir)) return std::string();
  Sha256Builder digest;
  KTUNE_RETURN_IF_ERROR(AddFolder(dir, "", &digest));
  return digest.Finish();
}

}  // namespace ktune
