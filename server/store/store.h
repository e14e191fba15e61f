// The tuning store: devices, templates, tuning jobs, every trial, and the winner per key.
//
// One SQLite file (server/store/sqlite_db.cc is the only code that includes <sqlite3.h>;
// sqlite_store.cc implements this interface on top of it). A Store is safe for concurrent
// use from many threads: writes go through one writer connection, reads through their own
// connections, so a reader never waits for a writer's transaction (WAL). Several processes
// may open one file; `ktune cache` opens it read-only while the daemon writes.
#ifndef KTUNE_SERVER_STORE_STORE_H_
#define KTUNE_SERVER_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/base/config.h"
#include "server/base/launch_spec.h"
#include "server/base/outcome.h"
#include "server/base/trial_metrics.h"

namespace ktune::store {

// A GPU model. Two cards of one model share entries; uuid and driver are provenance of the
// card that was last seen, not part of the key.
struct Device {
  std::string model_key;  // e.g. "NVIDIA H200|sm_90|132sm|6144bit"; see server/gpu
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int memory_bus_bits = 0;
  int64_t memory_clock_khz = 0;
  double copy_gbps = 0;  // measured copy ceiling (bytes read + written); 0 = not measured
  std::string uuid;
  std::string driver_version;
};

// What a winner is stored under. `shape` is canonical: dims sorted by name,
// "hidden=8192,tokens=4096".
struct EntryKey {
  std::string device_model;
  std::string template_id;
  std::string dtype;  // "f32", "f16", "bf16", "f8e4m3", "f8e5m2"
  std::string shape;

