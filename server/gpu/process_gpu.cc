#include "server/gpu/process_gpu.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "server/base/dtype.h"
#include "server/base/outcome.h"
#include "server/base/piped_child.h"
#include "server/base/status_macros.h"
#include "server/gpu/framing.h"
#include "server/gpu/timing_plan.h"

extern char** environ;

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

// ktune-worker's exit status after it reported a poisoned CUDA context.
constexpr int kPoisonedExitStatus = 3;
// After SIGKILL a process normally vanishes in microseconds, but one inside the GPU driver
// can take seconds to be torn down (3 s seen on the GPU test host); past this, a detached
// thread reaps it.
constexpr int64_t kReapAfterKillMs = 10000;
// Request pipe capacity (Linux caps unprivileged processes at 1 MiB by default). A frame
// that fits is written even by a worker that is not reading, which WriteFrame, having no
// timeout, would otherwise wait for forever.
constexpr int kRequestPipeBytes = 1 << 20;

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Sleeps a little longer each time it is called, up to 5 ms: prompt for processes that
// exit at once, cheap for those that take seconds.
class Backoff {
 public:
  void Wait() {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    us_ = std::min(us_ * 2, 5000);
  }

 private:
  int us_ = 100;
};

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);  // Linux releases the descriptor even on EINTR: no retry.
  fd = -1;
}

// How a reaped process ended, for Measurement.detail and Status messages.
struct ExitInfo {
  bool known = false;  // false when it was already reaped elsewhere or would not die
  int wait_status = 0;
  std::string text;

  bool poisoned_exit() const {
    return known && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kPoisonedExitStatus;
  }
};

ExitInfo DescribeWaitStatus(int status) {
  ExitInfo info{true, status, ""};
  if (WIFEXITED(status)) {
    info.text = absl::StrCat("exited with status ", WEXITSTATUS(status));
    if (WEXITSTATUS(status) == kPoisonedExitStatus) {
      absl::StrAppend(&info.text, " (its CUDA context was poisoned)");
    }
  } else if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    info.text = absl::StrCat("killed by signal ", sig, " (", name ? name : "?", ")");
    if (WCOREDUMP(status)) absl::StrAppend(&info.text, ", core dumped");
  } else {
    info.text = absl::StrCat("ended with wait status ", status);
  }
  return info;
}

// True once `pid` has exited (or is not our child any more), without reaping it: its
// process group stays addressable until it is reaped.
bool WaitForExit(pid_t pid, int64_t timeout_ms) {
  const auto start = Clock::now();
  Backoff backoff;
  for (;;) {
    siginfo_t si;
    si.si_pid = 0;
    int r = ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && si.si_pid == pid) return true;
    if (r < 0 && errno != EINTR) return true;  // ECHILD: reaped already (SIGCHLD ignored)
    if (MsSince(start) >= timeout_ms) return false;
    backoff.Wait();
  }
}

// Reaps `pid`, which has been sent SIGKILL. A process stuck in the driver past
// kReapAfterKillMs is left to a detached thread, so it never stays a zombie.
ExitInfo Reap(pid_t pid) {
  const auto start = Clock::now();
  Backoff backoff;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return DescribeWaitStatus(status);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ExitInfo{false, 0, "exit status unknown (reaped elsewhere)"};
    if (MsSince(start) >= kReapAfterKillMs) {
      std::thread([pid] {
        int ignored;
        while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
        }
      }).detach();
      return ExitInfo{false, 0,
                      absl::StrCat("still not gone ", kReapAfterKillMs, " ms after SIGKILL")};
    }
    backoff.Wait();
  }
}

int64_t ProblemBufferBytes(const v1::Problem& problem) {
  int64_t bytes = 0;
  for (const v1::ArgSpec& arg : problem.args()) {
    if (!arg.is_buffer()) continue;
    std::optional<DType> t = ParseDType(arg.dtype());
    bytes += std::max<int64_t>(arg.count(), 0) * (t ? DTypeSize(*t) : 8);
  }
  return bytes;
}

// The code a WorkerError carries, or kInternal when it is not a usable one.
absl::StatusCode WorkerErrorCode(const v1::WorkerError& e) {
  if (e.code() <= 0 || e.code() > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::StatusCode::kInternal;
  }
  return static_cast<absl::StatusCode>(e.code());
}

