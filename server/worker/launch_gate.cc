#include "server/worker/launch_gate.h"

#include <atomic>

#include "server/base/status_macros.h"
#include "server/worker/launch_gate_ptx.h"

namespace ktune {

absl::StatusOr<LaunchGate> LaunchGate::Load(Driver* driver) {
  LaunchGate g;
  g.driver_ = driver;
  KTUNE_ASSIGN_OR_RETURN(g.module_, Module::Load(driver, kLaunchGatePtx));
  KTUNE_ASSIGN_OR_RETURN(g.function_, g.module_.Function("ktune_launch_gate"));
  KTUNE_ASSIGN_OR_RETURN(g.flag_, MappedHostMemory::Allocate(driver, sizeof(uint32_t)));
  static_cast<volatile uint32_t*>(g.flag_.host())[0] = 0;
  return g;
}

absl::Status LaunchGate::Close(CUstream stream) {
  // The flag holds the last generation opened; this gate waits for the next one.
  CUdeviceptr flag = flag_.device();
  unsigned value = ++generation_;
  unsigned long long timeout = kTimeoutNs;
  void* params[] = {&flag, &value, &timeout};
  return KTUNE_CU(driver_, LaunchKernel, function_, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

void LaunchGate::Open() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  static_cast<volatile uint32_t*>(flag_.host())[0] = generation_;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace ktune
