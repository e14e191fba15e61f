// A private folder of this process's own, removed with everything in it when its owner goes
// away: state a tool keeps only while the process runs (NVRTC's precompiled headers).
//
// Thread-compatible; the folder itself is the user's alone (mode 0700, a fresh name).
#ifndef KTUNE_SERVER_BASE_SCRATCH_DIR_H_
#define KTUNE_SERVER_BASE_SCRATCH_DIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ktune {

class ScratchDir {
 public:
  // A new folder `<$TMPDIR or /tmp>/<prefix>XXXXXX` (mkdtemp: a name no one had, mode
  // 0700). kInternal naming the folder and the system's reason when it cannot be made.
  static absl::StatusOr<std::unique_ptr<ScratchDir>> Create(const std::string& prefix);

  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  // Removes the folder and all it holds; what cannot be removed is left (a process that
  // is killed leaves it too: it is under the temp folder, which the system clears).
  ~ScratchDir();

  const std::string& path() const { return path_; }

 private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_SCRATCH_DIR_H_
