// The request handler of ktune-worker: one Request in, one Response out, independent of
// the pipes so tests can drive it directly (worker_main.cc only adds the framing).
//
//   Hello          -> DeviceInfo: loads the driver, retains the GPU's primary context.
//   MeasureCeiling -> Ceiling: device-to-device copy bandwidth, median of timed copies.
//   Problem        -> ProblemReady: allocates and fills the buffers, runs the reference once
//                     and keeps its outputs as the expected result.
//   MeasureCandidate -> Measurement: loads the cubin, checks launch limits, runs it on the
//                     problem's inputs, compares, then times it (warm-up, L2 flushed, CUDA
//                     events, adaptive repeats). A failing candidate is a Measurement with its
//                     outcome; WorkerError is for requests the worker could not serve.
//
// After a sticky CUDA error (a candidate that faulted: outcome "crashed", or a WorkerError
// with poisoned set) poisoned() is true for good: the caller sends that response and exits,
// and the parent starts a fresh worker.
//
// Not thread-safe: one caller, always the same thread (the CUDA context is current on it).
#ifndef KTUNE_SERVER_WORKER_WORKER_SESSION_H_
#define KTUNE_SERVER_WORKER_WORKER_SESSION_H_

#include <memory>
#include <string>
#include <vector>

#include "ktune/v1/worker.pb.h"

namespace ktune {

// One output (OUTPUT or INOUT) buffer of the current problem, as a run left it.
struct WorkerOutput {
  std::string name;   // the argument's name
  std::string dtype;  // "f32", "f16", "bf16", "i32"
  std::string bytes;  // count elements of dtype; empty when the last run never read it back
};

class WorkerSession {
 public:
  virtual ~WorkerSession() = default;

  // Answers one request. Never fails as a call: errors become Response.error with an
  // absl::StatusCode (UNAVAILABLE without driver or GPU, FAILED_PRECONDITION for a request
  // out of order, INVALID_ARGUMENT for a malformed one, RESOURCE_EXHAUSTED for memory).
  virtual v1::Response Handle(const v1::Request& request) = 0;

  // Whether the CUDA context is unusable; the worker must exit after its last response.
  virtual bool poisoned() const = 0;

  // The current problem's output buffers, in argument order, as the last checked run read
  // them back: after a Problem, the reference's results; after a MeasureCandidate, the
  // candidate's (outcome ok or wrong_result; empty bytes when it failed before its outputs
  // were read, or when they were checked on the GPU and KeepOutputs was not asked for).
  // Empty without a problem. The worker protocol never carries outputs (the worker compares
  // them itself); this is for tests that check the kernels themselves against a host
  // reference (tests/kernels).
  virtual std::vector<WorkerOutput> LastOutputs() const = 0;

  // With `keep`, every check also reads the candidate's outputs back for LastOutputs, where
  // the GPU compares them (the outcome is still the GPU's). Off by default: the worker reads
  // back nothing it does not need.
  virtual void KeepOutputs(bool keep) = 0;
};

// `ordinal` >= 0 pins the GPU (ktune-worker --ordinal N): a Hello for another ordinal is
// INVALID_ARGUMENT. -1 serves the ordinal the first Hello names.
std::unique_ptr<WorkerSession> NewWorkerSession(int ordinal = -1);

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_WORKER_SESSION_H_
