// ktune-worker [--ordinal N]: the one process of ktune that touches a GPU.
//
// Reads Request frames (server/gpu/framing.h, proto/ktune/v1/worker.proto) from stdin and
// answers each with one Response frame on stdout, in order, until stdin ends. Nothing else
// may reach stdout, so the process moves the real stdout aside at start and points fd 1 at
// stderr (the driver or a library printing cannot corrupt the stream); logs go to stderr.
//
// Exit status: 0 at end of input; 3 right after answering a request that poisoned the CUDA
// context (a faulting candidate: the parent starts a fresh worker); 2 for a frame that
// could not be read (answered with a WorkerError first when possible); 1 when the answer
// could not be written (the parent is gone) or for bad flags; 4 when the parent died while
// a request was running.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ktune/v1/worker.pb.h"
#include "server/gpu/framing.h"
#include "server/worker/worker_session.h"

namespace {

constexpr int kExitPoisoned = 3;
constexpr int kExitBadFrame = 2;
constexpr int kExitWriteFailed = 1;
constexpr int kExitUsage = 1;
constexpr int kExitOrphaned = 4;

// A parent killed with SIGKILL (a daemon stopped hard) never closes our stdin in a way we
// see while a kernel hangs in the driver, and would leave us holding the GPU. A watchdog
// thread ends the process once it is reparented. (PR_SET_PDEATHSIG fires when the spawning
// *thread* exits, which a daemon's thread pools would trip; polling the parent does not.)
void StartOrphanWatchdog() {
  const pid_t parent = getppid();
  std::thread([parent] {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (getppid() != parent) _exit(kExitOrphaned);
    }
  }).detach();
}

void Usage() {
  std::fprintf(stderr,
               "usage: ktune-worker [--ordinal N]\n"
               "Serves ktune's GPU requests over stdin/stdout (proto/ktune/v1/worker.proto).\n");
}

// A private, close-on-exec duplicate of `fd`.
int Duplicate(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 3); }

}  // namespace

int main(int argc, char** argv) {
  // No core files: a candidate that crashes the worker is routine, and a core would hold
  // the device buffers' host copies and the parent's problem data.
  const struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  // One flag, parsed by hand: absl flags would add a dependency and global state to the
  // smallest program of the project for nothing.
  int ordinal = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string value;
    if (arg == "--ordinal" && i + 1 < argc) {
      value = argv[++i];
    } else if (arg.rfind("--ordinal=", 0) == 0) {
      value = arg.substr(10);
    } else if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "ktune-worker: unknown argument '%s'\n", arg.c_str());
      Usage();
      return kExitUsage;
    }
    if (!absl::SimpleAtoi(value, &ordinal) || ordinal < 0) {
      std::fprintf(stderr, "ktune-worker: --ordinal needs a GPU ordinal >= 0, got '%s'\n",
                   value.c_str());
      return kExitUsage;
    }
  }

  // A parent that went away must give EPIPE from write, not kill us mid-answer.
  signal(SIGPIPE, SIG_IGN);
  StartOrphanWatchdog();

  // The protocol gets private descriptors; fd 1 becomes stderr and fd 0 /dev/null, so stray
  // prints (ours, the driver's) land in the log and nobody else reads requests.
  std::fflush(stdout);
  const int in = Duplicate(STDIN_FILENO);
  const int out = Duplicate(STDOUT_FILENO);
  if (in < 0 || out < 0) {
    std::fprintf(stderr, "ktune-worker: dup: %s\n", std::strerror(errno));
    return kExitWriteFailed;
  }
  dup2(STDERR_FILENO, STDOUT_FILENO);
  if (int null = open("/dev/null", O_RDONLY | O_CLOEXEC); null >= 0) {
    dup2(null, STDIN_FILENO);
    close(null);
  }

  std::unique_ptr<ktune::WorkerSession> session = ktune::NewWorkerSession(ordinal);
  while (true) {
    ktune::v1::Request request;
    absl::Status read = ktune::ReadFrame(in, &request, /*timeout_ms=*/-1);
    if (absl::IsUnavailable(read)) break;  // end of input: the parent is done with us
    if (!read.ok()) {
      std::fprintf(stderr, "ktune-worker: bad request frame: %s\n",
                   std::string(read.message()).c_str());
      ktune::v1::Response response;
      response.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
      response.mutable_error()->set_message(absl::StrCat("bad request frame: ", read.message()));
      (void)ktune::WriteFrame(out, response);
      // The stream may be out of step now; a fresh worker starts clean.
      std::fflush(stderr);
      _exit(kExitBadFrame);
    }
    const ktune::v1::Response response = session->Handle(request);
    if (absl::Status s = ktune::WriteFrame(out, response); !s.ok()) {
      std::fprintf(stderr, "ktune-worker: cannot answer: %s\n", std::string(s.message()).c_str());
      std::fflush(stderr);
      _exit(kExitWriteFailed);
    }
    if (session->poisoned()) {
      std::fprintf(stderr, "ktune-worker: the CUDA context is poisoned; exiting for a restart\n");
      std::fflush(stderr);
      // No teardown: the context cannot be used, and the driver cleans up at process exit.
      _exit(kExitPoisoned);
    }
  }
  session.reset();  // release buffers and the context in order
  return 0;
}
