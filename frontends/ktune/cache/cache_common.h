// What the `ktune cache` subcommands share: opening the store file, the text of keys,
// configs and times, staleness, and the runners that live outside cache_command.cc.
//
// Plain functions; thread-compatible (the CLI is single-threaded).
#ifndef KTUNE_CLIENT_CLI_CACHE_CACHE_COMMON_H_
#define KTUNE_CLIENT_CLI_CACHE_CACHE_COMMON_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/base/knobs.h"
#include "server/store/store.h"

namespace ktune::cli {

// --db: "" means the daemon's default file.
std::string CacheDbPath(const std::string& db_flag);

// Opens the store at `path` read-only: never creates, migrates or writes it, and works
// while ktuned writes (WAL). Errors name the path.
absl::StatusOr<std::unique_ptr<store::Store>> OpenCacheReadOnly(const std::string& path);

// The entries the filter flags (--template, --dtype, --device-model) select; an empty flag
// selects every value.
store::EntryFilter EntryFilterFromFlags(const std::string& template_id, const std::string& dtype,
                                        const std::string& device_model);

// Reports a store that could not be opened: a missing, non-SQLite, corrupt or newer-schema
// file is bad input (exit 2); anything else (a lock held too long) is a failure (exit 1).
int FailOpen(const absl::Status& status);

// --nvrtc-version: "" means this build's NVRTC, the one ktuned and `ktune tune` stamp.
std::string NvrtcVersionOr(const std::string& flag);

// Ids of entries stale against the templates table and `nvrtc_version`.
absl::StatusOr<std::set<int64_t>> StaleIds(store::Store& store, const std::string& nvrtc_version);

// What most subcommands start from: the store at `path` opened read-only, the entries
// `filter` selects and, when `nvrtc_version` is given, the ids of the stale ones. On an error
// the view reports it (FailOpen for the open, Fail for the rest) and holds only the exit
// code to return.
struct CacheView {
  int exit_code = 0;  // nonzero: failed and reported; nothing else is set
  std::unique_ptr<store::Store> store;
  std::vector<store::EntrySummary> entries;
  std::set<int64_t> stale;
};
CacheView OpenCacheView(const std::string& path, const store::EntryFilter& filter,
                        const std::optional<std::string>& nvrtc_version = std::nullopt);

// An entry with the job that tuned it and every trial of that job: what `show`, `report` and
// `export` present. A pruned job (the entry's job_id 0) is stood in for by the entry's own
// tuning stats, with no trials.
absl::StatusOr<store::EntryBundle> LoadEntryBundle(store::Store& store, int64_t entry_id);

// "rmsnorm/f16/hidden=4096,tokens=16": what `show` accepts (with "@DEVICE_MODEL" appended
// when more than one device model has the key).
std::string KeyText(const store::EntryKey& key);
std::string UtcTime(int64_t unix_ms);                 // "2023-11-14 22:13:21"

// "30d", "2w", or anything absl::ParseDuration takes ("12h", "90m"); kInvalidArgument
// naming `flag` otherwise or for a duration <= 0.
absl::StatusOr<absl::Duration> ParseAge(const std::string& text, const std::string& flag);

struct CacheExportArgs {
  std::string db;
  std::string file;
  std::string template_id, dtype, device_model;
};
int RunCacheExport(const CacheExportArgs& args);

// --remote URL, --remote-password-file FILE, --remote-ca FILE: the fleet's shared tier.
struct RemoteFlags {
  std::string url, password_file, ca;
};

// --template, --dtype, --device-model over the shared tier's records; empty: any.
struct RemoteSelection {
  std::string template_id, dtype, device_model;
};

// `ktune cache ls --remote` and `stats --remote` (cache/cache_remote.cc).
struct CacheRemoteLsArgs {
  RemoteFlags remote;
  RemoteSelection selection;
  bool json = false;
};
int RunCacheRemoteLs(const CacheRemoteLsArgs& args);
int RunCacheRemoteStats(const CacheRemoteLsArgs& args);

// `ktune cache push`: the local store's entries (with their trials and device rows) to the
// shared tier, compare-and-set per key.
struct CachePushArgs {
  std::string db;
  RemoteFlags remote;
  RemoteSelection selection;
};
int RunCachePush(const CachePushArgs& args);

// `ktune cache pull`: the shared tier's records for this build's NVRTC version, each checked
// as ktuned checks one (server/tuning/remote_check.h), into the local store (keep-faster).
// Exit 1 when a record was refused or did not decode (the others are imported).
struct CachePullArgs {
  std::string db;
  std::string templates_dir;
  std::string nvrtc_version;
  RemoteFlags remote;
  RemoteSelection selection;
};
int RunCachePull(const CachePullArgs& args);

// Publishes `bundles` to the tier (the device rows from `devices` where their model is
// there), printing one line per entry; counts into *stored and *kept.
absl::Status PublishBundles(const RemoteFlags& remote, const std::vector<store::Device>& devices,
                            const std::vector<store::EntryBundle>& bundles, int* stored, int* kept);

struct CacheImportArgs {
  std::string db;
  std::string file;
  std::string templates_dir;  // what every entry is checked against ("" = shipped)
  std::string on_conflict = "keep-faster";
  std::string nvrtc_version;
  bool allow_nvrtc_mismatch = false;
  bool allow_other_device = false;
  bool dry_run = false;
  // --publish: the imported entries also go to the shared tier --remote names.
  bool publish = false;
  RemoteFlags remote;
};
int RunCacheImport(const CacheImportArgs& args);

struct CachePruneArgs {
  std::string db;
  std::string nvrtc_version;
  bool stale = false;
  std::string older_than;
  bool dry_run = false;
};
int RunCachePrune(const CachePruneArgs& args);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_CACHE_CACHE_COMMON_H_
