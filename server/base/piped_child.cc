#include "server/base/piped_child.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace ktune {
namespace {

absl::Status PosixError(absl::string_view context, int err) {
  std::string text = absl::StrCat(context, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(text);
    default:
      return absl::InternalError(text);
  }
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);  // Linux releases the descriptor even on EINTR: no retry.
  fd = -1;
}

// Moves `fd` (close-on-exec) above the standard descriptors, so the child's dup2 onto
// 0 and 1 never meets one of its own pipe ends there (a daemon may run with stdin closed).
absl::Status MoveAboveStdio(int& fd) {
  if (fd > 2) return absl::OkStatus();
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return PosixError("fcntl(F_DUPFD_CLOEXEC)", errno);
  ::close(fd);
  fd = moved;
  return absl::OkStatus();
}

void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    // Leave a handler the application installed alone: write() still fails with EPIPE
    // after it returns.
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

absl::StatusOr<PipedChild> StartPipedChild(const PipedChildOptions& options) {
  IgnoreSigpipeOnce();  // every caller writes to the child's stdin
  int in_pipe[2] = {-1, -1};   // parent writes [1], child reads [0] as stdin
  int out_pipe[2] = {-1, -1};  // child writes [1] as stdout, parent reads [0]
  auto close_all = [&] {
    for (int* fd : {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1]}) CloseFd(*fd);
  };
  // O_CLOEXEC atomically: a child spawned from another thread must not inherit our ends,
  // or it would hold this child's stdin open past our close().
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return PosixError("pipe2", errno);
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    absl::Status s = PosixError("pipe2", errno);
    close_all();
    return s;
  }
  for (int* fd : {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1]}) {
    if (absl::Status s = MoveAboveStdio(*fd); !s.ok()) {
      close_all();
      return s;
    }
  }
  if (options.stdin_pipe_bytes > 0) {
    (void)::fcntl(in_pipe[1], F_SETPIPE_SZ, options.stdin_pipe_bytes);  // best effort
  }

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  // dup2 clears close-on-exec on the copies; the originals close at exec.
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  // Nothing else crosses: a descriptor a library opened without O_CLOEXEC (the store's
  // file, a listening socket) must not reach the child.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  // Signals ignored here (SIGPIPE, by us) stay ignored across exec: reset them, and unblock
  // everything the calling thread may have blocked.
  sigset_t defaults, mask;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGCHLD}) sigaddset(&defaults, sig);
  sigemptyset(&mask);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &mask);
  short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  if (options.own_process_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);

  std::vector<std::string> args = {options.program};
  args.insert(args.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_copy;
  std::vector<char*> envp;
  char** env = environ;
  if (options.env != nullptr) {
    env_copy = *options.env;
    for (std::string& e : env_copy) envp.push_back(e.data());
    envp.push_back(nullptr);
    env = envp.data();
  }
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, options.program.c_str(), &actions, &attr, argv.data(), env);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  CloseFd(in_pipe[0]);
  CloseFd(out_pipe[1]);
  if (err != 0) {
    close_all();
    return PosixError(absl::StrCat("starting ", options.program), err);
  }
  return PipedChild{pid, in_pipe[1], out_pipe[0]};
}

}  // namespace ktune
