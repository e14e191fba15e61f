// What the guided search strategy knows about a candidate before it is compiled: its
// params and knobs, and what binding it for the key's shape says about its launches (threads
// per block, blocks, waves over the device's SMs, dynamic shared memory, bytes moved).
//
// Plain functions; thread-safe.
#ifndef KTUNE_SERVER_TUNING_CANDIDATE_FEATURES_H_
#define KTUNE_SERVER_TUNING_CANDIDATE_FEATURES_H_

#include <memory>
#include <vector>

#include "server/base/config.h"
#include "server/templates/instance.h"
#include "server/templates/kernel_template.h"
#include "server/templates/shape.h"
#include "server/templates/target.h"

namespace ktune {

// The params in name order, then maxrregcount, min blocks, fast math and whether the
// target is the arch-specific one. Every config of one space gives the same length.
std::vector<double> ConfigFeatures(const Config& config);

// ConfigFeatures, then the bound launches' figures: threads per block and blocks of the
// largest launch, its waves over the device's SMs, the largest dynamic shared memory, the
// number of launches and the cost model's bytes.
std::vector<double> CandidateFeatures(const Instance& instance, const TargetInfo& target);

// CandidateFeatures of every config of a key's space, in its order, as the guided strategy
// takes them (StrategyOptions::features); empty if any config no longer binds, which leaves
// the strategy its params-only features.
std::vector<std::vector<double>> SpaceFeatures(std::shared_ptr<const KernelTemplate> tmpl,
                                               DType dtype, const Shape& shape,
                                               const std::vector<Config>& space,
                                               const TargetInfo& target);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_CANDIDATE_FEATURES_H_
