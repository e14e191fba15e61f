// The built ktune-worker program over real pipes, as its parent drives it: frames in, frames
// out, and the exit statuses the parent relies on. Needs no GPU: without a driver Hello is
// answered with an error, which is still a well-formed Response.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "ktune/v1/worker.pb.h"
#include "server/gpu/framing.h"
#include "tests/worker/worker_process.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::StatusIs;
using ::ktune::testing::Worker;
using ::testing::HasSubstr;

// Sends Hello for GPU 0 and reads the answer into *response.
void SayHello(Worker& worker, v1::Response* response) {
  v1::Request hello;
  hello.mutable_hello()->set_ordinal(0);
  ASSERT_OK(WriteFrame(worker.to(), hello));
  ASSERT_OK(ReadFrame(worker.from(), response, /*timeout_ms=*/60000));
}

TEST(WorkerMainTest, AnswersHelloThenExitsZeroAtEndOfInput) {
  signal(SIGPIPE, SIG_IGN);
  Worker worker({"--ordinal", "0"});
  v1::Response response;
  ASSERT_NO_FATAL_FAILURE(SayHello(worker, &response));
  ASSERT_TRUE(response.has_device() || response.has_error()) << response.DebugString();
  if (response.has_error()) {
    // No driver or no GPU here: the reason comes back, and the worker keeps serving.
    EXPECT_EQ(response.error().code(), static_cast<int>(absl::StatusCode::kUnavailable))
        << response.error().message();
    EXPECT_FALSE(response.error().poisoned());
  } else {
    EXPECT_EQ(response.device().ordinal(), 0);
    EXPECT_FALSE(response.device().name().empty());
  }
  // A second request on the same pipes: one answer per request, in order.
  v1::Request empty;
  ASSERT_OK(WriteFrame(worker.to(), empty));
  v1::Response second;
  ASSERT_OK(ReadFrame(worker.from(), &second, 60000));
  ASSERT_TRUE(second.has_error());
  EXPECT_EQ(second.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));

  worker.CloseInput();
  EXPECT_EQ(worker.Wait(), 0);
  // Nothing but frames ever came out: after the two answers, end of file.
  EXPECT_THAT(ReadFrame(worker.from(), &second, 1000),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("end of file")));
}

// A candidate that crashes the worker is routine; it must not leave a core file behind.
TEST(WorkerMainTest, RunsWithoutCoreFiles) {
  signal(SIGPIPE, SIG_IGN);
  Worker worker({"--ordinal", "0"});
  v1::Response response;
  ASSERT_NO_FATAL_FAILURE(SayHello(worker, &response));  // past its setup
  std::ifstream limits("/proc/" + std::to_string(worker.pid()) + "/limits");
  std::string line, core;
  while (std::getline(limits, line)) {
    if (line.rfind("Max core file size", 0) == 0) core = line;
  }
  EXPECT_THAT(core, ::testing::MatchesRegex("Max core file size +0 +0 +bytes *")) << core;
  worker.CloseInput();
  EXPECT_EQ(worker.Wait(), 0);
}

TEST(WorkerMainTest, ExitsZeroOnImmediateEndOfInput) {
  Worker worker;
  worker.CloseInput();
  EXPECT_EQ(worker.Wait(), 0);
}

TEST(WorkerMainTest, UnparsableFrameIsAnsweredThenExitsTwo) {
  signal(SIGPIPE, SIG_IGN);
  Worker worker;
  // Field 1 (hello) with a wire type that cannot be, and a length that runs past the end.
  const std::string garbage = std::string("\x03\x00\x00\x00", 4) + "\x0f\xff\xff";
  ASSERT_EQ(write(worker.to(), garbage.data(), garbage.size()),
            static_cast<ssize_t>(garbage.size()));
  v1::Response response;
  ASSERT_OK(ReadFrame(worker.from(), &response, 30000));
  ASSERT_TRUE(response.has_error()) << response.DebugString();
  EXPECT_EQ(response.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(response.error().message(), HasSubstr("bad request frame"));
  EXPECT_EQ(worker.Wait(), 2);
}

TEST(WorkerMainTest, BadFlagsExitOne) {
  Worker worker({"--ordinal", "minus-one"});
  EXPECT_EQ(worker.Wait(), 1);
  Worker other({"--frobnicate"});
  EXPECT_EQ(other.Wait(), 1);
}

// True while `pid` exists and is not a zombie (a reparented child may never be reaped here).
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  if (!(stat >> pid_field >> comm >> state)) return false;
  return state != "Z" && state != "X";
}

TEST(WorkerMainTest, ExitsWhenItsParentDies) {
  // The worker's stdin stays open (this process holds the write end), so only the orphan
  // watchdog can end it once the intermediate parent is gone.
  int in[2], report[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(report), 0);
  const std::string worker = testing::WorkerBinary();
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    char* argv[] = {const_cast<char*>(worker.c_str()), nullptr};
    pid_t pid = -1;
    if (posix_spawn(&pid, worker.c_str(), &actions, nullptr, argv, environ) != 0) _exit(1);
    // Give the worker time to start its watchdog under this parent.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)!write(report[1], &pid, sizeof(pid));
    _exit(0);
  }
  close(report[1]);
  pid_t worker_pid = -1;
  ASSERT_EQ(read(report[0], &worker_pid, sizeof(worker_pid)), static_cast<ssize_t>(sizeof(worker_pid)));
  int status = 0;
  ASSERT_EQ(waitpid(parent, &status, 0), parent);
  ASSERT_TRUE(Alive(worker_pid));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Alive(worker_pid) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(Alive(worker_pid)) << "ktune-worker outlived its parent";
  if (Alive(worker_pid)) kill(worker_pid, SIGKILL);
  close(in[0]);
  close(in[1]);
  close(report[0]);
}

}  // namespace
}  // namespace ktune
