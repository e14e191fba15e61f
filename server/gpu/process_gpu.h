// A Gpu (gpu.h) backed by a `ktune-worker` child process that speaks worker.proto over its
// stdin/stdout. The child is the only process that touches the GPU, so a candidate that
// faults (poisoning the CUDA context for good) or never ends (only SIGKILL stops it) costs a
// restart, not the service: the parent kills the child's process group, reaps it, reports
// the candidate as `timed_out` or `crashed`, and on the next call starts a fresh worker,
// re-sends the remembered problem and checks the new worker reproduces the reference's
// output digest before it measures anything again.
//
// NOT thread-safe: one caller at a time per GPU (gpu.h). Several ProcessGpus (one per GPU)
// may live in one process and be used from different threads.
//
// Signals: the first StartProcessGpu sets SIGPIPE to SIG_IGN in this process when it is
// still SIG_DFL, so a worker that dies mid-request shows up as EPIPE, not as the death of
// the caller. Workers get SIGPIPE back at its default.
#ifndef KTUNE_SERVER_GPU_PROCESS_GPU_H_
#define KTUNE_SERVER_GPU_PROCESS_GPU_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/gpu/gpu.h"

namespace ktune {

struct ProcessGpuOptions {
  // The ktune-worker executable; started as `worker_path --ordinal N`.
  std::string worker_path;
  // Which visible GPU the worker serves.
  int ordinal = 0;
  // Floor of every per-candidate deadline. A hang is ended only by SIGKILL and a fresh
  // worker costs ~0.25 s (measured on the GPU test host), so a deadline far below a second
  // buys nothing but false `timed_out`s.
  int64_t min_deadline_ms = 1000;
  // First contact of every worker: driver init + context creation.
  int64_t hello_deadline_ms = 30000;
  int64_t ceiling_deadline_ms = 60000;
  // Allocating + filling large buffers and running the reference once.
  int64_t problem_deadline_ms = 120000;
  // Restarts allowed between two SetProblem calls, so a template whose candidates keep
  // crashing or hanging can't loop forever; past it, Measure is kResourceExhausted until
  // the next SetProblem.
  int max_restarts_per_problem = 50;
  // How long a worker gets to exit by itself (after its stdin is closed, or after it
  // reported a poisoned context) before it is SIGKILLed.
  int64_t shutdown_grace_ms = 2000;
};

// Starts the worker process (it is greeted lazily, by the first call). kNotFound /
// kPermissionDenied when `worker_path` can't be executed, kInvalidArgument for bad options.
//
// Outcomes Measure makes itself (OK Measurements, the worker replaced by the next call):
//   - `timed_out`: no answer within MeasureDeadlineMs; the worker's group was SIGKILLed.
//   - `crashed`: the worker died mid-request (detail: its exit status or signal), or it
//     answered `crashed` or a poisoned WorkerError (it exits with status 3 after those).
// A worker that exits with status 3 without answering was leaving over an earlier
// request's poisoned context; the candidate is retried once on a fresh worker.
//
// Errors of the returned Gpu's methods, beyond those of gpu.h:
//   - The first Hello's failure is cached: Info() and every later call return it, with the
//     worker's code (kUnavailable with the driver's reason when there is no driver/GPU).
//   - A worker that could not be brought back after a crash (spawn, Hello, or the
//     re-sent problem failed, or its reference output digest differs from the first
//     worker's) makes the Gpu unusable for good: kInternal / kUnavailable, saying why, from
//     that call and every later one. Make a new one to try again.
//   - kResourceExhausted from Measure once max_restarts_per_problem is spent.
//   - kInternal for a malformed response; the worker is killed and restarted by the next
//     call.
absl::StatusOr<std::unique_ptr<Gpu>> StartProcessGpu(const ProcessGpuOptions& options);

// The deadline for one MeasureCandidate, in milliseconds (exposed for tests and logs):
//
//   max(min_deadline_ms,
//       cap + 20 * ref * (warmup + max_repeats + 10) + 4 ns * problem_buffer_bytes)
//
// with cap, warmup and max_repeats as ResolveTiming(timing) plans them (timing_plan.h),
// ref = the reference's time in ms. Why: the worker stops repeating
// once `cap` of timing is spent, but the runs outside the cap (verification, warm-up, the
// sample that crosses the cap, host-side sync and L2 flushes) are not bounded by it; a
// candidate 20x slower than the plain reference kernel on every one of them is still let
// finish (slower than that, it is worthless as a winner). 4 ns per buffer byte (~250 MB/s)
// covers copying outputs back and comparing them on the host. The floor keeps short
// problems from being killed by scheduling noise. Too generous costs only time on a real
// hang; too tight loses good candidates as `timed_out`.
int64_t MeasureDeadlineMs(const ProcessGpuOptions& options, const v1::TimingOptions& timing,
                          double reference_time_ns, int64_t problem_buffer_bytes);

// The environment ktune-worker starts with, from `env` (the parent's, NAME=VALUE entries,
// null-terminated): the worker runs untrusted kernels, so it gets what the driver and its
// loader need and nothing else of the daemon's (credentials, proxies, tokens). Kept: PATH,
// HOME, TMPDIR, TZ, LANG, LD_LIBRARY_PATH and the LC_*, CUDA_*, NVIDIA_*, __NV*, __GL_* and
// KTUNE_* variables, plus every variable whose name starts with one of the comma-separated
// prefixes in $KTUNE_WORKER_ENV (an operator's escape hatch).
std::vector<std::string> WorkerEnvironment(const char* const* env);

}  // namespace ktune

#endif  // KTUNE_SERVER_GPU_PROCESS_GPU_H_
