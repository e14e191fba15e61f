#include "frontends/ktune/cache/cache_common.h"

#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/base/paths.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/base/status_macros.h"
#include "frontends/ktune/commands.h"

namespace ktune::cli {

std::string CacheDbPath(const std::string& db_flag) {
  return db_flag.empty() ? DefaultDbPath() : db_flag;
}

absl::StatusOr<std::unique_ptr<store::Store>> OpenCacheReadOnly(const std::string& path) {
  store::StoreOptions options;
  options.read_only = true;
  return store::OpenSqliteStore(path, options);
}

int FailOpen(const absl::Status& status) {
  std::cerr << "ktune: --db: " << status.message() << "\n";
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

CacheView OpenCacheView(const std::string& path, const store::EntryFilter& filter,
                        const std::optional<std::string>& nvrtc_version) {
  CacheView view;
  absl::StatusOr<std::unique_ptr<store::Store>> store = OpenCacheReadOnly(path);
  if (!store.ok()) {
    view.exit_code = FailOpen(store.status());
    return view;
  }
  absl::StatusOr<std::vector<store::EntrySummary>> entries = (*store)->ListEntries(filter);
  if (!entries.ok()) {
    view.exit_code = Fail(entries.status());
    return view;
  }
  if (nvrtc_version) {
    absl::StatusOr<std::set<int64_t>> stale = StaleIds(**store, *nvrtc_version);
    if (!stale.ok()) {
      view.exit_code = Fail(stale.status());
      return view;
    }
    view.stale = *std::move(stale);
  }
  view.store = *std::move(store);
  view.entries = *std::move(entries);
  return view;
}

std::string NvrtcVersionOr(const std::string& flag) {
  return flag.empty() ? NvrtcVersionString() : flag;
}

absl::StatusOr<std::set<int64_t>> StaleIds(store::Store& store, const std::string& nvrtc_version) {
  KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> stale, store.ListStale(nvrtc_version));
  std::set<int64_t> ids;
  for (const store::EntrySummary& s : stale) ids.insert(s.id);
  return ids;
}

absl::StatusOr<store::EntryBundle> LoadEntryBundle(store::Store& store, int64_t entry_id) {
  store::EntryBundle b;
  KTUNE_ASSIGN_OR_RETURN(store::Lookup found, store.GetEntry(entry_id));
  b.entry = std::move(found.entry);
  if (b.entry.job_id != 0) {
    KTUNE_ASSIGN_OR_RETURN(b.job, store.GetJob(b.entry.job_id));
    KTUNE_ASSIGN_OR_RETURN(b.trials, store.ListTrials(b.entry.job_id));
  } else {
    // The job was pruned: the entry's own tuning stats stand in for it.
    b.job.key = b.entry.key;
    b.job.source_hash = b.entry.source_hash;
    b.job.nvrtc_version = b.entry.nvrtc_version;
    b.job.state = store::JobState::kDone;
    b.job.done = b.job.total = b.entry.trials_total;
    b.job.created_unix_ms = b.job.updated_unix_ms = b.entry.created_unix_ms;
  }
  return b;
}

std::string KeyText(const store::EntryKey& key) {
  return absl::StrCat(key.template_id, "/", key.dtype, "/", key.shape);
}

std::string UtcTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

absl::StatusOr<absl::Duration> ParseAge(const std::string& text, const std::string& flag) {
  absl::Duration d;
  int64_t n = 0;
  const char unit = text.empty() ? '\0' : text.back();
  if ((unit == 'd' || unit == 'w') && absl::SimpleAtoi(text.substr(0, text.size() - 1), &n)) {
    d = absl::Hours(24) * n * (unit == 'w' ? 7 : 1);
  } else if (!absl::ParseDuration(text, &d)) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", text, "' is not a duration; e.g. 30d, 2w, 12h or 90m"));
  }
  if (d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", text, "' must be positive"));
  }
  return d;
}

store::EntryFilter EntryFilterFromFlags(const std::string& template_id, const std::string& dtype,
                                        const std::string& device_model) {
  store::EntryFilter filter;
  if (!template_id.empty()) filter.template_id = template_id;
  if (!dtype.empty()) filter.dtype = dtype;
  if (!device_model.empty()) filter.device_model = device_model;
  return filter;
}

}  // namespace ktune::cli
