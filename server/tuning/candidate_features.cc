#include "server/tuning/candidate_features.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace ktune {

std::vector<double> ConfigFeatures(const Config& config) {
  std::vector<double> f;
  f.reserve(config.params.size() + 4);
  for (const auto& [name, value] : config.params) f.push_back(static_cast<double>(value));
  f.push_back(static_cast<double>(config.knobs.maxrregcount));
  f.push_back(static_cast<double>(config.knobs.min_blocks));
  f.push_back(config.knobs.fast_math ? 1 : 0);
  f.push_back(absl::EndsWith(config.knobs.target, "a") ? 1 : 0);
  return f;
}

std::vector<double> CandidateFeatures(const Instance& instance, const TargetInfo& target) {
  std::vector<double> f = ConfigFeatures(instance.config);
  double threads = 0, blocks = 0, smem = 0;
  for (const BoundLaunch& l : instance.launches) {
    const double b = static_cast<double>(l.grid[0]) * l.grid[1] * l.grid[2];
    if (b >= blocks) {
      blocks = b;
      threads = static_cast<double>(l.block[0]) * l.block[1] * l.block[2];
    }
    smem = std::max(smem, static_cast<double>(l.shared_bytes));
  }
  f.push_back(threads);
  f.push_back(blocks);
  f.push_back(target.sm_count > 0 ? blocks / target.sm_count : blocks);
  f.push_back(smem);
  f.push_back(static_cast<double>(instance.launches.size()));
  f.push_back(static_cast<double>(instance.bytes));
  return f;
}

std::vector<std::vector<double>> SpaceFeatures(std::shared_ptr<const KernelTemplate> tmpl,
                                               DType dtype, const Shape& shape,
                                               const std::vector<Config>& space,
                                               const TargetInfo& target) {
  std::vector<std::vector<double>> out;
  out.reserve(space.size());
  for (const Config& c : space) {
    absl::StatusOr<BindResult> bound = Bind(tmpl, dtype, shape, c, target);
    if (!bound.ok() || !bound->instance) return {};  // the space binds; be safe
    out.push_back(CandidateFeatures(*bound->instance, target));
  }
  return out;
}

}  // namespace ktune
