#include "server/tuning/warm_start.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "server/base/status_macros.h"

namespace ktune {
namespace {

struct Neighbour {
  double distance = 0;
  bool other_dtype = false;
  const store::EntrySummary* entry = nullptr;
};

// Nearer first (the same shape under another dtype is at distance 0); at one distance,
// this dtype's key before the others'.
bool Before(const Neighbour& a, const Neighbour& b) {
  if (a.distance != b.distance) return a.distance < b.distance;
  return !a.other_dtype && b.other_dtype;
}

}  // namespace

absl::StatusOr<std::vector<Config>> WarmStartConfigs(store::Store& store,
                                                     const std::string& model,
                                                     const std::string& template_name,
                                                     DType dtype, const Shape& shape,
                                                     const WarmStartOptions& options) {
  store::EntryFilter filter;
  filter.device_model = model;
  filter.template_id = template_name;
  KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> entries, store.ListEntries(filter));
  const std::string own_dtype(DTypeName(dtype));
  const std::string own_shape = ShapeString(shape);
  std::vector<Neighbour> near;
  for (const store::EntrySummary& e : entries) {
    const bool other_dtype = e.key.dtype != own_dtype;
    if (!other_dtype && e.key.shape == own_shape) continue;  // the key itself (a re-tune)
    absl::StatusOr<Shape> s = ParseShape(e.key.shape);
    if (!s.ok()) continue;
    const double d = ShapeDistance(shape, *s);
    if (!std::isfinite(d)) continue;
    near.push_back({d, other_dtype, &e});
  }
  std::stable_sort(near.begin(), near.end(), Before);
  if (near.size() > static_cast<size_t>(options.neighbours)) near.resize(options.neighbours);

  std::vector<Config> out;
  std::set<Config> seen;
  auto add = [&](const Config& c) {
    if (seen.insert(c).second) out.push_back(c);
  };
  for (const Neighbour& n : near) {
    add(n.entry->config);
    if (n.entry->job_id == 0 || options.leaders <= 0) continue;
    absl::StatusOr<std::vector<store::Trial>> trials = store.ListTrials(n.entry->job_id);
    if (!trials.ok()) continue;  // a pruned job: the winner alone
    std::vector<const store::Trial*> ok;
    for (const store::Trial& t : *trials) {
      if (t.outcome == Outcome::kOk && t.metrics.time_ns > 0) ok.push_back(&t);
    }
    std::sort(ok.begin(), ok.end(), [](const store::Trial* a, const store::Trial* b) {
      return a->metrics.time_ns < b->metrics.time_ns;
    });
    for (size_t i = 0; i < ok.size() && i < static_cast<size_t>(options.leaders); ++i) {
      add(ok[i]->config);
    }
  }
  return out;
}

}  // namespace ktune
