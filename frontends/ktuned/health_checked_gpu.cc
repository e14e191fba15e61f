#include "frontends/ktuned/health_checked_gpu.h"

namespace ktune {

bool HealthCheckedGpu::healthy() const {
  absl::MutexLock lock(&mu_);
  return healthy_;
}

std::string HealthCheckedGpu::why() const {
  absl::MutexLock lock(&mu_);
  return why_;
}

bool HealthCheckedGpu::Note(const absl::Status& s) {
  absl::MutexLock lock(&mu_);
  if (s.ok()) {
    const bool changed = !healthy_;
    healthy_ = true;
    why_.clear();
    return changed;
  }
  if (s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kInternal) {
    const bool changed = healthy_;
    healthy_ = false;
    why_ = s.ToString();
    return changed;
  }
  return false;
}

}  // namespace ktune
