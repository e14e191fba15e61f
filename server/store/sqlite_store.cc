// The Store on one SQLite file (store.h), and CheckIntegrity.
//
// Connections: one writer, guarded by write_mu_, which runs every write and migration; and
// a small pool of read-only connections, one borrowed per read, so in WAL mode a read sees
// the last committed state and never waits for a write transaction. A ":memory:" store has
// only the writer connection and reads take write_mu_ too: an in-memory database is
// private to its connection, and the shared-cache alternative has no WAL (readers would
// get SQLITE_LOCKED during writes), so a second connection would buy nothing.
#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/store/schema.h"
#include "server/store/sqlite_db.h"
#include "server/store/store.h"

#include <sys/stat.h>

namespace ktune::store {
namespace {

using internal::Db;
using internal::OpenMode;
using internal::Stmt;
using internal::Transaction;

// Idle read connections kept open; more are opened under load and closed afterwards.
constexpr size_t kMaxIdleReaders = 4;

int64_t NowUnixMs() { return absl::ToUnixMillis(absl::Now()); }

// Callers may pass their own time stamps (a trial's finish time); 0 means "now".
int64_t OrNow(int64_t unix_ms) { return unix_ms != 0 ? unix_ms : NowUnixMs(); }

std::string KeyString(const EntryKey& k) {
  return absl::StrCat(k.device_model, " / ", k.template_id, " / ", k.dtype, " / ", k.shape);
}

absl::Status ValidateKey(const EntryKey& k) {
  if (k.device_model.empty() || k.template_id.empty() || k.dtype.empty() || k.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("incomplete key (every part is required): ", KeyString(k)));
  }
  return absl::OkStatus();
}

// Reads the columns of a result row left to right, mirroring the SELECT's column list.
class Row {
 public:
  explicit Row(const Stmt& st) : st_(st) {}
  int64_t Int() { return st_.Int(col_++); }
  double Double() { return st_.Double(col_++); }
  std::string Text() { return st_.Text(col_++); }
  std::string Blob() { return st_.Blob(col_++); }
  bool NextIsNull() const { return st_.IsNull(col_); }
  void Skip() { ++col_; }

 private:
  const Stmt& st_;
  int col_ = 0;
};

// ---- column lists and their readers/binders, which must stay in the same order ----

constexpr absl::string_view kMetricColumns =
    "time_ns, spread_ns, repeats, registers, spill_bytes, static_smem, dynamic_smem, "
    "occupancy, waves, gbps, gflops, ceiling_fraction, last_wave, batch, l2_flushed";
constexpr absl::string_view kMetricPlaceholders =
    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?";

void BindMetrics(Stmt& st, const TrialMetrics& m) {
  st.Bind(m.time_ns).Bind(m.spread_ns).Bind(m.repeats).Bind(m.registers).Bind(m.spill_bytes);
  st.Bind(m.static_smem).Bind(m.dynamic_smem).Bind(m.occupancy).Bind(m.waves).Bind(m.gbps);
  st.Bind(m.gflops).Bind(m.ceiling_fraction).Bind(m.last_wave).Bind(m.batch);
  st.Bind(int64_t{m.l2_flushed ? 1 : 0});
}

TrialMetrics ReadMetrics(Row& r) {
  TrialMetrics m;
  m.time_ns = r.Double();
  m.spread_ns = r.Double();
  m.repeats = r.Int();
  m.registers = r.Int();
  m.spill_bytes = r.Int();
  m.static_smem = r.Int();
  m.dynamic_smem = r.Int();
  m.occupancy = r.Double();
  m.waves = r.Double();
  m.gbps = r.Double();
  m.gflops = r.Double();
  m.ceiling_fraction = r.Double();
  m.last_wave = r.Double();
  m.batch = r.Int();
  m.l2_flushed = r.Int() != 0;
  return m;
}

absl::StatusOr<Config> ParseConfig(const std::string& json, absl::string_view owner) {
  std::string error;
  std::optional<Config> config = ConfigFromJson(json, &error);
  if (!config) return absl::DataLossError(absl::StrCat(owner, ": stored ", error));
  return *std::move(config);
}

// Devices.

constexpr absl::string_view kDeviceColumns =
    "model_key, name, cc_major, cc_minor, sm_count, l2_bytes, memory_bus_bits, "
    "memory_clock_khz, copy_gbps, uuid, driver_version";

Device ReadDevice(Row& r) {
  Device d;
  d.model_key = r.Text();
  d.name = r.Text();
  d.cc_major = static_cast<int>(r.Int());
  d.cc_minor = static_cast<int>(r.Int());
  d.sm_count = static_cast<int>(r.Int());
  d.l2_bytes = r.Int();
  d.memory_bus_bits = static_cast<int>(r.Int());
  d.memory_clock_khz = r.Int();
  d.copy_gbps = r.Double();
  d.uuid = r.Text();
  d.driver_version = r.Text();
  return d;
}

// Jobs.

constexpr absl::string_view kJobColumns =
    "id, device_model, template_id, dtype, shape, source_hash, nvrtc_version, strategy, "
    "state, done, total, error, created_unix_ms, updated_unix_ms, stop_reason";

absl::StatusOr<Job> ReadJob(Row& r) {
  Job j;
  j.id = r.Int();
  j.key.device_model = r.Text();
  j.key.template_id = r.Text();
  j.key.dtype = r.Text();
  j.key.shape = r.Text();
  j.source_hash = r.Text();
  j.nvrtc_version = r.Text();
  j.strategy = r.Text();
  std::string state = r.Text();
  std::optional<JobState> parsed = ParseJobState(state);
  if (!parsed) {
    return absl::DataLossError(absl::StrCat("job ", j.id, " has unknown state \"", state, "\""));
  }
  j.state = *parsed;
  j.done = r.Int();
  j.total = r.Int();
  j.error = r.Text();
  j.created_unix_ms = r.Int();
  j.updated_unix_ms = r.Int();
  j.stop_reason = r.Text();
  return j;
}

// Trials.

const std::string& InsertTrialSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "INSERT INTO trials (job_id, config, candidate_hash, outcome, compile_ms, ", kMetricColumns,
      ", log, created_unix_ms) VALUES (?, ?, ?, ?, ?, ", kMetricPlaceholders, ", ?, ?)"));
  return *kSql;
}

