// The check a record from the fleet's shared tier passes before this host stores and serves
// it: what every import passes (import_check.h: template, dtype, shape, params, knobs,
// times, a cubin that is an ELF file matching its sha256 and holding every launch's
// kernel), and that the record is the one asked for: the same device model (a cubin for
// another GPU must never be served here), template, dtype, shape, template source and NVRTC
// version.
//
// Pure function of its arguments; thread-safe.
#ifndef KTUNE_SERVER_TUNING_REMOTE_CHECK_H_
#define KTUNE_SERVER_TUNING_REMOTE_CHECK_H_

#include <vector>

#include "absl/status/status.h"
#include "server/fleet/remote_tier.h"
#include "server/store/store.h"
#include "server/templates/registry.h"

namespace ktune {

// OK iff `record` may be served for `wanted`; otherwise kInvalidArgument saying what is
// wrong ("device model: ...", "cubin_sha256: does not match the cubin", ...).
absl::Status CheckRemoteRecord(const TemplateRegistry& registry,
                               const std::vector<store::Device>& known_devices,
                               const fleet::RemoteKey& wanted, const fleet::RemoteRecord& record);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_REMOTE_CHECK_H_