  friend bool operator==(const EntryKey& a, const EntryKey& b) {
    return a.device_model == b.device_model && a.template_id == b.template_id &&
           a.dtype == b.dtype && a.shape == b.shape;
  }
};

// One candidate's result within a job.
struct Trial {
  int64_t id = 0;      // assigned by the store
  int64_t job_id = 0;
  Config config;
  std::string candidate_hash;  // hash of source + options + NVRTC version
  Outcome outcome = Outcome::kOk;
  double compile_ms = 0;
  TrialMetrics metrics;
  std::string log;  // compiler log or failure reason; empty when ok
  int64_t created_unix_ms = 0;
};

// The winner for a key.
struct Entry {
  int64_t id = 0;  // assigned by the store
  EntryKey key;
  std::string source_hash;    // of the template source it was compiled from
  std::string nvrtc_version;  // e.g. "13.0"
  Config config;
  std::string cubin;  // the bytes
  std::string cubin_sha256;
  std::vector<LaunchSpec> launches;
  TrialMetrics metrics;
  int64_t job_id = 0;
  int64_t trials_total = 0;
  int64_t trials_ok = 0;
  double tuning_seconds = 0;
  int64_t created_unix_ms = 0;
  // Median time (ns) of the template's default config in the job that chose this winner:
  // the baseline of its speed-up. 0 when not measured (the default config is not in the
  // space for this shape, or failed, or the entry predates schema v4).
  double default_time_ns = 0;
};

// An entry as listed (no cubin bytes).
struct EntrySummary {
  int64_t id = 0;
  EntryKey key;
  std::string source_hash;
  std::string nvrtc_version;
  Config config;
  TrialMetrics metrics;
  int64_t cubin_bytes = 0;
  int64_t job_id = 0;  // 0 when the job was pruned
  int64_t created_unix_ms = 0;
  double default_time_ns = 0;  // as Entry's
};

enum class JobState { kQueued, kRunning, kDone, kFailed, kAbandoned };
absl::string_view JobStateName(JobState s);  // "queued", "running", ...
std::optional<JobState> ParseJobState(absl::string_view name);  // JobStateName's inverse

struct Job {
  int64_t id = 0;  // assigned by the store
  EntryKey key;
  std::string source_hash;
  std::string nvrtc_version;
  std::string strategy;  // e.g. "exhaustive", "random:64"
  JobState state = JobState::kQueued;
  int64_t done = 0;   // candidates finished
  int64_t total = 0;  // candidates planned
  std::string error;  // why it failed; empty otherwise
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
  // Why the search ended: "space exhausted", "budget of 30 reached", "converged: ...",
  // "time limit of 60 s", "roofline: ..."; empty while it runs and for older stores' jobs.
  std::string stop_reason;
};

struct Lookup {
  Entry entry;
  // True iff the entry was made from another template source or NVRTC version than the
  // caller's: kept and usable, but due for a re-tune.
  bool stale = false;
};

struct EntryFilter {
  std::optional<std::string> device_model;
  std::optional<std::string> template_id;
  std::optional<std::string> dtype;
};

// An entry with the evidence behind it, as `ktune cache export` writes and `import` reads:
// the job that tuned it and every trial of that job. Ids are the source store's.
struct EntryBundle {
  Entry entry;
  Job job;
  std::vector<Trial> trials;
};

// What ImportEntries does when the store already has an entry for an imported key.
enum class ConflictRule {
  kKeepFaster,    // the one with the lower median time stays (a tie keeps the existing)
  kKeepExisting,  // the existing entry stays
  kReplace,       // the imported entry replaces it
};

// What happened to one imported entry.
struct ImportResult {
  enum class Action { kAdded, kReplaced, kKeptExisting };
  Action action = Action::kAdded;
  int64_t entry_id = 0;           // the entry now stored for the key
  double existing_time_ns = 0;    // the entry that was there before; 0 when none was
};

// What DeleteEntries removed.
struct DeleteResult {
  int64_t entries = 0;
  int64_t jobs = 0;
  int64_t trials = 0;
};

// Counts over the whole store, for `ktune cache stats`.
struct StoreStats {
  int64_t entries = 0;
  int64_t jobs = 0;
  int64_t trials = 0;
  // Trials per outcome name ("ok", "compile_failed", ...); outcomes with none are absent.
  std::vector<std::pair<std::string, int64_t>> trials_by_outcome;
  // The main file's size as SQLite counts it (pages x page size); a WAL comes on top.
  int64_t file_bytes = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Inserts or updates the device model's row.
  virtual absl::Status PutDevice(const Device& device) = 0;
  // Inserts the device model's row if it is new; otherwise replaces it only if `device`
  // measured a higher copy_gbps, in one statement, so that two processes raising it at once
  // keep the higher figure. Returns the copy_gbps stored afterwards.
  virtual absl::StatusOr<double> RaiseCopyCeiling(const Device& device) = 0;
  // kNotFound if the model was never seen.
  virtual absl::StatusOr<Device> GetDevice(const std::string& model_key) = 0;
  virtual absl::StatusOr<std::vector<Device>> ListDevices() = 0;

  // Records the template's current source hash (so stale entries can be listed).
  virtual absl::Status PutTemplate(const std::string& template_id,
                                   const std::string& source_hash) = 0;

  // Creates a job and returns its id.
  virtual absl::StatusOr<int64_t> CreateJob(const Job& job) = 0;
  // Updates state, progress and error of an existing job; kNotFound otherwise.
  virtual absl::Status UpdateJob(int64_t job_id, JobState state, int64_t done, int64_t total,
                                 const std::string& error) = 0;
  // Records why the job's search stopped; kNotFound for an unknown job.
  virtual absl::Status SetJobStopReason(int64_t job_id, const std::string& reason) = 0;
  virtual absl::StatusOr<Job> GetJob(int64_t job_id) = 0;
  // Jobs in `state`, oldest first (e.g. kRunning after a crash, to resume).
  virtual absl::StatusOr<std::vector<Job>> ListJobs(JobState state) = 0;

  // Records one finished trial of a running job, so a killed job resumes without redoing
  // it. Returns the trial's id.
  virtual absl::StatusOr<int64_t> AddTrial(const Trial& trial) = 0;
  // The job's trials in insertion order.
  virtual absl::StatusOr<std::vector<Trial>> ListTrials(int64_t job_id) = 0;