absl::StatusOr<int64_t> InsertTrial(Db& db, const Trial& t, int64_t job_id) {
  KTUNE_ASSIGN_OR_RETURN(Stmt st, db.Prepare(InsertTrialSql()));
  st.Bind(job_id).Bind(ConfigToJson(t.config)).Bind(t.candidate_hash).Bind(OutcomeName(t.outcome));
  st.Bind(t.compile_ms);
  BindMetrics(st, t.metrics);
  st.Bind(t.log).Bind(OrNow(t.created_unix_ms));
  KTUNE_RETURN_IF_ERROR(st.Run());
  return db.LastInsertRowid();
}

absl::StatusOr<Trial> ReadTrial(Row& r) {
  Trial t;
  t.id = r.Int();
  t.job_id = r.Int();
  const std::string owner = absl::StrCat("trial ", t.id);
  KTUNE_ASSIGN_OR_RETURN(t.config, ParseConfig(r.Text(), owner));
  t.candidate_hash = r.Text();
  std::string outcome = r.Text();
  std::optional<Outcome> parsed = ParseOutcome(outcome);
  if (!parsed) {
    return absl::DataLossError(absl::StrCat(owner, " has unknown outcome \"", outcome, "\""));
  }
  t.outcome = *parsed;
  t.compile_ms = r.Double();
  t.metrics = ReadMetrics(r);
  t.log = r.Text();
  t.created_unix_ms = r.Int();
  return t;
}

absl::Status CheckJobExists(Db& db, int64_t job_id) {
  KTUNE_ASSIGN_OR_RETURN(Stmt st, db.Prepare("SELECT 1 FROM jobs WHERE id = ?"));
  st.Bind(job_id);
  KTUNE_ASSIGN_OR_RETURN(bool found, st.Step());
  if (!found) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return absl::OkStatus();
}

// Entries.

const std::string& EntryColumns() {
  static const std::string* const kColumns = new std::string(absl::StrCat(
      "id, device_model, template_id, dtype, shape, source_hash, nvrtc_version, config, "
      "cubin, cubin_sha256, launches, ",
      kMetricColumns,
      ", job_id, trials_total, trials_ok, tuning_seconds, created_unix_ms, default_time_ns"));
  return *kColumns;
}

absl::StatusOr<Entry> ReadEntry(Row& r) {
  Entry e;
  e.id = r.Int();
  e.key.device_model = r.Text();
  e.key.template_id = r.Text();
  e.key.dtype = r.Text();
  e.key.shape = r.Text();
  e.source_hash = r.Text();
  e.nvrtc_version = r.Text();
  const std::string owner = absl::StrCat("entry ", e.id, " (", KeyString(e.key), ")");
  KTUNE_ASSIGN_OR_RETURN(e.config, ParseConfig(r.Text(), owner));
  e.cubin = r.Blob();
  e.cubin_sha256 = r.Text();
  std::string error;
  std::optional<std::vector<LaunchSpec>> launches = LaunchesFromJson(r.Text(), &error);
  if (!launches) return absl::DataLossError(absl::StrCat(owner, ": stored ", error));
  e.launches = *std::move(launches);
  e.metrics = ReadMetrics(r);
  e.job_id = r.Int();  // NULL (job pruned) reads as 0
  e.trials_total = r.Int();
  e.trials_ok = r.Int();
  e.tuning_seconds = r.Double();
  e.created_unix_ms = r.Int();
  e.default_time_ns = r.Double();
  return e;
}

// Never hands out a cubin that is not the one that was tuned and verified.
absl::Status VerifyCubin(const Entry& e) {
  std::string actual = Sha256Hex(e.cubin);
  if (actual != e.cubin_sha256) {
    return absl::DataLossError(absl::StrFormat(
        "entry %d (%s): stored cubin does not match its sha256 (recorded %s, now %s); "
        "re-tune the key",
        e.id, KeyString(e.key), e.cubin_sha256, actual));
  }
  return absl::OkStatus();
}

// A cubin handed in for storing (a winner, an import) matches the sha256 it comes with;
// checked before anything is written, since a wrong hash stored would turn every later
// lookup of a good cubin into kDataLoss. `what`: "winner for" or "imported entry".
absl::Status CheckIncomingCubin(const Entry& e, absl::string_view what) {
  const std::string actual = Sha256Hex(e.cubin);
  if (actual != e.cubin_sha256) {
    return absl::InvalidArgumentError(absl::StrFormat("%s %s: cubin sha256 is %s, not \"%s\"",
                                                      what, KeyString(e.key), actual,
                                                      e.cubin_sha256));
  }
  return absl::OkStatus();
}