absl::string_view ResponseKind(const v1::Response& r) {
  switch (r.kind_case()) {
    case v1::Response::kDevice:
      return "DeviceInfo";
    case v1::Response::kCeiling:
      return "Ceiling";
    case v1::Response::kProblemReady:
      return "ProblemReady";
    case v1::Response::kMeasurement:
      return "Measurement";
    case v1::Response::kError:
      return "WorkerError";
    case v1::Response::KIND_NOT_SET:
      break;
  }
  return "an empty Response";
}

class ProcessGpu final : public Gpu {
 public:
  explicit ProcessGpu(ProcessGpuOptions options) : options_(std::move(options)) {}

  ~ProcessGpu() override { StopWorker(options_.shutdown_grace_ms); }

  ProcessGpu(const ProcessGpu&) = delete;
  ProcessGpu& operator=(const ProcessGpu&) = delete;

  absl::Status Spawn();

  absl::StatusOr<v1::DeviceInfo> Info() override;
  absl::StatusOr<v1::Ceiling> MeasureCeiling() override;
  absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& problem) override;
  absl::StatusOr<v1::Measurement> Measure(const v1::KernelBinary& candidate,
                                          const v1::TimingOptions& timing) override {
    return MeasureOnWorker(candidate, timing, /*skip_check=*/false);
  }
  absl::StatusOr<v1::Measurement> Retime(const v1::KernelBinary& candidate,
                                         const v1::TimingOptions& timing) override {
    return MeasureOnWorker(candidate, timing, /*skip_check=*/true);
  }

 private:
  absl::StatusOr<v1::Measurement> MeasureOnWorker(const v1::KernelBinary& candidate,
                                                  const v1::TimingOptions& timing,
                                                  bool skip_check);

  // The fate of one request/response exchange with the worker.
  enum class Transport {
    kAnswered,      // `response` holds the worker's answer
    kNotSent,       // the request was refused before any byte went out (too big)
    kNotDelivered,  // the worker was gone before it could read the request
    kTimedOut,      // no complete answer before the deadline
    kDied,          // end of file: the worker exited (or closed stdout) mid-request
    kMalformed,     // bytes that are not a Response, or an I/O error
  };
  struct Exchange {
    Transport transport = Transport::kAnswered;
    absl::Status status;  // why, unless kAnswered
    v1::Response response;
  };

  Exchange Call(const v1::Request& request, int64_t deadline_ms);

  // Call() for everything but MeasureCandidate: a transport failure stops the worker and
  // becomes a Status; so does a WorkerError (which stops it too when poisoned).
  absl::StatusOr<v1::Response> CallOrStatus(const v1::Request& request, int64_t deadline_ms,
                                            absl::string_view what);

  // Measure's reading of an answered MeasureCandidate from `who`: a measurement, a
  // poisoned context (the candidate crashed), or a WorkerError as a Status.
  absl::StatusOr<v1::Measurement> MeasurementFromAnswer(const std::string& who,
                                                        v1::Response response);

  // Makes sure a greeted worker is running and, when `with_problem`, that it holds the
  // current problem (re-sending it, which counts as a restart). A failure to bring a
  // worker up makes the Gpu unusable, except for a spent restart budget.
  absl::Status EnsureWorker(bool with_problem);
  absl::Status Greet();
  absl::Status RestoreProblem();
  absl::Status MarkUnusable(const absl::Status& why);

  // Closes the worker's stdin, gives it `grace_ms` to exit, SIGKILLs its process group and
  // reaps it. No-op without a worker.
  ExitInfo StopWorker(int64_t grace_ms);

  std::string Who() const {
    return absl::StrCat("ktune-worker for GPU ", options_.ordinal, " (pid ", pid_, ")");
  }

  const ProcessGpuOptions options_;

  // The current worker; pid_ < 0 when there is none.
  pid_t pid_ = -1;
  int to_worker_ = -1;        // its stdin
  int from_worker_ = -1;      // its stdout
  bool greeted_ = false;      // it answered Hello
  bool has_problem_ = false;  // it holds *problem_

  // Sticky: once set, every call returns it.
  absl::Status unusable_;
  bool ever_greeted_ = false;

  std::optional<v1::DeviceInfo> info_;
  std::optional<v1::Ceiling> ceiling_;  // the first measurement, kept for later calls
  std::optional<v1::Problem> problem_;  // set by the last successful SetProblem
  v1::ProblemReady ready_;
  int64_t problem_bytes_ = 0;
  int restarts_ = 0;  // problem re-sends since SetProblem
};

