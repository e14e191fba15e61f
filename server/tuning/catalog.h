// What the store holds, as a front end lists it: the entries with whether each is stale
// (tuned by another NVRTC, or from a template source that has changed since), and what a
// device model measured. ktuned's ListEntries and GetDevices answer from here, so the gRPC
// layer only converts.
//
// Thread-safe as far as the store is (Store's contract); the registry is immutable.
#ifndef KTUNE_SERVER_TUNING_CATALOG_H_
#define KTUNE_SERVER_TUNING_CATALOG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/store.h"
#include "server/templates/registry.h"

namespace ktune {

struct CatalogEntry {
  store::EntrySummary summary;
  // Its NVRTC version is not `nvrtc_version`, or its template is loaded and its source hash
  // differs. An entry of a template that is not loaded is judged by NVRTC alone.
  bool stale = false;
};

// The entries `filter` selects, in the store's order; only the stale ones when `stale_only`.
// The store's error when it cannot list.
absl::StatusOr<std::vector<CatalogEntry>> ListCatalogEntries(store::Store& store,
                                                             const TemplateRegistry& registry,
                                                             const std::string& nvrtc_version,
                                                             const store::EntryFilter& filter,
                                                             bool stale_only);

// The copy bandwidth (GB/s) measured for device model `model`; 0 when none is stored or the
// store cannot say.
double StoredCopyGbps(store::Store& store, const std::string& model);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_CATALOG_H_
