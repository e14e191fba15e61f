// What the search space needs to know of the GPU it is tuning for.
//
// Plain value; thread-compatible. The GPU module fills it from the device; tools without a
// GPU build it from an --arch flag (TargetFromArch).
#ifndef KTUNE_SERVER_TEMPLATES_TARGET_H_
#define KTUNE_SERVER_TEMPLATES_TARGET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune {

struct TargetInfo {
  int sm = 90;  // compute capability as major * 10 + minor
  // Whether the arch-specific target sm_XYa exists (compute capability 9.0 and later).
  bool has_arch_specific = true;
  int sm_count = 132;
  int max_threads_per_sm = 2048;
  int registers_per_sm = 65536;
  int max_threads_per_block = 1024;
  // Opt-in maximum of dynamic + static shared memory per block, bytes (227 KiB on sm_90).
  int64_t max_shared_per_block = 232448;

  std::string PortableTarget() const;      // "sm_90"
  std::string ArchSpecificTarget() const;  // "sm_90a"
};

// Sets the architecture of `target` from a compute capability: sm = major * 10 + minor, the
// arch-specific target sm_XYa from 9.0 on, and the architecture's resident threads per SM.
// Every device description (a live GPU's, a stored one's, an --arch flag) becomes a target
// through here.
void SetComputeCapability(int cc_major, int cc_minor, TargetInfo* target);

// "sm_90" or "sm_90a" -> the target of an H200-class device of that architecture
// (SM count 132 unless told otherwise). kInvalidArgument for anything else.
absl::StatusOr<TargetInfo> TargetFromArch(absl::string_view arch);

}  // namespace ktune

#endif  // KTUNE_SERVER_TEMPLATES_TARGET_H_