absl::Status ProcessGpu::Spawn() {
  const std::vector<std::string> env = WorkerEnvironment(environ);
  PipedChildOptions o;
  o.program = options_.worker_path;
  o.args = {"--ordinal", std::to_string(options_.ordinal)};
  o.env = &env;
  o.own_process_group = true;
  o.stdin_pipe_bytes = kRequestPipeBytes;
  KTUNE_ASSIGN_OR_RETURN(PipedChild child, StartPipedChild(o));
  pid_ = child.pid;
  to_worker_ = child.to;
  from_worker_ = child.from;
  greeted_ = false;
  has_problem_ = false;
  return absl::OkStatus();
}

ExitInfo ProcessGpu::StopWorker(int64_t grace_ms) {
  if (pid_ < 0) return ExitInfo{};
  CloseFd(to_worker_);  // end of file: a healthy worker exits on it
  if (grace_ms > 0) WaitForExit(pid_, grace_ms);
  // Kill the group before reaping: until then the pgid can't be reused.
  ::kill(-pid_, SIGKILL);
  ExitInfo exit = Reap(pid_);
  CloseFd(from_worker_);
  pid_ = -1;
  greeted_ = false;
  has_problem_ = false;
  return exit;
}

ProcessGpu::Exchange ProcessGpu::Call(const v1::Request& request, int64_t deadline_ms) {
  Exchange x;
  absl::Status w = WriteFrame(to_worker_, request);
  if (!w.ok()) {
    x.status = w;
    if (absl::IsInvalidArgument(w)) {
      x.transport = Transport::kNotSent;
    } else if (absl::IsUnavailable(w)) {
      x.transport = Transport::kNotDelivered;
    } else {
      x.transport = Transport::kMalformed;
    }
    return x;
  }
  absl::Status r = ReadFrame(from_worker_, &x.response, deadline_ms);
  x.status = r;
  if (r.ok()) {
    x.transport = Transport::kAnswered;
  } else if (absl::IsDeadlineExceeded(r)) {
    x.transport = Transport::kTimedOut;
  } else if (absl::IsUnavailable(r)) {
    x.transport = Transport::kDied;
  } else {
    x.transport = Transport::kMalformed;
  }
  return x;
}

absl::StatusOr<v1::Response> ProcessGpu::CallOrStatus(const v1::Request& request,
                                                      int64_t deadline_ms, absl::string_view what) {
  const std::string who = Who();
  Exchange x = Call(request, deadline_ms);
  switch (x.transport) {
    case Transport::kAnswered:
      break;
    case Transport::kNotSent:
      return x.status;
    case Transport::kNotDelivered:
    case Transport::kDied: {
      ExitInfo exit = StopWorker(options_.shutdown_grace_ms);
      return absl::InternalError(absl::StrCat(who, " died during ", what, ": ", exit.text));
    }
    case Transport::kTimedOut:
      StopWorker(0);
      return absl::DeadlineExceededError(absl::StrCat(who, ": no answer to ", what, " within ",
                                                      deadline_ms, " ms; the worker was killed"));
    case Transport::kMalformed:
      StopWorker(0);
      return absl::InternalError(absl::StrCat(who, ": bad response to ", what, " (",
                                              x.status.message(), "); the worker was killed"));
  }
  if (x.response.has_error()) {
    const v1::WorkerError& e = x.response.error();
    if (e.poisoned()) StopWorker(options_.shutdown_grace_ms);
    return absl::Status(WorkerErrorCode(e), absl::StrCat(who, ": ", e.message()));
  }
  return std::move(x.response);
}

