// `ktune cache ls/stats --remote URL`, `push`, `pull` and `import --publish`: the fleet's
// shared tier on Redis (server/fleet/redis_tier.h), read and written directly. Unlike
// ktuned, which degrades when Redis is out, these fail (exit 1) naming the URL: a person
// asked for the tier.
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "frontends/ktune/cache/cache_common.h"
#include "frontends/ktune/commands.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/base/status_macros.h"
#include "server/fleet/redis_tier.h"
#include "server/tuning/remote_check.h"

namespace ktune::cli {
namespace {

absl::StatusOr<std::unique_ptr<fleet::RemoteTier>> OpenRemote(const RemoteFlags& flags) {
  absl::StatusOr<fleet::RedisTierOptions> o =
      fleet::RedisTierOptionsFromFlags(flags.url, flags.password_file, flags.ca);
  if (!o.ok()) return o.status();
  o->connect.timeout = absl::Seconds(5);  // a person waits; a daemon's calls are shorter
  return fleet::NewRedisTier(*std::move(o));
}

std::string Publisher() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return absl::StrCat("ktune@", host);
}

bool Selected(const store::EntryKey& k, const RemoteSelection& s) {
  return (s.template_id.empty() || k.template_id == s.template_id) &&
         (s.dtype.empty() || k.dtype == s.dtype) &&
         (s.device_model.empty() || k.device_model == s.device_model);
}

// The tier's records the selection names, in key order; the undecodable ones counted.
struct Listing {
  std::string tier;  // its URL
  std::vector<fleet::RemoteRecord> records;
  int64_t undecodable = 0;
};

absl::StatusOr<Listing> ListSelected(const RemoteFlags& flags, const RemoteSelection& s) {
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<fleet::RemoteTier> tier, OpenRemote(flags));
  Listing out;
  out.tier = tier->name();
  KTUNE_ASSIGN_OR_RETURN(std::vector<fleet::RemoteRecord> all, tier->List(&out.undecodable));
  for (fleet::RemoteRecord& r : all) {
    if (Selected(r.bundle.entry.key, s)) out.records.push_back(std::move(r));
  }
  std::sort(out.records.begin(), out.records.end(),
            [](const fleet::RemoteRecord& a, const fleet::RemoteRecord& b) {
              return fleet::RemoteKeyString(fleet::RemoteKeyOf(a.bundle.entry)) <
                     fleet::RemoteKeyString(fleet::RemoteKeyOf(b.bundle.entry));
            });
  return out;
}

// A failure to reach the tier: exit 1, naming it (the status already does).
int FailRemote(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kInvalidArgument) return Fail(s);
  std::fprintf(stderr, "ktune: %s\n", std::string(s.message()).c_str());
  return kExitFailure;
}

}  // namespace

int RunCacheRemoteLs(const CacheRemoteLsArgs& args) {
  absl::StatusOr<Listing> listing = ListSelected(args.remote, args.selection);
  if (!listing.ok()) return FailRemote(listing.status());
  const std::vector<fleet::RemoteRecord>* records = &listing->records;
  const int64_t undecodable = listing->undecodable;
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const fleet::RemoteRecord& r : *records) {
      const store::Entry& e = r.bundle.entry;
      nlohmann::json params = nlohmann::json::object();
      for (const auto& [k, v] : e.config.params) params[k] = v;
      out.push_back({{"key", KeyText(e.key)},
                     {"device_model", e.key.device_model},
                     {"params", params},
                     {"time_ns", e.metrics.time_ns},
                     {"cubin_bytes", e.cubin.size()},
                     {"source_hash", e.source_hash},
                     {"nvrtc_version", e.nvrtc_version},
                     {"trials", r.bundle.trials.size()},
                     {"publisher", r.publisher},
                     {"created_unix_ms", e.created_unix_ms}});
    }
    std::printf("%s\n", out.dump(1).c_str());
    return kExitOk;
  }
  std::printf("%-40s  %-32s  %-24s  %9s  %6s  %6s  %s\n", "KEY", "DEVICE", "PARAMS", "TIME_US",
              "TRIALS", "NVRTC", "PUBLISHER");
  for (const fleet::RemoteRecord& r : *records) {
    const store::Entry& e = r.bundle.entry;
    std::printf("%-40s  %-32s  %-24s  %9s  %6zu  %6s  %s\n", KeyText(e.key).c_str(),
                e.key.device_model.c_str(), ParamsText(e.config.params).c_str(),
                Us(e.metrics.time_ns).c_str(), r.bundle.trials.size(), e.nvrtc_version.c_str(),
                r.publisher.c_str());
  }
  std::printf("%zu entries in %s", records->size(), listing->tier.c_str());
  if (undecodable > 0) std::printf(" (%lld records that do not decode)", static_cast<long long>(undecodable));
  std::printf("\n");
  return kExitOk;
}

