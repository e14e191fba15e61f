// Whether stored launches are the ones the template gives for their key and config: an
// entry from outside (an import file, the fleet's shared tier) carries its own launches and
// cubin, and a kernel launched with another geometry, other args or another instance's code
// than its manifest binds would run on the caller's buffers unchecked.
#ifndef KTUNE_SERVER_TUNING_LAUNCH_CHECK_H_
#define KTUNE_SERVER_TUNING_LAUNCH_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/base/launch_spec.h"
#include "server/templates/instance.h"

namespace ktune {

// Whether `lowered` (a kernel's symbol in a cubin) is the kernel `expression` names:
// NVRTC's mangled name of the template instance, demangled, without its return type and
// parameter list (spaces ignored); or, for a symbol that is not mangled, the expression
// itself.
bool SymbolNamesKernel(const std::string& lowered, const std::string& expression);

// OK when `launches` are `instance`'s: as many, each of the instance's kernel (by
// SymbolNamesKernel) with its grid, block, dynamic shared memory and args, and programmatic
// only where the instance's launch is (false where it is true passes). Otherwise
// kInvalidArgument naming "launches[i].<field>" and both values.
absl::Status CheckLaunchesMatch(const Instance& instance, const std::vector<LaunchSpec>& launches);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_LAUNCH_CHECK_H_
