#include "server/tuning/catalog.h"

#include <utility>

#include "server/base/status_macros.h"

namespace ktune {

absl::StatusOr<std::vector<CatalogEntry>> ListCatalogEntries(store::Store& store,
                                                             const TemplateRegistry& registry,
                                                             const std::string& nvrtc_version,
                                                             const store::EntryFilter& filter,
                                                             bool stale_only) {
  KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> entries, store.ListEntries(filter));
  std::vector<CatalogEntry> out;
  for (store::EntrySummary& e : entries) {
    bool stale = e.nvrtc_version != nvrtc_version;
    if (auto t = registry.Get(e.key.template_id); t.ok()) {
      stale = stale || e.source_hash != (*t)->source_hash();
    }
    if (stale_only && !stale) continue;
    out.push_back({std::move(e), stale});
  }
  return out;
}

double StoredCopyGbps(store::Store& store, const std::string& model) {
  absl::StatusOr<store::Device> stored = store.GetDevice(model);
  return stored.ok() ? stored->copy_gbps : 0;
}

}  // namespace ktune