absl::Status ProcessGpu::Greet() {
  v1::Request request;
  request.mutable_hello()->set_ordinal(options_.ordinal);
  absl::StatusOr<v1::Response> response =
      CallOrStatus(request, options_.hello_deadline_ms, "Hello (driver init + context)");
  if (!response.ok()) {
    // A worker that can't even say hello leaves no GPU to use, whatever the transport said.
    if (absl::IsDeadlineExceeded(response.status()) || absl::IsInternal(response.status())) {
      StopWorker(0);
      return absl::UnavailableError(response.status().message());
    }
    StopWorker(0);
    return response.status();
  }
  if (!response->has_device()) {
    const std::string who = Who();
    StopWorker(0);
    return absl::InternalError(absl::StrCat(who, " answered Hello with ", ResponseKind(*response)));
  }
  const v1::DeviceInfo& device = response->device();
  if (info_.has_value() && (device.name() != info_->name() || device.uuid() != info_->uuid() ||
                            device.ordinal() != info_->ordinal())) {
    const std::string who = Who();
    StopWorker(0);
    return absl::InternalError(absl::StrCat(who, " reports a different GPU (", device.name(), " ",
                                            device.uuid(), ") than the first worker (",
                                            info_->name(), " ", info_->uuid(), ")"));
  }
  if (!info_.has_value()) info_ = device;
  greeted_ = true;
  ever_greeted_ = true;
  return absl::OkStatus();
}

absl::Status ProcessGpu::RestoreProblem() {
  v1::Request request;
  *request.mutable_set_problem() = *problem_;
  KTUNE_ASSIGN_OR_RETURN(v1::Response response, CallOrStatus(request, options_.problem_deadline_ms,
                                                             "the re-sent problem"));
  if (!response.has_problem_ready()) {
    StopWorker(0);
    return absl::InternalError(
        absl::StrCat("answered the re-sent problem with ", ResponseKind(response)));
  }
  const std::string& digest = response.problem_ready().output_digest();
  if (digest != ready_.output_digest()) {
    const std::string who = Who();
    StopWorker(0);
    return absl::InternalError(
        absl::StrCat(who, " computed reference output digest '", digest,
                     "', but the first worker computed '", ready_.output_digest(),
                     "' for the same problem: the GPU no longer reproduces a known-good kernel"));
  }
  has_problem_ = true;
  return absl::OkStatus();
}

absl::Status ProcessGpu::MarkUnusable(const absl::Status& why) {
  StopWorker(0);
  if (!ever_greeted_) {
    // The first contact failed: no driver, no such GPU, or no worker. Report as is.
    unusable_ = why;
  } else {
    const absl::StatusCode code = absl::IsUnavailable(why) || absl::IsDeadlineExceeded(why)
                                      ? absl::StatusCode::kUnavailable
                                      : absl::StatusCode::kInternal;
    unusable_ = absl::Status(
        code, absl::StrCat("GPU ", options_.ordinal,
                           " is unusable: a replacement ktune-worker (after a crash, hang "
                           "or bad answer) failed: ",
                           why.message()));
  }
  return unusable_;
}

