// Test helper: the built ktune-worker program as a child process with pipes to its stdin and
// from its stdout, as its parent (process_gpu.cc) runs it.
//
// Thread-compatible; one test thread per Worker.
#ifndef KTUNE_TESTS_WORKER_WORKER_PROCESS_H_
#define KTUNE_TESTS_WORKER_WORKER_PROCESS_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ktune::testing {

// $KTUNE_WORKER (a bundle on the GPU host, where the build's path does not exist), else
// the one built beside the tests.
inline std::string WorkerBinary() {
  const char* env = std::getenv("KTUNE_WORKER");
  return env != nullptr && *env != '\0' ? env : KTUNE_BINARY_DIR "/bin/ktune-worker";
}

// A running ktune-worker with pipes to its stdin and from its stdout.
class Worker {
 public:
  explicit Worker(std::vector<std::string> args = {}) {
    int in[2], out[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    std::vector<char*> argv;
    std::string path = WorkerBinary();
    argv.push_back(path.data());
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int spawned = posix_spawn(&pid_, path.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(spawned, 0) << "cannot run " << path << ": " << std::strerror(spawned);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (spawned != 0) pid_ = -1;
  }

  ~Worker() {
    CloseInput();
    if (from_ >= 0) close(from_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  int to() const { return to_; }
  int from() const { return from_; }

  void CloseInput() {
    if (to_ >= 0) close(to_);
    to_ = -1;
  }

  // The exit status, waiting up to `timeout`; -1 if it did not exit normally in time.
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_WORKER_WORKER_PROCESS_H_