// What InsertDevice does with an existing model_key.
enum class OnExistingDevice {
  kReplace,          // the new row replaces it
  kKeep,             // it stays as it is
  kReplaceIfFaster,  // the new row replaces it only if its copy_gbps is higher
};

// Inserts a device row; an existing model_key is treated as `existing` says, in the same
// statement (so atomically against other writers).
absl::Status InsertDevice(Db& db, const Device& d, OnExistingDevice existing) {
  constexpr absl::string_view kReplace =
      "DO UPDATE SET name = excluded.name, "
      "cc_major = excluded.cc_major, cc_minor = excluded.cc_minor, "
      "sm_count = excluded.sm_count, l2_bytes = excluded.l2_bytes, "
      "memory_bus_bits = excluded.memory_bus_bits, "
      "memory_clock_khz = excluded.memory_clock_khz, copy_gbps = excluded.copy_gbps, "
      "uuid = excluded.uuid, driver_version = excluded.driver_version, "
      "updated_unix_ms = excluded.updated_unix_ms";
  std::string on_conflict;
  switch (existing) {
    case OnExistingDevice::kReplace:
      on_conflict = std::string(kReplace);
      break;
    case OnExistingDevice::kKeep:
      on_conflict = "DO NOTHING";
      break;
    case OnExistingDevice::kReplaceIfFaster:
      on_conflict = absl::StrCat(kReplace, " WHERE excluded.copy_gbps > devices.copy_gbps");
      break;
  }
  KTUNE_ASSIGN_OR_RETURN(
      Stmt st,
      db.Prepare(absl::StrCat(
          "INSERT INTO devices (model_key, name, cc_major, cc_minor, sm_count, l2_bytes, "
          "memory_bus_bits, memory_clock_khz, copy_gbps, uuid, driver_version, "
          "updated_unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (model_key) ",
          on_conflict)));
  st.Bind(d.model_key).Bind(d.name).Bind(d.cc_major).Bind(d.cc_minor).Bind(d.sm_count);
  st.Bind(d.l2_bytes).Bind(d.memory_bus_bits).Bind(d.memory_clock_khz).Bind(d.copy_gbps);
  st.Bind(d.uuid).Bind(d.driver_version).Bind(NowUnixMs());
  return st.Run();
}

const std::string& SummaryColumns() {
  static const std::string* const kColumns = new std::string(absl::StrCat(
      "id, device_model, template_id, dtype, shape, source_hash, nvrtc_version, config, ",
      kMetricColumns, ", length(cubin), job_id, created_unix_ms, default_time_ns"));
  return *kColumns;
}

absl::StatusOr<std::vector<EntrySummary>> ReadSummaries(Stmt& st) {
  std::vector<EntrySummary> out;
  while (true) {
    KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    Row r(st);
    EntrySummary s;
    s.id = r.Int();
    s.key.device_model = r.Text();
    s.key.template_id = r.Text();
    s.key.dtype = r.Text();
    s.key.shape = r.Text();
    s.source_hash = r.Text();
    s.nvrtc_version = r.Text();
    KTUNE_ASSIGN_OR_RETURN(s.config, ParseConfig(r.Text(), absl::StrCat("entry ", s.id)));
    s.metrics = ReadMetrics(r);
    s.cubin_bytes = r.Int();
    s.job_id = r.Int();  // NULL (job pruned) reads as 0
    s.created_unix_ms = r.Int();
    s.default_time_ns = r.Double();
    out.push_back(std::move(s));
  }
}