absl::Status ProcessGpu::EnsureWorker(bool with_problem) {
  if (!unusable_.ok()) return unusable_;
  // A worker that left while idle (it exits after reporting a poisoned context) is
  // replaced before it is sent anything, so its death is never blamed on the next request.
  if (pid_ >= 0 && greeted_ && WaitForExit(pid_, 0)) StopWorker(0);
  const bool restore = with_problem && problem_.has_value() && !(pid_ >= 0 && has_problem_);
  if (restore) {
    if (restarts_ >= options_.max_restarts_per_problem) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ktune-worker for GPU ", options_.ordinal, " was restarted ", restarts_,
          " times for this problem (max_restarts_per_problem): its candidates keep crashing "
          "or hanging; set a new problem to go on"));
    }
    ++restarts_;
  }
  if (pid_ < 0) {
    if (absl::Status s = Spawn(); !s.ok()) return MarkUnusable(s);
  }
  if (!greeted_) {
    if (absl::Status s = Greet(); !s.ok()) return MarkUnusable(s);
  }
  if (restore) {
    if (absl::Status s = RestoreProblem(); !s.ok()) return MarkUnusable(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::DeviceInfo> ProcessGpu::Info() {
  if (!unusable_.ok()) return unusable_;
  if (info_.has_value()) return *info_;
  KTUNE_RETURN_IF_ERROR(EnsureWorker(/*with_problem=*/false));
  return *info_;
}

absl::StatusOr<v1::Ceiling> ProcessGpu::MeasureCeiling() {
  if (ceiling_.has_value()) return *ceiling_;
  KTUNE_RETURN_IF_ERROR(EnsureWorker(/*with_problem=*/false));
  v1::Request request;
  request.mutable_ceiling();
  KTUNE_ASSIGN_OR_RETURN(v1::Response response,
                         CallOrStatus(request, options_.ceiling_deadline_ms, "MeasureCeiling"));
  if (!response.has_ceiling()) {
    const std::string who = Who();
    StopWorker(0);
    return absl::InternalError(
        absl::StrCat(who, " answered MeasureCeiling with ", ResponseKind(response)));
  }
  ceiling_ = response.ceiling();
  return *ceiling_;
}

absl::StatusOr<v1::ProblemReady> ProcessGpu::SetProblem(const v1::Problem& problem) {
  if (!unusable_.ok()) return unusable_;
  problem_.reset();
  has_problem_ = false;
  restarts_ = 0;
  KTUNE_RETURN_IF_ERROR(EnsureWorker(/*with_problem=*/false));
  v1::Request request;
  *request.mutable_set_problem() = problem;
  KTUNE_ASSIGN_OR_RETURN(
      v1::Response response,
      CallOrStatus(request, options_.problem_deadline_ms,
                   "SetProblem (allocating and filling buffers, running the reference)"));
  if (!response.has_problem_ready()) {
    const std::string who = Who();
    StopWorker(0);
    return absl::InternalError(
        absl::StrCat(who, " answered SetProblem with ", ResponseKind(response)));
  }
  problem_ = problem;
  ready_ = response.problem_ready();
  problem_bytes_ = ProblemBufferBytes(problem);
  has_problem_ = true;
  return ready_;
}

absl::StatusOr<v1::Measurement> ProcessGpu::MeasureOnWorker(const v1::KernelBinary& candidate,
                                                            const v1::TimingOptions& timing,
                                                            bool skip_check) {
  if (!unusable_.ok()) return unusable_;
  if (!problem_.has_value()) {
    return absl::FailedPreconditionError("Measure needs a successful SetProblem first");
  }
  const int64_t deadline_ms =
      MeasureDeadlineMs(options_, timing, ready_.reference_time_ns(), problem_bytes_);
  v1::Request request;
  *request.mutable_measure()->mutable_candidate() = candidate;
  *request.mutable_measure()->mutable_timing() = timing;
  request.mutable_measure()->set_skip_check(skip_check);

  // At most one retry, for a worker that turns out to have been leaving before it saw
  // this candidate: its death belongs to an earlier request, not to this candidate.
  for (int attempt = 0;; ++attempt) {
    KTUNE_RETURN_IF_ERROR(EnsureWorker(/*with_problem=*/true));
    const std::string who = Who();
    Exchange x = Call(request, deadline_ms);
    v1::Measurement m;
    switch (x.transport) {
      case Transport::kAnswered:
        break;
      case Transport::kNotSent:
        return x.status;
      case Transport::kNotDelivered: {
        ExitInfo exit = StopWorker(options_.shutdown_grace_ms);
        if (attempt == 0) continue;
        return absl::InternalError(
            absl::StrCat(who, " was gone before it could read the candidate, twice: ", exit.text));
      }
      case Transport::kTimedOut:
        StopWorker(0);
        m.set_outcome(std::string(OutcomeName(Outcome::kTimedOut)));
        m.set_detail(absl::StrCat("no answer within the deadline of ", deadline_ms,
                                  " ms; the worker was killed"));
        return m;
      case Transport::kDied: {
        ExitInfo exit = StopWorker(options_.shutdown_grace_ms);
        // Exit status 3 without an answer: it left over a context poisoned earlier.
        if (exit.poisoned_exit() && attempt == 0) continue;
        m.set_outcome(std::string(OutcomeName(Outcome::kCrashed)));
        m.set_detail(absl::StrCat("the worker died while measuring: ", exit.text));
        return m;
      }
      case Transport::kMalformed:
        StopWorker(0);
        return absl::InternalError(
            absl::StrCat(who, ": bad response to MeasureCandidate (", x.status.message(),
                         "); the worker was killed and the next call starts another"));
    }

    return MeasurementFromAnswer(who, std::move(x.response));
  }
}

absl::StatusOr<v1::Measurement> ProcessGpu::MeasurementFromAnswer(const std::string& who,
                                                                  v1::Response response) {
  v1::Measurement m;
  if (response.has_measurement()) {
    m = std::move(*response.mutable_measurement());
    if (m.outcome() == OutcomeName(Outcome::kCrashed)) {
      // The worker's context is poisoned and it exits (status 3) after this answer.
      ExitInfo exit = StopWorker(options_.shutdown_grace_ms);
      if (!exit.text.empty()) {
        m.set_detail(m.detail().empty() ? absl::StrCat("the worker ", exit.text)
                                        : absl::StrCat(m.detail(), "; the worker ", exit.text));
      }
    }
    return m;
  }
  if (response.has_error()) {
    const v1::WorkerError& e = response.error();
    if (e.poisoned()) {
      // The context died during this candidate's request: count it as the candidate's
      // crash. If the GPU itself went bad, the restart's digest check says so.
      ExitInfo exit = StopWorker(options_.shutdown_grace_ms);
      m.set_outcome(std::string(OutcomeName(Outcome::kCrashed)));
      m.set_detail(absl::StrCat("the worker's context was poisoned: ", e.message(),
                                exit.text.empty() ? "" : "; the worker ", exit.text));
      return m;
    }
    return absl::Status(WorkerErrorCode(e), absl::StrCat(who, ": ", e.message()));
  }
  StopWorker(0);
  return absl::InternalError(
      absl::StrCat(who, " answered MeasureCandidate with ", ResponseKind(response)));
}

}  // namespace

int64_t MeasureDeadlineMs(const ProcessGpuOptions& options, const v1::TimingOptions& timing,
                          double reference_time_ns, int64_t problem_buffer_bytes) {
  const TimingPlan plan = ResolveTiming(timing);
  const double cap_ms = plan.time_cap_ms;
  const double warmup = static_cast<double>(plan.warmup);
  const double max_repeats = static_cast<double>(plan.max_repeats);
  const double ref_ms = reference_time_ns > 0 ? reference_time_ns / 1e6 : 0.0;
  const double bytes = problem_buffer_bytes > 0 ? static_cast<double>(problem_buffer_bytes) : 0;
  double ms = cap_ms + 20.0 * ref_ms * (warmup + max_repeats + 10) + 4e-6 * bytes;
  // A day is "forever" for a candidate; it also keeps the cast below defined.
  constexpr double kMaxMs = 24.0 * 3600 * 1000;
  if (!std::isfinite(ms) || ms > kMaxMs) ms = kMaxMs;
  return std::max<int64_t>(options.min_deadline_ms, static_cast<int64_t>(std::ceil(ms)));
}

std::vector<std::string> WorkerEnvironment(const char* const* env) {
  std::vector<std::string> keep_exact = {"PATH", "HOME", "TMPDIR", "TZ", "LANG",
                                         "LD_LIBRARY_PATH"};
  std::vector<std::string> keep_prefix = {"LC_", "CUDA_", "NVIDIA_", "__NV", "__GL_", "KTUNE_"};
  for (const char* const* e = env; e != nullptr && *e != nullptr; ++e) {
    if (absl::StartsWith(*e, "KTUNE_WORKER_ENV=")) {
      for (absl::string_view p : absl::StrSplit(*e + 17, ',', absl::SkipWhitespace())) {
        keep_prefix.emplace_back(p);
      }
    }
  }
  std::vector<std::string> out;
  for (const char* const* e = env; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const absl::string_view name = entry.substr(0, entry.find('='));
    bool keep = std::find(keep_exact.begin(), keep_exact.end(), name) != keep_exact.end();
    for (const std::string& p : keep_prefix) keep |= absl::StartsWith(name, p);
    if (keep && name.size() < entry.size()) out.emplace_back(entry);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Gpu>> StartProcessGpu(const ProcessGpuOptions& options) {
  if (options.worker_path.empty()) {
    return absl::InvalidArgumentError("ProcessGpuOptions.worker_path is empty");
  }
  if (options.ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProcessGpuOptions.ordinal is negative: ", options.ordinal));
  }
  if (options.min_deadline_ms <= 0 || options.hello_deadline_ms <= 0 ||
      options.ceiling_deadline_ms <= 0 || options.problem_deadline_ms <= 0) {
    return absl::InvalidArgumentError("ProcessGpuOptions deadlines must be positive");
  }
  auto gpu = std::make_unique<ProcessGpu>(options);
  KTUNE_RETURN_IF_ERROR(gpu->Spawn());
  return std::unique_ptr<Gpu>(std::move(gpu));
}

}  // namespace ktune
