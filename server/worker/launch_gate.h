// Holds a stream until the host has enqueued everything behind the gate, so a timed batch
// of launches runs back to back on the GPU instead of at the rate the host enqueues them:
// launch_gate.cu's kernel spinning on a word of mapped host memory that Open stores to.
//
//   gate.Close(stream);          // the stream waits from here
//   ... record the start event, launch, record the stop event ...
//   gate.Open();                 // everything behind it runs
//
// Thread-compatible; every call on the current context (the one the gate was loaded in).
#ifndef KTUNE_SERVER_WORKER_LAUNCH_GATE_H_
#define KTUNE_SERVER_WORKER_LAUNCH_GATE_H_

#include <cuda.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/worker/driver.h"

namespace ktune {

class LaunchGate {
 public:
  // How long a closed gate waits for Open before it lets the stream go by itself.
  static constexpr uint64_t kTimeoutNs = 1'000'000'000;

  // Loads the kernel (the driver JITs the PTX) and its flag. An error where the driver
  // cannot: the caller then times without a gate.
  static absl::StatusOr<LaunchGate> Load(Driver* driver);
  LaunchGate() = default;

  // Enqueues the closed gate on `stream`. Open must follow, whatever is enqueued between.
  absl::Status Close(CUstream stream);
  // Opens the gate Close enqueued last (a store the GPU sees). No driver call.
  void Open();

 private:
  Module module_;
  CUfunction function_ = nullptr;
  Driver* driver_ = nullptr;
  MappedHostMemory flag_;  // one 32-bit word
  uint32_t generation_ = 0;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_LAUNCH_GATE_H_