int RunCacheRemoteStats(const CacheRemoteLsArgs& args) {
  absl::StatusOr<Listing> listing = ListSelected(args.remote, args.selection);
  if (!listing.ok()) return FailRemote(listing.status());
  const std::vector<fleet::RemoteRecord>* records = &listing->records;
  const int64_t undecodable = listing->undecodable;
  std::map<std::pair<std::string, std::string>, int> per;
  std::map<std::string, int> publishers;
  int64_t bytes = 0, trials = 0;
  for (const fleet::RemoteRecord& r : *records) {
    ++per[{r.bundle.entry.key.device_model, r.bundle.entry.key.template_id}];
    ++publishers[r.publisher];
    bytes += static_cast<int64_t>(r.bundle.entry.cubin.size());
    trials += static_cast<int64_t>(r.bundle.trials.size());
  }
  std::printf("remote    %s\n", listing->tier.c_str());
  std::printf("entries   %zu (%lld cubin bytes, %lld trials)\n", records->size(),
              static_cast<long long>(bytes), static_cast<long long>(trials));
  std::printf("undecodable records  %lld\n", static_cast<long long>(undecodable));
  std::printf("\n%-40s  %-16s  %s\n", "DEVICE", "TEMPLATE", "ENTRIES");
  for (const auto& [k, n] : per) std::printf("%-40s  %-16s  %d\n", k.first.c_str(), k.second.c_str(), n);
  std::printf("\n%-40s  %s\n", "PUBLISHER", "ENTRIES");
  for (const auto& [p, n] : publishers) std::printf("%-40s  %d\n", p.c_str(), n);
  return kExitOk;
}

absl::Status PublishBundles(const RemoteFlags& remote, const std::vector<store::Device>& devices,
                            const std::vector<store::EntryBundle>& bundles, int* stored,
                            int* kept) {
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<fleet::RemoteTier> tier, OpenRemote(remote));
  std::map<std::string, store::Device> by_model;
  for (const store::Device& d : devices) by_model[d.model_key] = d;
  const std::string publisher = Publisher();
  for (const store::EntryBundle& b : bundles) {
    fleet::RemoteRecord r;
    r.bundle = b;
    if (auto it = by_model.find(b.entry.key.device_model); it != by_model.end()) {
      r.device = it->second;
    }
    r.publisher = publisher;
    KTUNE_ASSIGN_OR_RETURN(fleet::PublishOutcome out, tier->Publish(r));
    const bool was_stored = out == fleet::PublishOutcome::kStored;
    ++*(was_stored ? stored : kept);
    std::printf("%s  %s: %s us\n", was_stored ? "published" : "kept     ",
                KeyText(b.entry.key).c_str(), Us(b.entry.metrics.time_ns).c_str());
  }
  return absl::OkStatus();
}

