// `ktune cache export`, `import` and `prune`: the subcommands that move or remove entries.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "frontends/ktune/cache/cache_common.h"
#include "frontends/ktune/commands.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/base/status_macros.h"
#include "server/store/export_file.h"
#include "server/tuning/import_check.h"

namespace ktune::cli {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string OnDevice(const store::EntryKey& key) {
  return absl::StrCat(KeyText(key), " on ", key.device_model);
}

// The device rows of the store at `path`, opened read-only; none when there is no file yet.
absl::StatusOr<std::vector<store::Device>> ListKnownDevices(const std::string& path) {
  if (!FileExists(path)) return std::vector<store::Device>{};
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<store::Store> store, OpenCacheReadOnly(path));
  return store->ListDevices();
}

}  // namespace

int RunCacheExport(const CacheExportArgs& args) {
  const std::string path = CacheDbPath(args.db);
  const CacheView view = OpenCacheView(
      path, EntryFilterFromFlags(args.template_id, args.dtype, args.device_model));
  if (view.exit_code != 0) return view.exit_code;
  store::Store& store = *view.store;

  store::ExportFile out;
  out.exported_unix_ms = absl::ToUnixMillis(absl::Now());
  std::set<std::string> models;
  size_t trials = 0;
  for (const store::EntrySummary& s : view.entries) {
    absl::StatusOr<store::EntryBundle> b = LoadEntryBundle(store, s.id);
    if (!b.ok()) return Fail(b.status());
    trials += b->trials.size();
    models.insert(s.key.device_model);
    out.entries.push_back(*std::move(b));
  }
  for (const std::string& model : models) {
    absl::StatusOr<store::Device> d = store.GetDevice(model);
    if (d.ok()) {
      out.devices.push_back(*std::move(d));
    } else if (d.status().code() != absl::StatusCode::kNotFound) {
      return Fail(d.status());
    }
  }
  if (absl::Status s = AtomicWriteFile(args.file, store::ExportToJson(out)); !s.ok()) {
    return Fail(s);
  }
  std::printf("exported %zu entries (%zu trials, %zu device models) from %s to %s\n",
              out.entries.size(), trials, out.devices.size(), path.c_str(), args.file.c_str());
  return kExitOk;
}

namespace {

// --on-conflict's value as a rule.
absl::StatusOr<store::ConflictRule> ParseConflictRule(const std::string& text) {
  if (text == "keep-faster") return store::ConflictRule::kKeepFaster;
  if (text == "keep-existing") return store::ConflictRule::kKeepExisting;
  if (text == "replace") return store::ConflictRule::kReplace;
  return absl::InvalidArgumentError(absl::StrCat(
      "--on-conflict: '", text, "'; expected keep-faster, keep-existing or replace"));
}

// Prints each entry this host does not take without --allow-* (another NVRTC, a device
// model the store has never seen) and returns how many.
size_t PrintRefusedEntries(const CacheImportArgs& args, const store::ExportFile& file,
                           const std::set<std::string>& known_models) {
  const std::string nvrtc = NvrtcVersionOr(args.nvrtc_version);
  size_t refused = 0;
  for (const store::EntryBundle& b : file.entries) {
    std::string why;
    if (!args.allow_nvrtc_mismatch && b.entry.nvrtc_version != nvrtc) {
      why = absl::StrCat("tuned with NVRTC ", b.entry.nvrtc_version, ", this host has ", nvrtc);
    } else if (!args.allow_other_device && !known_models.empty() &&
               known_models.count(b.entry.key.device_model) == 0) {
      why = "a device model this store has never seen (its GPUs are another model)";
    }
    if (!why.empty()) {
      ++refused;
      std::printf("refused   %s: %s\n", OnDevice(b.entry.key).c_str(), why.c_str());
    }
  }
  return refused;
}

// One line per imported entry (added, replaced, kept) and the totals.
void PrintImportResults(const CacheImportArgs& args, const std::string& path,
                        store::ConflictRule rule, const store::ExportFile& file,
                        const std::vector<store::ImportResult>& results) {
  int added = 0, replaced = 0, kept = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const store::ImportResult& r = results[i];
    const store::Entry& e = file.entries[i].entry;
    const std::string key = OnDevice(e.key);
    switch (r.action) {
      case store::ImportResult::Action::kAdded:
        ++added;
        std::printf("added     %s: %s us, entry %lld\n", key.c_str(), Us(e.metrics.time_ns).c_str(),
                    static_cast<long long>(r.entry_id));
        break;
      case store::ImportResult::Action::kReplaced:
        ++replaced;
        std::printf("replaced  %s: %s us (was %s us), entry %lld\n", key.c_str(),
                    Us(e.metrics.time_ns).c_str(), Us(r.existing_time_ns).c_str(),
                    static_cast<long long>(r.entry_id));
        break;
      case store::ImportResult::Action::kKeptExisting:
        ++kept;
        std::printf("kept      %s: existing %s us %s imported %s us, entry %lld\n", key.c_str(),
                    Us(r.existing_time_ns).c_str(),
                    rule == store::ConflictRule::kKeepExisting ? "(keep-existing) over"
                                                               : "is not slower than",
                    Us(e.metrics.time_ns).c_str(), static_cast<long long>(r.entry_id));
        break;
    }
  }
  std::printf("imported %s into %s: %d added, %d replaced, %d kept existing\n", args.file.c_str(),
              path.c_str(), added, replaced, kept);
}

}  // namespace

