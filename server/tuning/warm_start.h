// Warm starts: the configs a new key's search tries right after the default, taken from what
// the store already knows about its neighbours. Shapes of one template that are near each
// other (4096 vs 8192 tokens) or equal under another dtype tend to share their best tiles
// and vector widths, so their winners and leaders are a better first guess than any spread.
//
// Reads the store only; thread-safe as the store is.
#ifndef KTUNE_SERVER_TUNING_WARM_START_H_
#define KTUNE_SERVER_TUNING_WARM_START_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/base/config.h"
#include "server/base/dtype.h"
#include "server/store/store.h"
#include "server/templates/shape.h"

namespace ktune {

struct WarmStartOptions {
  int neighbours = 4;  // stored keys to take configs from, nearest first
  int leaders = 3;     // from each, its winner and this many of its job's fastest trials
};

// The winners and leaders of the stored keys of `model` and `template_name` nearest to
// `shape` (ShapeDistance; the same shape under another dtype counts as nearest, then this
// dtype's neighbours, then the other dtypes'), the key itself excluded, fastest first within
// each key and without repeats. Entries from another template source or NVRTC version are
// used too: a config's quality outlives the cubin it was compiled to.
absl::StatusOr<std::vector<Config>> WarmStartConfigs(store::Store& store,
                                                     const std::string& model,
                                                     const std::string& template_name,
                                                     DType dtype, const Shape& shape,
                                                     const WarmStartOptions& options = {});

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_WARM_START_H_