int RunCachePush(const CachePushArgs& args) {
  const std::string path = CacheDbPath(args.db);
  const CacheView view = OpenCacheView(path, EntryFilterFromFlags(args.selection.template_id,
                                                                  args.selection.dtype,
                                                                  args.selection.device_model));
  if (view.exit_code != 0) return view.exit_code;
  std::vector<store::EntryBundle> bundles;
  for (const store::EntrySummary& s : view.entries) {
    absl::StatusOr<store::EntryBundle> b = LoadEntryBundle(*view.store, s.id);
    if (!b.ok()) return Fail(b.status());
    bundles.push_back(*std::move(b));
  }
  absl::StatusOr<std::vector<store::Device>> devices = view.store->ListDevices();
  if (!devices.ok()) return Fail(devices.status());
  int stored = 0, kept = 0;
  if (absl::Status s = PublishBundles(args.remote, *devices, bundles, &stored, &kept); !s.ok()) {
    return FailRemote(s);
  }
  std::printf("pushed %zu entries from %s to %s: %d published, %d kept (as fast or faster there)\n",
              bundles.size(), path.c_str(), args.remote.url.c_str(), stored, kept);
  return kExitOk;
}

int RunCachePull(const CachePullArgs& args) {
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry = LoadRegistryOrWarn(args.templates_dir);
  if (!registry.ok()) return Fail(registry.status());
  absl::StatusOr<Listing> listing = ListSelected(args.remote, args.selection);
  if (!listing.ok()) return FailRemote(listing.status());
  const std::vector<fleet::RemoteRecord>* records = &listing->records;
  const int64_t undecodable = listing->undecodable;

  const std::string path = CacheDbPath(args.db);
  if (args.db.empty()) {
    if (absl::Status s = MakeDirs(DefaultCacheDir()); !s.ok()) return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<store::Store>> store = store::OpenSqliteStore(path);
  if (!store.ok()) return FailOpen(store.status());
  absl::StatusOr<std::vector<store::Device>> known = (*store)->ListDevices();
  if (!known.ok()) return Fail(known.status());
  const std::string nvrtc = NvrtcVersionOr(args.nvrtc_version);
  std::map<std::string, store::Device> devices;  // one row per model
  std::vector<store::EntryBundle> bundles;
  int refused = 0, other_nvrtc = 0;
  for (const fleet::RemoteRecord& r : *records) {
    if (r.bundle.entry.nvrtc_version != nvrtc) {
      ++other_nvrtc;  // stale here: it would only push a fresh local entry aside
      continue;
    }
    if (absl::Status s = CheckRemoteRecord(**registry, *known, fleet::RemoteKeyOf(r.bundle.entry), r);
        !s.ok()) {
      ++refused;
      std::printf("refused   %s (published by %s): %s\n", KeyText(r.bundle.entry.key).c_str(),
                  r.publisher.c_str(), std::string(s.message()).c_str());
      continue;
    }
    if (r.device) devices.emplace(r.device->model_key, *r.device);
    bundles.push_back(r.bundle);
  }
  std::vector<store::Device> device_rows;
  for (const auto& [model, d] : devices) device_rows.push_back(d);
  absl::StatusOr<std::vector<store::ImportResult>> results =
      (*store)->ImportEntries(device_rows, bundles, store::ConflictRule::kKeepFaster);
  if (!results.ok()) return Fail(results.status());
  int added = 0, replaced = 0, kept = 0;
  for (const store::ImportResult& r : *results) {
    switch (r.action) {
      case store::ImportResult::Action::kAdded: ++added; break;
      case store::ImportResult::Action::kReplaced: ++replaced; break;
      case store::ImportResult::Action::kKeptExisting: ++kept; break;
    }
  }
  std::printf("pulled from %s into %s: %d added, %d replaced, %d kept existing (as fast or "
              "faster), %d refused, %d of another NVRTC version skipped, %lld undecodable\n",
              listing->tier.c_str(), path.c_str(), added, replaced, kept, refused, other_nvrtc,
              static_cast<long long>(undecodable));
  return refused > 0 || undecodable > 0 ? kExitFailure : kExitOk;
}

}  // namespace ktune::cli
