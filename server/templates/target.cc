#include "server/templates/target.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ktune {

void SetComputeCapability(int cc_major, int cc_minor, TargetInfo* target) {
  target->sm = cc_major * 10 + cc_minor;
  target->has_arch_specific = cc_major >= 9;
  // Resident threads per SM are the architecture's (CUDA's published limits): 1024 on
  // Turing, 1536 on the consumer Ampere, Ada and Blackwell parts, 2048 elsewhere. They size
  // grid-stride grids, so a device known only by its compute capability (a stored one, an
  // --arch flag) must bind as a live one of that architecture does.
  const int sm = target->sm;
  target->max_threads_per_sm =
      sm == 75 ? 1024 : (sm == 86 || sm == 87 || sm == 89 || sm >= 120) ? 1536 : 2048;
}

std::string TargetInfo::PortableTarget() const { return absl::StrCat("sm_", sm); }
std::string TargetInfo::ArchSpecificTarget() const { return absl::StrCat("sm_", sm, "a"); }

absl::StatusOr<TargetInfo> TargetFromArch(absl::string_view arch) {
  absl::string_view digits = arch;
  if (!absl::ConsumePrefix(&digits, "sm_")) {
    return absl::InvalidArgumentError(
        absl::StrCat("arch '", arch, "': expected sm_XY or sm_XYa, e.g. sm_90a"));
  }
  absl::ConsumeSuffix(&digits, "a");
  int sm = 0;
  if (!absl::SimpleAtoi(digits, &sm) || sm < 50 || sm > 199) {
    return absl::InvalidArgumentError(
        absl::StrCat("arch '", arch, "': expected sm_XY or sm_XYa, e.g. sm_90a"));
  }
  TargetInfo t;
  SetComputeCapability(sm / 10, sm % 10, &t);
  if (absl::EndsWith(arch, "a") && !t.has_arch_specific) {
    return absl::InvalidArgumentError(
        absl::StrCat("arch '", arch, "': arch-specific targets start at sm_90a"));
  }
  // Threads per SM and shared memory per block of the common architectures; sm_90's figures
  // for anything newer until a device says otherwise.
  if (sm == 75) t.max_threads_per_sm = 1024;
  if (sm == 86 || sm == 89) t.max_threads_per_sm = 1536;
  if (sm < 80) t.max_shared_per_block = 65536;
  else if (sm == 80) t.max_shared_per_block = 166912;
  else if (sm < 90) t.max_shared_per_block = 101376;
  return t;
}

}  // namespace ktune