absl::StatusOr<int64_t> InsertJob(Db& db, const Job& job) {
  KTUNE_ASSIGN_OR_RETURN(
      Stmt st,
      db.Prepare("INSERT INTO jobs (device_model, template_id, dtype, shape, source_hash, "
                 "nvrtc_version, strategy, state, done, total, error, created_unix_ms, "
                 "updated_unix_ms, stop_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  const int64_t created = OrNow(job.created_unix_ms);
  st.Bind(job.key.device_model).Bind(job.key.template_id).Bind(job.key.dtype);
  st.Bind(job.key.shape).Bind(job.source_hash).Bind(job.nvrtc_version).Bind(job.strategy);
  st.Bind(JobStateName(job.state)).Bind(job.done).Bind(job.total).Bind(job.error);
  st.Bind(created).Bind(std::max(created, job.updated_unix_ms)).Bind(job.stop_reason);
  KTUNE_RETURN_IF_ERROR(st.Run());
  return db.LastInsertRowid();
}

// Inserts `entry` under `job_id`; the caller has removed any entry for its key.
absl::StatusOr<int64_t> InsertEntry(Db& db, const Entry& entry, int64_t job_id) {
  static const std::string* const kInsert = new std::string(absl::StrCat(
      "INSERT INTO entries (device_model, template_id, dtype, shape, source_hash, "
      "nvrtc_version, config, cubin, cubin_sha256, launches, ",
      kMetricColumns,
      ", job_id, trials_total, trials_ok, tuning_seconds, created_unix_ms, default_time_ns) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ",
      kMetricPlaceholders, ", ?, ?, ?, ?, ?, ?)"));
  KTUNE_ASSIGN_OR_RETURN(Stmt st, db.Prepare(*kInsert));
  st.Bind(entry.key.device_model).Bind(entry.key.template_id).Bind(entry.key.dtype);
  st.Bind(entry.key.shape).Bind(entry.source_hash).Bind(entry.nvrtc_version);
  st.Bind(ConfigToJson(entry.config)).BindBlob(entry.cubin).Bind(entry.cubin_sha256);
  st.Bind(LaunchesToJson(entry.launches));
  BindMetrics(st, entry.metrics);
  st.Bind(job_id).Bind(entry.trials_total).Bind(entry.trials_ok);
  st.Bind(entry.tuning_seconds).Bind(OrNow(entry.created_unix_ms)).Bind(entry.default_time_ns);
  KTUNE_RETURN_IF_ERROR(st.Run());
  return db.LastInsertRowid();
}

absl::Status DeleteEntryForKey(Db& db, const EntryKey& key) {
  KTUNE_ASSIGN_OR_RETURN(Stmt st, db.Prepare("DELETE FROM entries WHERE device_model = ? AND "
                                             "template_id = ? AND dtype = ? AND shape = ?"));
  st.Bind(key.device_model).Bind(key.template_id).Bind(key.dtype).Bind(key.shape);
  return st.Run();
}

// The id and median time of the entry for `key`, if there is one.
struct ExistingEntry {
  int64_t id = 0;
  double time_ns = 0;
};
absl::StatusOr<std::optional<ExistingEntry>> FindEntry(Db& db, const EntryKey& key) {
  KTUNE_ASSIGN_OR_RETURN(Stmt st,
                         db.Prepare("SELECT id, time_ns FROM entries WHERE device_model = ? AND "
                                    "template_id = ? AND dtype = ? AND shape = ?"));
  st.Bind(key.device_model).Bind(key.template_id).Bind(key.dtype).Bind(key.shape);
  KTUNE_ASSIGN_OR_RETURN(bool found, st.Step());
  if (!found) return std::optional<ExistingEntry>();
  return std::optional<ExistingEntry>(ExistingEntry{st.Int(0), st.Double(1)});
}

absl::StatusOr<int64_t> QueryCount(Db& db, absl::string_view sql, int64_t arg) {
  KTUNE_ASSIGN_OR_RETURN(Stmt st, db.Prepare(sql));
  st.Bind(arg);
  KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Int(0) : 0;
}

constexpr absl::string_view kKeyOrder = " ORDER BY device_model, template_id, dtype, shape";

class SqliteStore final : public Store {
 public:
  // `writer` is null for a read-only store; `reader` (optional) seeds the reader pool.
  SqliteStore(std::string path, const StoreOptions& options, std::unique_ptr<Db> writer,
              std::unique_ptr<Db> reader)
      : path_(std::move(path)),
        options_(options),
        in_memory_(path_ == ":memory:"),
        writer_(std::move(writer)) {
    if (reader != nullptr) idle_readers_.push_back(std::move(reader));
  }

  absl::Status PutDevice(const Device& d) override {
    if (d.model_key.empty()) return absl::InvalidArgumentError("device model_key is empty");
    return Write([&](Db& db) { return InsertDevice(db, d, OnExistingDevice::kReplace); });
  }

  absl::StatusOr<double> RaiseCopyCeiling(const Device& d) override {
    if (d.model_key.empty()) return absl::InvalidArgumentError("device model_key is empty");
    return Write([&](Db& db) -> absl::StatusOr<double> {
      KTUNE_RETURN_IF_ERROR(InsertDevice(db, d, OnExistingDevice::kReplaceIfFaster));
      KTUNE_ASSIGN_OR_RETURN(Stmt st,
                             db.Prepare("SELECT copy_gbps FROM devices WHERE model_key = ?"));
      st.Bind(d.model_key);
      KTUNE_ASSIGN_OR_RETURN(bool found, st.Step());
      if (!found) return absl::InternalError(absl::StrCat("device ", d.model_key, " vanished"));
      return st.Double(0);
    });
  }

  absl::StatusOr<Device> GetDevice(const std::string& model_key) override {
    return Read([&](Db& db) -> absl::StatusOr<Device> {
      KTUNE_ASSIGN_OR_RETURN(
          Stmt st,
          db.Prepare(absl::StrCat("SELECT ", kDeviceColumns, " FROM devices WHERE model_key = ?")));
      st.Bind(model_key);
      KTUNE_ASSIGN_OR_RETURN(bool found, st.Step());
      if (!found) return absl::NotFoundError(absl::StrCat("no device model \"", model_key, "\""));
      Row r(st);
      return ReadDevice(r);
    });
  }

  absl::StatusOr<std::vector<Device>> ListDevices() override {
    return Read([&](Db& db) -> absl::StatusOr<std::vector<Device>> {
      KTUNE_ASSIGN_OR_RETURN(Stmt st, db.Prepare(absl::StrCat("SELECT ", kDeviceColumns,
                                                              " FROM devices ORDER BY model_key")));
      std::vector<Device> out;
      while (true) {
        KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
        if (!row) return out;
        Row r(st);
        out.push_back(ReadDevice(r));
      }
    });
  }

  absl::Status PutTemplate(const std::string& template_id,
                           const std::string& source_hash) override {
    if (template_id.empty()) return absl::InvalidArgumentError("template id is empty");
    return Write([&](Db& db) -> absl::Status {
      KTUNE_ASSIGN_OR_RETURN(Stmt st,
                             db.Prepare("INSERT INTO templates (id, source_hash, updated_unix_ms) "
                                        "VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                                        "source_hash = excluded.source_hash, "
                                        "updated_unix_ms = excluded.updated_unix_ms"));
      st.Bind(template_id).Bind(source_hash).Bind(NowUnixMs());
      return st.Run();
    });
  }

  absl::StatusOr<int64_t> CreateJob(const Job& job) override {
    KTUNE_RETURN_IF_ERROR(ValidateKey(job.key));
    return Write([&](Db& db) -> absl::StatusOr<int64_t> { return InsertJob(db, job); });
  }

  absl::Status UpdateJob(int64_t job_id, JobState state, int64_t done, int64_t total,
                         const std::string& error) override {
    return Write([&](Db& db) -> absl::Status {
      KTUNE_ASSIGN_OR_RETURN(
          Stmt st, db.Prepare("UPDATE jobs SET state = ?, done = ?, total = ?, error = ?, "
                              "updated_unix_ms = ? WHERE id = ?"));
      st.Bind(JobStateName(state)).Bind(done).Bind(total).Bind(error).Bind(NowUnixMs());
      st.Bind(job_id);
      KTUNE_RETURN_IF_ERROR(st.Run());
      if (db.Changes() == 0) return absl::NotFoundError(absl::StrCat("no job ", job_id));
      return absl::OkStatus();
    });
  }

  absl::Status SetJobStopReason(int64_t job_id, const std::string& reason) override {
    return Write([&](Db& db) -> absl::Status {
      KTUNE_ASSIGN_OR_RETURN(Stmt st, db.Prepare("UPDATE jobs SET stop_reason = ? WHERE id = ?"));
      st.Bind(reason).Bind(job_id);
      KTUNE_RETURN_IF_ERROR(st.Run());
      if (db.Changes() == 0) return absl::NotFoundError(absl::StrCat("no job ", job_id));
      return absl::OkStatus();
    });
  }

  absl::StatusOr<Job> GetJob(int64_t job_id) override {
    return Read([&](Db& db) -> absl::StatusOr<Job> {
      KTUNE_ASSIGN_OR_RETURN(
          Stmt st, db.Prepare(absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id = ?")));
      st.Bind(job_id);
      KTUNE_ASSIGN_OR_RETURN(bool found, st.Step());
      if (!found) return absl::NotFoundError(absl::StrCat("no job ", job_id));
      Row r(st);
      return ReadJob(r);
    });
  }

  absl::StatusOr<std::vector<Job>> ListJobs(JobState state) override {
    return Read([&](Db& db) -> absl::StatusOr<std::vector<Job>> {
      KTUNE_ASSIGN_OR_RETURN(Stmt st,
                             db.Prepare(absl::StrCat("SELECT ", kJobColumns,
                                                     " FROM jobs WHERE state = ? ORDER BY id")));
      st.Bind(JobStateName(state));
      std::vector<Job> out;
      while (true) {
        KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
        if (!row) return out;
        Row r(st);
        KTUNE_ASSIGN_OR_RETURN(Job job, ReadJob(r));
        out.push_back(std::move(job));
      }
    });
  }

  absl::StatusOr<int64_t> AddTrial(const Trial& trial) override {
    return Write([&](Db& db) -> absl::StatusOr<int64_t> {
      // Checked here for a kNotFound; the foreign key alone would say only "constraint".
      KTUNE_RETURN_IF_ERROR(CheckJobExists(db, trial.job_id));
      return InsertTrial(db, trial, trial.job_id);
    });
  }

  absl::StatusOr<std::vector<Trial>> ListTrials(int64_t job_id) override {
    return Read([&](Db& db) -> absl::StatusOr<std::vector<Trial>> {
      KTUNE_ASSIGN_OR_RETURN(
          Stmt st, db.Prepare(absl::StrCat("SELECT id, job_id, config, candidate_hash, outcome, "
                                           "compile_ms, ",
                                           kMetricColumns,
                                           ", log, created_unix_ms FROM trials "
                                           "WHERE job_id = ? ORDER BY id")));
      st.Bind(job_id);
      std::vector<Trial> out;
      while (true) {
        KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
        if (!row) return out;
        Row r(st);
        KTUNE_ASSIGN_OR_RETURN(Trial t, ReadTrial(r));
        out.push_back(std::move(t));
      }
    });
  }

  absl::StatusOr<int64_t> CommitWinner(const Entry& entry,
                                       const std::vector<Trial>& trials) override {
    KTUNE_RETURN_IF_ERROR(ValidateKey(entry.key));
    if (entry.job_id == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("winner for ", KeyString(entry.key), " names no job"));
    }
    KTUNE_RETURN_IF_ERROR(CheckIncomingCubin(entry, "winner for"));
    for (const Trial& t : trials) {
      if (t.job_id != 0 && t.job_id != entry.job_id) {
        return absl::InvalidArgumentError(
            absl::StrCat("winner of job ", entry.job_id, " comes with a trial of job ", t.job_id));
      }
    }
    return Write([&](Db& db) -> absl::StatusOr<int64_t> {
      KTUNE_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(&db));
      {
        KTUNE_ASSIGN_OR_RETURN(Stmt st,
                               db.Prepare("UPDATE jobs SET state = ?, done = total, error = '', "
                                          "updated_unix_ms = ? WHERE id = ?"));
        st.Bind(JobStateName(JobState::kDone)).Bind(NowUnixMs()).Bind(entry.job_id);
        KTUNE_RETURN_IF_ERROR(st.Run());
        if (db.Changes() == 0) {
          return absl::NotFoundError(
              absl::StrCat("no job ", entry.job_id, " for the winner of ", KeyString(entry.key)));
        }
      }
      for (const Trial& t : trials) {
        KTUNE_RETURN_IF_ERROR(InsertTrial(db, t, entry.job_id).status());
      }
      KTUNE_RETURN_IF_ERROR(DeleteEntryForKey(db, entry.key));
      KTUNE_ASSIGN_OR_RETURN(const int64_t id, InsertEntry(db, entry, entry.job_id));
      KTUNE_RETURN_IF_ERROR(txn.Commit());
      return id;
    });
  }

  absl::StatusOr<Lookup> LookupEntry(const EntryKey& key, const std::string& source_hash,
                                     const std::string& nvrtc_version) override {
    KTUNE_ASSIGN_OR_RETURN(
        Entry entry, Read([&](Db& db) -> absl::StatusOr<Entry> {
          KTUNE_ASSIGN_OR_RETURN(
              Stmt st, db.Prepare(absl::StrCat("SELECT ", EntryColumns(),
                                               " FROM entries WHERE device_model = ? AND "
                                               "template_id = ? AND dtype = ? AND shape = ?")));
          st.Bind(key.device_model).Bind(key.template_id).Bind(key.dtype).Bind(key.shape);
          KTUNE_ASSIGN_OR_RETURN(bool found, st.Step());
          if (!found) return absl::NotFoundError(absl::StrCat("no entry for ", KeyString(key)));
          Row r(st);
          return ReadEntry(r);
        }));
    KTUNE_RETURN_IF_ERROR(VerifyCubin(entry));
    Lookup out;
    out.stale = entry.source_hash != source_hash || entry.nvrtc_version != nvrtc_version;
    out.entry = std::move(entry);
    return out;
  }

  absl::StatusOr<Lookup> GetEntry(int64_t entry_id) override {
    struct Found {
      Entry entry;
      std::optional<std::string> current_hash;
    };
    KTUNE_ASSIGN_OR_RETURN(
        Found found, Read([&](Db& db) -> absl::StatusOr<Found> {
          KTUNE_ASSIGN_OR_RETURN(
              Stmt st, db.Prepare(absl::StrCat(
                           "SELECT ", EntryColumns(),
                           ", (SELECT t.source_hash FROM templates t WHERE t.id = template_id) "
                           "FROM entries WHERE id = ?")));
          st.Bind(entry_id);
          KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
          if (!row) return absl::NotFoundError(absl::StrCat("no entry ", entry_id));
          Row r(st);
          Found f;
          KTUNE_ASSIGN_OR_RETURN(f.entry, ReadEntry(r));
          if (!r.NextIsNull()) f.current_hash = r.Text();
          return f;
        }));
    KTUNE_RETURN_IF_ERROR(VerifyCubin(found.entry));
    Lookup out;
    // No caller versions here: only a recorded, different template source makes it stale.
    out.stale = found.current_hash.has_value() && *found.current_hash != found.entry.source_hash;
    out.entry = std::move(found.entry);
    return out;
  }

  absl::StatusOr<std::vector<EntrySummary>> ListEntries(const EntryFilter& filter) override {
    return Read([&](Db& db) -> absl::StatusOr<std::vector<EntrySummary>> {
      // "?1 IS NULL OR" keeps one cached statement for every combination of filters.
      KTUNE_ASSIGN_OR_RETURN(
          Stmt st,
          db.Prepare(absl::StrCat("SELECT ", SummaryColumns(),
                                  " FROM entries WHERE (?1 IS NULL OR device_model = ?1) AND "
                                  "(?2 IS NULL OR template_id = ?2) AND (?3 IS NULL OR dtype = ?3)",
                                  kKeyOrder)));
      for (const std::optional<std::string>* f :
           {&filter.device_model, &filter.template_id, &filter.dtype}) {
        if (f->has_value()) {
          st.Bind(**f);
        } else {
          st.BindNull();
        }
      }
      return ReadSummaries(st);
    });
  }

  absl::StatusOr<std::vector<EntrySummary>> ListStale(const std::string& nvrtc_version) override {
    return Read([&](Db& db) -> absl::StatusOr<std::vector<EntrySummary>> {
      // A template never recorded in `templates` cannot make its entries stale.
      KTUNE_ASSIGN_OR_RETURN(
          Stmt st, db.Prepare(absl::StrCat(
                       "SELECT ", SummaryColumns(),
                       " FROM entries WHERE nvrtc_version != ? OR source_hash != coalesce("
                       "(SELECT t.source_hash FROM templates t WHERE t.id = template_id), "
                       "source_hash)",
                       kKeyOrder)));
      st.Bind(nvrtc_version);
      return ReadSummaries(st);
    });
  }

  absl::StatusOr<StoreStats> Stats() override {
    return Read([&](Db& db) -> absl::StatusOr<StoreStats> {
      StoreStats stats;
      KTUNE_ASSIGN_OR_RETURN(stats.entries, db.QueryInt("SELECT count(*) FROM entries"));
      KTUNE_ASSIGN_OR_RETURN(stats.jobs, db.QueryInt("SELECT count(*) FROM jobs"));
      KTUNE_ASSIGN_OR_RETURN(stats.trials, db.QueryInt("SELECT count(*) FROM trials"));
      KTUNE_ASSIGN_OR_RETURN(
          Stmt st, db.Prepare("SELECT outcome, count(*) FROM trials GROUP BY outcome "
                              "ORDER BY outcome"));
      while (true) {
        KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
        if (!row) break;
        stats.trials_by_outcome.emplace_back(st.Text(0), st.Int(1));
      }
      KTUNE_ASSIGN_OR_RETURN(int64_t pages, db.QueryInt("PRAGMA page_count"));
      KTUNE_ASSIGN_OR_RETURN(int64_t page_size, db.QueryInt("PRAGMA page_size"));
      stats.file_bytes = pages * page_size;
      return stats;
    });
  }

  absl::StatusOr<std::vector<ImportResult>> ImportEntries(const std::vector<Device>& devices,
                                                          const std::vector<EntryBundle>& bundles,
                                                          ConflictRule rule) override {
    for (const Device& d : devices) {
      if (d.model_key.empty()) return absl::InvalidArgumentError("device model_key is empty");
    }
    // Every check before the transaction: a refused import leaves the file as it was.
    std::set<std::string> keys;
    for (size_t i = 0; i < bundles.size(); ++i) {
      const Entry& e = bundles[i].entry;
      KTUNE_RETURN_IF_ERROR(ValidateKey(e.key));
      if (!(bundles[i].job.key == e.key)) {
        return absl::InvalidArgumentError(
            absl::StrCat("imported entry ", KeyString(e.key), " comes with a job for ",
                         KeyString(bundles[i].job.key)));
      }
      KTUNE_RETURN_IF_ERROR(CheckIncomingCubin(e, "imported entry"));
      if (!keys.insert(KeyString(e.key)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("imported entry ", KeyString(e.key), " is there twice"));
      }
    }
    return Write([&](Db& db) -> absl::StatusOr<std::vector<ImportResult>> {
      KTUNE_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(&db));
      for (const Device& d : devices) {
        KTUNE_RETURN_IF_ERROR(InsertDevice(db, d, OnExistingDevice::kKeep));
      }
      std::vector<ImportResult> results;
      for (const EntryBundle& b : bundles) {
        ImportResult r;
        KTUNE_ASSIGN_OR_RETURN(std::optional<ExistingEntry> existing, FindEntry(db, b.entry.key));
        if (existing.has_value()) {
          r.existing_time_ns = existing->time_ns;
          const bool take =
              rule == ConflictRule::kReplace ||
              (rule == ConflictRule::kKeepFaster && b.entry.metrics.time_ns < existing->time_ns);
          if (!take) {
            r.action = ImportResult::Action::kKeptExisting;
            r.entry_id = existing->id;
            results.push_back(r);
            continue;
          }
          r.action = ImportResult::Action::kReplaced;
          KTUNE_RETURN_IF_ERROR(DeleteEntryForKey(db, b.entry.key));
        }
        KTUNE_ASSIGN_OR_RETURN(const int64_t job_id, InsertJob(db, b.job));
        for (const Trial& t : b.trials) {
          KTUNE_RETURN_IF_ERROR(InsertTrial(db, t, job_id).status());
        }
        KTUNE_ASSIGN_OR_RETURN(r.entry_id, InsertEntry(db, b.entry, job_id));
        results.push_back(r);
      }
      KTUNE_RETURN_IF_ERROR(txn.Commit());
      return results;
    });
  }

  absl::StatusOr<DeleteResult> DeleteEntries(const std::vector<int64_t>& entry_ids) override {
    return Write([&](Db& db) -> absl::StatusOr<DeleteResult> {
      KTUNE_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(&db));
      DeleteResult out;
      for (int64_t id : entry_ids) {
        bool has_job = false;
        int64_t job_id = 0;
        {  // the SELECT is reset (its Stmt destroyed) before the DELETEs
          KTUNE_ASSIGN_OR_RETURN(Stmt find, db.Prepare("SELECT job_id FROM entries WHERE id = ?"));
          find.Bind(id);
          KTUNE_ASSIGN_OR_RETURN(bool found, find.Step());
          if (!found) return absl::NotFoundError(absl::StrCat("no entry ", id));
          has_job = !find.IsNull(0);
          job_id = find.Int(0);
        }
        KTUNE_ASSIGN_OR_RETURN(Stmt del, db.Prepare("DELETE FROM entries WHERE id = ?"));
        del.Bind(id);
        KTUNE_RETURN_IF_ERROR(del.Run());
        out.entries += db.Changes();
        if (!has_job) continue;
        // A job whose winner another entry still is (not made by ktune, but possible) stays.
        KTUNE_ASSIGN_OR_RETURN(
            int64_t others, QueryCount(db, "SELECT count(*) FROM entries WHERE job_id = ?", job_id));
        if (others > 0) continue;
        KTUNE_ASSIGN_OR_RETURN(
            int64_t trials, QueryCount(db, "SELECT count(*) FROM trials WHERE job_id = ?", job_id));
        // Trials go by ON DELETE CASCADE (foreign_keys is on for the writer).
        KTUNE_ASSIGN_OR_RETURN(Stmt job, db.Prepare("DELETE FROM jobs WHERE id = ?"));
        job.Bind(job_id);
        KTUNE_RETURN_IF_ERROR(job.Run());
        if (db.Changes() > 0) {
          out.jobs += 1;
          out.trials += trials;
        }
      }
      KTUNE_RETURN_IF_ERROR(txn.Commit());
      return out;
    });
  }

  absl::StatusOr<int64_t> EntriesChangeCounter() override {
    // Under the mutex, read and count as one step: two callers cannot count an older value
    // after a newer one.
    absl::MutexLock lock(&generation_mu_);
    KTUNE_ASSIGN_OR_RETURN(
        const int64_t generation, Read([](Db& db) {
          return db.QueryInt("SELECT value FROM entries_generation WHERE id = 1");
        }));
    // Counted here rather than returned as is, so the answer only grows even if the file's
    // counter went back (the file replaced by an older copy while this store is open).
    if (generation != last_generation_) {
      last_generation_ = generation;
      ++changes_;
    }
    return changes_;
  }

 private:
  // Runs fn(Db&) on a read connection; on the writer for ":memory:".
  template <typename Fn>
  auto Read(Fn&& fn) -> decltype(fn(std::declval<Db&>())) {
    if (in_memory_) {
      absl::MutexLock lock(&write_mu_);
      return fn(*writer_);
    }
    absl::StatusOr<std::unique_ptr<Db>> db = AcquireReader();
    if (!db.ok()) return db.status();
    auto result = fn(**db);
    ReleaseReader(*std::move(db));
    return result;
  }

  // Runs fn(Db&) on the writer connection, one writer at a time.
  template <typename Fn>
  auto Write(Fn&& fn) -> decltype(fn(std::declval<Db&>())) {
    if (writer_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the store ", path_, " was opened read-only"));
    }
    absl::MutexLock lock(&write_mu_);
    return fn(*writer_);
  }

  absl::StatusOr<std::unique_ptr<Db>> AcquireReader() {
    {
      absl::MutexLock lock(&pool_mu_);
      if (!idle_readers_.empty()) {
        std::unique_ptr<Db> db = std::move(idle_readers_.back());
        idle_readers_.pop_back();
        return db;
      }
    }
    // Opened outside the lock: opening touches the file system.
    return Db::Open(path_, OpenMode::kReadOnly, options_.busy_timeout_ms);
  }

  void ReleaseReader(std::unique_ptr<Db> db) {
    absl::MutexLock lock(&pool_mu_);
    if (idle_readers_.size() < kMaxIdleReaders) idle_readers_.push_back(std::move(db));
  }

  const std::string path_;
  const StoreOptions options_;
  const bool in_memory_;

  absl::Mutex write_mu_;
  // Null for a read-only store. The pointer is fixed at construction; the connection is
  // used only under write_mu_.
  const std::unique_ptr<Db> writer_ ABSL_PT_GUARDED_BY(write_mu_);

  absl::Mutex pool_mu_;
  std::vector<std::unique_ptr<Db>> idle_readers_ ABSL_GUARDED_BY(pool_mu_);

  // EntriesChangeCounter's state: the file's counter as last read, and the changes seen.
  absl::Mutex generation_mu_;
  int64_t last_generation_ ABSL_GUARDED_BY(generation_mu_) = -1;
  int64_t changes_ ABSL_GUARDED_BY(generation_mu_) = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                                       const StoreOptions& options) {
  const bool in_memory = path == ":memory:";
  if (in_memory && options.read_only) {
    return absl::InvalidArgumentError("a read-only store needs a file, not :memory:");
  }
  // SQLite would open a FIFO and block until a writer came (`ktune cache ls --db FIFO` hung
  // for good), and a folder or a device is never a store: only a regular file, or none yet.
  struct stat st;
  if (!in_memory && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a ktune store: not a regular file"));
  }
  KTUNE_ASSIGN_OR_RETURN(
      std::unique_ptr<Db> db,
      Db::Open(path, options.read_only ? OpenMode::kReadOnly : OpenMode::kReadWriteCreate,
               options.busy_timeout_ms));
  // Nothing is written before the checks pass: a refused file stays byte-identical.
  KTUNE_RETURN_IF_ERROR(CheckSchema(*db, options.read_only).status());
  if (options.read_only) {
    return std::make_unique<SqliteStore>(path, options, nullptr, std::move(db));
  }
  // Per connection, and only outside a transaction; trials' ON DELETE CASCADE needs it.
  KTUNE_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys = ON"));
  KTUNE_RETURN_IF_ERROR(Migrate(*db));
  // In WAL mode NORMAL loses no commit when the process dies (the WAL is written before
  // COMMIT returns) and never corrupts the file; only a power loss may drop the last
  // commits. FULL would fsync on every commit.
  KTUNE_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = NORMAL"));
  return std::make_unique<SqliteStore>(path, options, std::move(db), nullptr);
}

absl::StatusOr<std::string> CheckIntegrity(const std::string& path) {
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Db> db,
                         Db::Open(path, OpenMode::kReadOnly, /*busy_timeout_ms=*/5000));
  KTUNE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("PRAGMA integrity_check"));
  std::vector<std::string> lines;
  while (true) {
    KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    lines.push_back(st.Text(0));
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace ktune::store
