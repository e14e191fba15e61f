// Test helper: one of the project's built programs as a child process, hermetic: stdin is
// /dev/null, stdout and stderr go to files in a folder of the test's, XDG_CACHE_HOME points
// into that folder (so no cubin cache or database of the user's is touched) and KTUNE_*
// variables but KTUNE_WORKER_ENV are dropped (so a GPU host's bundle environment cannot
// steer it).
#ifndef KTUNE_TESTS_TESTING_SUBPROCESS_H_
#define KTUNE_TESTS_TESTING_SUBPROCESS_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/file.h"

extern char** environ;

namespace ktune::testing {

class Subprocess {
 public:
  // Starts `binary` with `args`; its files go into the existing folder `dir`.
  Subprocess(const std::string& binary, const std::vector<std::string>& args,
             const std::string& dir)
      : out_(dir + "/stdout"), err_(dir + "/stderr") {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      // KTUNE_WORKER_ENV only widens what reaches a worker (a test's fake worker knobs).
      if (!absl::StartsWith(*e, "XDG_CACHE_HOME=") &&
          (!absl::StartsWith(*e, "KTUNE_") || absl::StartsWith(*e, "KTUNE_WORKER_ENV="))) {
        env_strings.push_back(*e);
      }
    }
    env_strings.push_back(absl::StrCat("XDG_CACHE_HOME=", dir, "/xdg-cache"));
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings = {binary};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int spawned =
        posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(spawned, 0) << "cannot run " << binary << ": " << std::strerror(spawned);
    if (spawned != 0) pid_ = 0;
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills it if it still runs; never leaves a zombie.
  ~Subprocess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Reaps it if it has exited.
  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    pid_ = 0;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return false;
  }
  // Its exit status once it exits within `timeout`; -1 if it does not (or died of a signal).
  int Wait(absl::Duration timeout = absl::InfiniteDuration()) {
    const absl::Time end = absl::Now() + timeout;
    while (Running()) {
      if (absl::Now() > end) return -1;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return exit_code_;
  }
  void Signal(int signal) {
    if (pid_ > 0) kill(pid_, signal);
  }
  pid_t pid() const { return pid_; }  // 0 once it has been reaped
  std::string Stdout() const { return ReadFile(out_).value_or(""); }
  std::string Stderr() const { return ReadFile(err_).value_or(""); }

 private:
  const std::string out_;
  const std::string err_;
  pid_t pid_ = 0;
  int exit_code_ = -1;
};

// A program run to its end: its exit status (-1: it did not exit normally, or not within
// the timeout) and what it printed.
struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::ostream& operator<<(std::ostream& os, const RunResult& r) {
  return os << "exit " << r.exit_code << "\n--- stdout\n" << r.out << "--- stderr\n" << r.err;
}

// Runs `binary` with `args` as a Subprocess in the existing folder `dir` and waits for it
// (at most `timeout`).
inline RunResult RunToEnd(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& dir,
                          absl::Duration timeout = absl::InfiniteDuration()) {
  Subprocess p(binary, args, dir);
  RunResult r;
  r.exit_code = p.Wait(timeout);
  r.out = p.Stdout();
  r.err = p.Stderr();
  return r;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_SUBPROCESS_H_
