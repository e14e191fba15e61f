// Whole-file reads and crash-safe writes.
//
// Thread-safe as far as the file system is: concurrent AtomicWriteFile calls to one path
// leave one complete writer's bytes, never a mix.
#ifndef KTUNE_SERVER_BASE_FILE_H_
#define KTUNE_SERVER_BASE_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune {

// Returns the file's bytes; kNotFound if it does not exist, kInternal on other errors,
// naming the path and the system's reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `data` to a temporary file beside `path` and renames it into place, so a reader
// or a crash never sees a partial file.
absl::Status AtomicWriteFile(const std::string& path, absl::string_view data);

// Creates `path` and its parents (mode 0700 for new folders); OK if it exists.
absl::Status MakeDirs(const std::string& path);

// MakeDirs(path), then checks that ktune may trust the folder with its store, socket and
// cubins: a real folder (not a symlink), owned by this user, that no one else may write (no
// group or other write bit). kPermissionDenied naming the folder, its owner and mode
// otherwise: e.g. a /tmp/ktune-<uid> that another user created 0777 first, where they could
// swap the store or plant cubins.
absl::Status MakePrivateDir(const std::string& path);

// True iff `path` is a folder.
bool IsDir(const std::string& path);

// The names in folder `dir` (no "." or ".."), sorted so listings are deterministic.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir);

// A sha256 over the relative paths and bytes of every file under `dir`, in sorted order;
// "" for a missing folder. It says when anything a compile can #include has changed.
absl::StatusOr<std::string> DigestFolder(const std::string& dir);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_FILE_H_
