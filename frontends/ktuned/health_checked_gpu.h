// One GPU as the tuning loop sees it, recording whether its calls work, for gRPC health
// checking and GetDevices: a call that fails with kUnavailable or kInternal (the worker is
// gone, the driver or device failed) marks the GPU unhealthy, the next call that succeeds
// (a job starts with Info()) healthy again. Other errors are the request's, not the GPU's.
// A failing *candidate* is an OK Measurement and says nothing about the GPU. Health is
// tracked at this seam rather than from job results so that a job failing in the store or
// the registry does not blame the GPU.
//
// The Gpu calls come from the GPU's one queue thread (Gpu is not thread-safe); healthy()
// and why() from any thread. `on_change` runs on the calling thread after a change.
#ifndef KTUNE_SERVER_SERVICE_HEALTH_CHECKED_GPU_H_
#define KTUNE_SERVER_SERVICE_HEALTH_CHECKED_GPU_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/gpu/gpu.h"

namespace ktune {

class HealthCheckedGpu final : public Gpu {
 public:
  HealthCheckedGpu(std::unique_ptr<Gpu> gpu, std::function<void()> on_change)
      : gpu_(std::move(gpu)), on_change_(std::move(on_change)) {}

  absl::StatusOr<v1::DeviceInfo> Info() override { return Record(gpu_->Info()); }
  absl::StatusOr<v1::Ceiling> MeasureCeiling() override {
    return Record(gpu_->MeasureCeiling());
  }
  absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& problem) override {
    return Record(gpu_->SetProblem(problem));
  }
  absl::StatusOr<v1::Measurement> Measure(const v1::KernelBinary& candidate,
                                          const v1::TimingOptions& timing) override {
    return Record(gpu_->Measure(candidate, timing));
  }
  absl::StatusOr<v1::Measurement> Retime(const v1::KernelBinary& candidate,
                                         const v1::TimingOptions& timing) override {
    return Record(gpu_->Retime(candidate, timing));
  }

  bool healthy() const;
  // Why not healthy; empty when healthy.
  std::string why() const;

 private:
  // Records what `s` says of the GPU; true when its health changed.
  bool Note(const absl::Status& s);

  template <typename T>
  absl::StatusOr<T> Record(absl::StatusOr<T> result) {
    if (Note(result.status()) && on_change_) on_change_();
    return result;
  }

  const std::unique_ptr<Gpu> gpu_;
  const std::function<void()> on_change_;
  mutable absl::Mutex mu_;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;  // it answered Info() at start
  std::string why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_HEALTH_CHECKED_GPU_H_
