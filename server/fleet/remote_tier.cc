#include "server/fleet/remote_tier.h"

#include "absl/strings/str_cat.h"

namespace ktune::fleet {

std::string RemoteKeyString(const RemoteKey& k) {
  return absl::StrCat(k.key.device_model, "|", k.key.template_id, "|", k.key.dtype, "|",
                      k.key.shape, "|", k.source_hash, "|", k.nvrtc_version);
}

RemoteKey RemoteKeyOf(const store::Entry& e) {
  return RemoteKey{e.key, e.source_hash, e.nvrtc_version};
}

}  // namespace ktune::fleet
