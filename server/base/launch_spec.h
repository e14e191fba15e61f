// One kernel launch of an artifact (lowered name, geometry, argument names) and its JSON
// form as stored.
//
// A plain value type and pure functions; thread-compatible.
#ifndef KTUNE_SERVER_BASE_LAUNCH_SPEC_H_
#define KTUNE_SERVER_BASE_LAUNCH_SPEC_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ktune {

// One kernel launch of an artifact: enough to call cuLaunchKernel (or cuLaunchKernelEx).
struct LaunchSpec {
  std::string lowered_name;  // mangled name in the cubin
  std::array<uint32_t, 3> grid = {1, 1, 1};
  std::array<uint32_t, 3> block = {1, 1, 1};
  uint32_t shared_bytes = 0;  // dynamic shared memory
  std::vector<std::string> args;  // manifest arg names, in order
  // May be launched with programmatic stream serialization (the manifest's
  // Launch.programmatic, for a target of sm_90 or later).
  bool programmatic = false;

  friend bool operator==(const LaunchSpec& a, const LaunchSpec& b) {
    return a.lowered_name == b.lowered_name && a.grid == b.grid && a.block == b.block &&
           a.shared_bytes == b.shared_bytes && a.args == b.args &&
           a.programmatic == b.programmatic;
  }
};

std::string LaunchesToJson(const std::vector<LaunchSpec>& launches);
std::optional<std::vector<LaunchSpec>> LaunchesFromJson(absl::string_view json,
                                                        std::string* error);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_LAUNCH_SPEC_H_