  // In one transaction: records `trials` (trials of the job not yet added), replaces the
  // entry for `entry.key` with `entry`, and marks the job done. After a crash either all of
  // it is there or none. Returns the entry's id. kInvalidArgument if the cubin's sha256
  // does not match `entry.cubin_sha256`.
  virtual absl::StatusOr<int64_t> CommitWinner(const Entry& entry,
                                               const std::vector<Trial>& trials) = 0;

  // The entry for `key`. kNotFound if none; kDataLoss if the stored cubin no longer
  // matches its sha256 (never returned as a hit). `stale` compares with the caller's
  // current source hash and NVRTC version.
  virtual absl::StatusOr<Lookup> LookupEntry(const EntryKey& key,
                                             const std::string& source_hash,
                                             const std::string& nvrtc_version) = 0;
  // A number that grows whenever an entry is inserted, replaced, changed or deleted, by this
  // Store or by any other connection or process (`ktune tune`, `ktune cache import`, `prune`):
  // equal answers mean no entry changed in between, so a caller may keep entries it read
  // (ktuned's artifact cache). Trials, jobs, devices and templates do not move it: a running
  // tune commits a trial at a time without emptying that cache. Cheap: one one-row read.
  virtual absl::StatusOr<int64_t> EntriesChangeCounter() = 0;

  // By id, same checks as LookupEntry (stale is computed against the templates table).
  virtual absl::StatusOr<Lookup> GetEntry(int64_t entry_id) = 0;
  virtual absl::StatusOr<std::vector<EntrySummary>> ListEntries(const EntryFilter& filter) = 0;
  // Entries whose source hash differs from the templates table's, or whose NVRTC version
  // differs from `nvrtc_version`.
  virtual absl::StatusOr<std::vector<EntrySummary>> ListStale(
      const std::string& nvrtc_version) = 0;

  // Counts of entries, jobs and trials, and the file's size.
  virtual absl::StatusOr<StoreStats> Stats() = 0;

  // In one transaction: `devices` whose model the store has no row for (a host's own
  // measurement of its ceiling wins over an imported one); then for each bundle, unless
  // `rule` keeps the store's own entry for the key, a new job (its state, strategy,
  // progress and times as given) holding its trials, and the entry under that job.
  // Entries, jobs and trials get this store's ids. Results are in the order of `bundles`.
  // kInvalidArgument (nothing written) for an incomplete key, a cubin that does not match
  // its sha256, or one key twice.
  virtual absl::StatusOr<std::vector<ImportResult>> ImportEntries(
      const std::vector<Device>& devices, const std::vector<EntryBundle>& bundles,
      ConflictRule rule) = 0;

  // In one transaction: deletes the entries with these ids, the jobs that made them and
  // those jobs' trials. kNotFound (nothing deleted) if an id names no entry.
  virtual absl::StatusOr<DeleteResult> DeleteEntries(const std::vector<int64_t>& entry_ids) = 0;
};

struct StoreOptions {
  // Open an existing file read-only (never creates or migrates it).
  bool read_only = false;
  // How long a writer waits for another process's lock before kUnavailable.
  int busy_timeout_ms = 5000;
};

// Opens (creating and migrating to the current schema unless read-only) the SQLite file at
// `path`; ":memory:" gives a private in-memory store for tests. kFailedPrecondition for a
// file whose schema is newer than this build knows or that is not a ktune store;
// kDataLoss for a file that is not SQLite or fails its integrity check on open.
absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                                       const StoreOptions& options = {});

// SQLite's full PRAGMA integrity_check of the store file at `path`, opened read-only (it
// works while another process writes): "ok" when the file is sound, otherwise SQLite's
// report, one problem per line. kNotFound if there is no file; kDataLoss if it is not SQLite.
absl::StatusOr<std::string> CheckIntegrity(const std::string& path);

}  // namespace ktune::store

#endif  // KTUNE_SERVER_STORE_STORE_H_
