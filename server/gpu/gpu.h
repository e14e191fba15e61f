// The tuning loop's view of one GPU: describe it, measure its copy ceiling, set the problem
// every candidate is checked against, and verify + time one candidate.
//
// Kept to a handful of methods so tests can fake it (tests/testing/fakes.h). The real
// one (process_gpu.h) runs everything in a `ktune-worker` child process that it kills and
// restarts when a candidate faults or hangs. Implementations are NOT thread-safe: one
// caller at a time per GPU (only one timing run may touch a GPU at a time).
#ifndef KTUNE_SERVER_GPU_GPU_H_
#define KTUNE_SERVER_GPU_GPU_H_

#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"

namespace ktune {

class Gpu {
 public:
  virtual ~Gpu() = default;

  // kUnavailable when no driver or no such GPU is present, with the reason.
  virtual absl::StatusOr<v1::DeviceInfo> Info() = 0;

  // Device-to-device copy bandwidth, bytes read + written per second, median of several
  // large copies: the ceiling every trial is compared against. Measured by the first call
  // that succeeds; later calls answer the same, so a caller may ask once per job.
  virtual absl::StatusOr<v1::Ceiling> MeasureCeiling() = 0;

  // Allocates and fills the problem's buffers and runs the reference once. An error here
  // is the service's (or the template's: a reference that faults), not a candidate's.
  virtual absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& problem) = 0;

  // Verifies and, if correct, times one candidate against the current problem. A failing
  // candidate is an OK Measurement with its outcome; a Status error means the GPU could
  // not be used at all (and the job should stop). REQUIRES: SetProblem succeeded.
  virtual absl::StatusOr<v1::Measurement> Measure(const v1::KernelBinary& candidate,
                                                  const v1::TimingOptions& timing) = 0;

  // Times again a candidate whose Measure against the current problem passed: the same as
  // Measure but for the check of its outputs (a fresh run on restored inputs, then every
  // output compared with the reference's: on the GPU, or read back where the worker cannot
  // run its check kernel), which a retime does not need. The default measures with it.
  virtual absl::StatusOr<v1::Measurement> Retime(const v1::KernelBinary& candidate,
                                                 const v1::TimingOptions& timing) {
    return Measure(candidate, timing);
  }
};

}  // namespace ktune

#endif  // KTUNE_SERVER_GPU_GPU_H_
