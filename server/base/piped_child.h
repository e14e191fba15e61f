// Starting a child process whose stdin and stdout are pipes to this one: ktune-worker (the
// GPU) and ktune-warm (the idle compiles) are both driven so, by length-prefixed frames.
//
// posix_spawn (clone + exec, no copy of this process's address space), the pipes close-on-
// exec on our side, nothing but stdin, stdout and stderr crossing into the child, signals
// back to their defaults and none blocked there. Thread-safe.
#ifndef KTUNE_SERVER_BASE_PIPED_CHILD_H_
#define KTUNE_SERVER_BASE_PIPED_CHILD_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ktune {

struct PipedChild {
  pid_t pid = -1;
  int to = -1;    // the child's stdin
  int from = -1;  // the child's stdout
};

struct PipedChildOptions {
  std::string program;
  std::vector<std::string> args;  // after argv[0], which is `program`
  // The child's environment ("NAME=value"); null: this process's.
  const std::vector<std::string>* env = nullptr;
  // Its own process group (pgid = its pid), so SIGKILL to the group ends what it started.
  bool own_process_group = false;
  // The stdin pipe's capacity (F_SETPIPE_SZ, best effort); 0: the system's default.
  int stdin_pipe_bytes = 0;
};

// kNotFound / kPermissionDenied / kInternal naming "starting PROGRAM" and the system's
// reason (exec failures included: glibc's posix_spawn reports them). First ignores SIGPIPE
// in this process, once, unless the application installed a handler of its own: a write to
// a child that died then fails with EPIPE instead of ending us.
absl::StatusOr<PipedChild> StartPipedChild(const PipedChildOptions& options);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_PIPED_CHILD_H_