int RunCacheImport(const CacheImportArgs& args) {
  if (args.publish != !args.remote.url.empty()) {
    return Fail(absl::InvalidArgumentError(
        args.publish ? "--publish: needs --remote URL (the shared tier to publish to)"
                     : "--remote: given without --publish; say --publish to publish the import"));
  }
  absl::StatusOr<store::ConflictRule> rule = ParseConflictRule(args.on_conflict);
  if (!rule.ok()) return Fail(rule.status());
  absl::StatusOr<std::string> text = ReadFile(args.file);
  if (!text.ok()) return Fail(text.status());
  absl::StatusOr<store::ExportFile> file = store::ExportFromJson(*text, args.file);
  if (!file.ok()) {
    std::cerr << "ktune: " << file.status().message() << "\n";
    return kExitUsage;
  }

  // Checks against the target store, read-only: a refused import never creates or touches it.
  const std::string path = CacheDbPath(args.db);
  absl::StatusOr<std::vector<store::Device>> devices = ListKnownDevices(path);
  if (!devices.ok()) return FailOpen(devices.status());
  std::set<std::string> known_models;
  for (const store::Device& d : *devices) known_models.insert(d.model_key);
  // Every field of every entry, before anything is written: the file is foreign input and
  // an imported entry is served as an EXACT answer.
  {
    absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
        LoadRegistryOrWarn(args.templates_dir);
    if (!registry.ok()) return Fail(registry.status());
    if (absl::Status s = CheckImportFile(**registry, *devices, *file); !s.ok()) {
      std::cerr << "ktune: " << args.file << ": " << s.message() << "; nothing imported\n";
      return kExitUsage;
    }
  }
  const size_t refused = PrintRefusedEntries(args, *file, known_models);
  if (refused > 0) {
    std::cerr << "ktune: " << args.file << ": " << refused << " of " << file->entries.size()
              << " entries refused, nothing imported (--allow-nvrtc-mismatch, "
                 "--allow-other-device take them anyway)\n";
    return kExitUsage;
  }

  if (args.db.empty()) {
    if (absl::Status s = MakePrivateDir(DefaultCacheDir()); !s.ok()) return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<store::Store>> store = store::OpenSqliteStore(path);
  if (!store.ok()) return FailOpen(store.status());
  absl::StatusOr<std::vector<store::ImportResult>> results =
      (*store)->ImportEntries(file->devices, file->entries, *rule);
  if (!results.ok()) return Fail(results.status());
  PrintImportResults(args, path, *rule, *file, *results);
  if (args.publish) {
    int stored = 0, faster_there = 0;
    if (absl::Status s = PublishBundles(args.remote, file->devices, file->entries, &stored,
                                        &faster_there);
        !s.ok()) {
      std::fprintf(stderr, "ktune: --publish: %s (the import itself is done)\n",
                   std::string(s.message()).c_str());
      return kExitFailure;
    }
    std::printf("published to %s: %d stored, %d kept (as fast or faster there)\n",
                args.remote.url.c_str(), stored, faster_there);
  }
  return kExitOk;
}

int RunCachePrune(const CachePruneArgs& args) {
  if (!args.stale && args.older_than.empty()) {
    return Fail(absl::InvalidArgumentError(
        "prune: say what to remove: --stale, --older-than DURATION, or both"));
  }
  std::optional<absl::Time> cutoff;
  if (!args.older_than.empty()) {
    absl::StatusOr<absl::Duration> age = ParseAge(args.older_than, "--older-than");
    if (!age.ok()) return Fail(age.status());
    cutoff = absl::Now() - *age;
  }
  const std::string path = CacheDbPath(args.db);
  struct Victim {
    store::EntrySummary entry;
    std::string why;
    size_t trials = 0;
  };
  std::vector<Victim> victims;
  size_t jobs = 0, trials = 0;
  {
    const CacheView view = OpenCacheView(path, {}, NvrtcVersionOr(args.nvrtc_version));
    if (view.exit_code != 0) return view.exit_code;
    for (const store::EntrySummary& e : view.entries) {
      std::vector<std::string> why;
      if (args.stale && view.stale.count(e.id)) why.push_back("stale");
      if (cutoff && absl::FromUnixMillis(e.created_unix_ms) < *cutoff) {
        why.push_back(absl::StrCat("created ", UtcTime(e.created_unix_ms)));
      }
      if (why.empty()) continue;
      Victim v{e, absl::StrJoin(why, ", "), 0};
      if (e.job_id != 0) {
        absl::StatusOr<std::vector<store::Trial>> t = view.store->ListTrials(e.job_id);
        if (!t.ok()) return Fail(t.status());
        v.trials = t->size();
        ++jobs;
        trials += v.trials;
      }
      victims.push_back(std::move(v));
    }
  }
  if (!args.dry_run && !victims.empty()) {
    absl::StatusOr<std::unique_ptr<store::Store>> store = store::OpenSqliteStore(path);
    if (!store.ok()) return FailOpen(store.status());
    std::vector<int64_t> ids;
    for (const Victim& v : victims) ids.push_back(v.entry.id);
    absl::StatusOr<store::DeleteResult> done = (*store)->DeleteEntries(ids);
    if (!done.ok()) return Fail(done.status());
    jobs = done->jobs;
    trials = done->trials;
  }
  std::printf("%s %zu entries, %zu jobs, %zu trials from %s\n",
              args.dry_run ? "would remove" : "removed", victims.size(), jobs, trials,
              path.c_str());
  for (const Victim& v : victims) {
    std::printf("  %-5lld %s on %s (%s; %zu trials)\n", static_cast<long long>(v.entry.id),
                KeyText(v.entry.key).c_str(), v.entry.key.device_model.c_str(), v.why.c_str(),
                v.trials);
  }
  return kExitOk;
}

}  // namespace ktune::cli
