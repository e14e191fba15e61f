#include "server/store/schema.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "server/base/status_macros.h"

namespace ktune::store {
namespace {

using internal::Db;
using internal::OpenMode;
using internal::Transaction;

// PRAGMA application_id: "ktun" in ASCII. Tells a ktune file from another program's
// SQLite file that happens to set user_version.
constexpr int64_t kApplicationId = 0x6b74756e;

// v1: what the first release created. Enums (job state, trial outcome) are stored by name
// and checked when read, so a new value never needs a table rebuild. Times are unix ms.
constexpr absl::string_view kV1 = R"sql(
PRAGMA application_id = 1802794350;

CREATE TABLE devices (
  model_key         TEXT PRIMARY KEY NOT NULL,
  name              TEXT NOT NULL,
  cc_major          INTEGER NOT NULL,
  cc_minor          INTEGER NOT NULL,
  sm_count          INTEGER NOT NULL,
  l2_bytes          INTEGER NOT NULL,
  memory_bus_bits   INTEGER NOT NULL,
  memory_clock_khz  INTEGER NOT NULL,
  copy_gbps         REAL NOT NULL,
  uuid              TEXT NOT NULL,
  driver_version    TEXT NOT NULL,
  updated_unix_ms   INTEGER NOT NULL
);

CREATE TABLE templates (
  id                TEXT PRIMARY KEY NOT NULL,
  source_hash       TEXT NOT NULL,
  updated_unix_ms   INTEGER NOT NULL
);

-- AUTOINCREMENT: job and entry ids are shown to clients, so a deleted one is never reused.
CREATE TABLE jobs (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,
  device_model      TEXT NOT NULL,
  template_id       TEXT NOT NULL,
  dtype             TEXT NOT NULL,
  shape             TEXT NOT NULL,
  source_hash       TEXT NOT NULL,
  nvrtc_version     TEXT NOT NULL,
  state             TEXT NOT NULL,
  done              INTEGER NOT NULL,
  total             INTEGER NOT NULL,
  created_unix_ms   INTEGER NOT NULL,
  updated_unix_ms   INTEGER NOT NULL
);
CREATE INDEX jobs_by_key ON jobs (device_model, template_id, dtype, shape);

CREATE TABLE trials (
  id                INTEGER PRIMARY KEY,
  job_id            INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  config            TEXT NOT NULL,
  candidate_hash    TEXT NOT NULL,
  outcome           TEXT NOT NULL,
  compile_ms        REAL NOT NULL,
  time_ns           REAL NOT NULL,
  spread_ns         REAL NOT NULL,
  repeats           INTEGER NOT NULL,
  registers         INTEGER NOT NULL,
  spill_bytes       INTEGER NOT NULL,
  static_smem       INTEGER NOT NULL,
  dynamic_smem      INTEGER NOT NULL,
  occupancy         REAL NOT NULL,
  waves             REAL NOT NULL,
  gbps              REAL NOT NULL,
  gflops            REAL NOT NULL,
  ceiling_fraction  REAL NOT NULL,
  log               TEXT NOT NULL,
  created_unix_ms   INTEGER NOT NULL
);
CREATE INDEX trials_by_job ON trials (job_id, id);

-- The winner per key. job_id outlives a pruned job as NULL: the winner stays usable.
CREATE TABLE entries (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,
  device_model      TEXT NOT NULL,
  template_id       TEXT NOT NULL,
  dtype             TEXT NOT NULL,
  shape             TEXT NOT NULL,
  source_hash       TEXT NOT NULL,
  nvrtc_version     TEXT NOT NULL,
  config            TEXT NOT NULL,
  cubin             BLOB NOT NULL,
  cubin_sha256      TEXT NOT NULL,
  launches          TEXT NOT NULL,
  time_ns           REAL NOT NULL,
  spread_ns         REAL NOT NULL,
  repeats           INTEGER NOT NULL,
  registers         INTEGER NOT NULL,
  spill_bytes       INTEGER NOT NULL,
  static_smem       INTEGER NOT NULL,
  dynamic_smem      INTEGER NOT NULL,
  occupancy         REAL NOT NULL,
  waves             REAL NOT NULL,
  gbps              REAL NOT NULL,
  gflops            REAL NOT NULL,
  ceiling_fraction  REAL NOT NULL,
  job_id            INTEGER REFERENCES jobs (id) ON DELETE SET NULL,
  trials_total      INTEGER NOT NULL,
  trials_ok         INTEGER NOT NULL,
  created_unix_ms   INTEGER NOT NULL
);
CREATE UNIQUE INDEX entries_by_key ON entries (device_model, template_id, dtype, shape);
-- Deleting a job looks up its entries (ON DELETE SET NULL); without this, a table scan.
CREATE INDEX entries_by_job ON entries (job_id);
)sql";

// v2: v1 recorded neither how a job searched nor why it failed, so a resumed job could not
// restart its strategy and a failed one could not say why; and listing the running jobs
// after a crash scanned the table. Entries also gain how long their tuning took.
constexpr absl::string_view kV2 = R"sql(
ALTER TABLE jobs ADD COLUMN strategy TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN error TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_by_state ON jobs (state, id);
ALTER TABLE entries ADD COLUMN tuning_seconds REAL NOT NULL DEFAULT 0;
)sql";

// v3: a trial's time means little without how it was taken: v2 kept neither how full the
// last wave was (a grid of 1.02 waves runs its tail nearly empty) nor the measurement
// settings. Rows from older builds read 0 in all three: not recorded, not "no batching".
constexpr absl::string_view kV3 = R"sql(
ALTER TABLE trials ADD COLUMN last_wave REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN batch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN l2_flushed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN last_wave REAL NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN batch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN l2_flushed INTEGER NOT NULL DEFAULT 0;
)sql";

// v4: a winner's speed-up means little without the baseline it beat: v3 kept the default
// config's time only as one trial among many (and not at all when the search skipped it).
// Rows from older builds read 0: not measured.
constexpr absl::string_view kV4 = R"sql(
ALTER TABLE entries ADD COLUMN default_time_ns REAL NOT NULL DEFAULT 0;
)sql";

// v5: ktuned keeps GetKernel answers while the entries they were read from are unchanged.
// Up to v4 it could only watch SQLite's data_version, which moves on every commit to any
// table, so each trial of a running tune emptied that cache. A one-row counter that triggers
// move on every insert, update and delete of an entry, whichever connection or process (or
// program: the triggers are in the file) makes it.
constexpr absl::string_view kV5 = R"sql(
CREATE TABLE entries_generation (
  id                INTEGER PRIMARY KEY CHECK (id = 1),
  value             INTEGER NOT NULL
);
INSERT INTO entries_generation (id, value) VALUES (1, 0);
CREATE TRIGGER entries_generation_on_insert AFTER INSERT ON entries
BEGIN UPDATE entries_generation SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER entries_generation_on_update AFTER UPDATE ON entries
BEGIN UPDATE entries_generation SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER entries_generation_on_delete AFTER DELETE ON entries
BEGIN UPDATE entries_generation SET value = value + 1 WHERE id = 1; END;
)sql";

// v6: why a job's search stopped (the strategy's budget or convergence, the time limit, a
// candidate at the roofline), shown by `ktune cache show` beside the strategy.
constexpr absl::string_view kV6 = R"sql(
ALTER TABLE jobs ADD COLUMN stop_reason TEXT NOT NULL DEFAULT '';
)sql";

// Wraps the first read of a file: SQLite only finds out there that it is not a database.
absl::Status NotSqliteOr(const absl::Status& s, const std::string& path) {
  if (s.code() == absl::StatusCode::kDataLoss) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a ktune store: not an SQLite database (", s.message(), ")"));
  }
  return s;
}

}  // namespace

const std::vector<Migration>& Migrations() {
  static const auto* const kMigrations = new std::vector<Migration>{
      {1, "devices, templates, jobs, trials and entries", kV1},
      {2, "jobs.strategy, jobs.error, jobs_by_state, entries.tuning_seconds", kV2},
      {3, "last_wave, batch and l2_flushed on trials and entries", kV3},
      {4, "entries.default_time_ns", kV4},
      {5, "entries_generation, moved by triggers on entries", kV5},
      {6, "jobs.stop_reason", kV6},
  };
  return *kMigrations;
}

int CurrentSchemaVersion() { return Migrations().back().version; }

std::string SchemaSql() {
  std::string out;
  for (const Migration& m : Migrations()) {
    absl::StrAppend(&out, "-- v", m.version, ": ", m.summary, "\n",
                    absl::StripAsciiWhitespace(m.sql), "\n\n");
  }
  return out;
}

absl::StatusOr<int> CheckSchema(Db& db, bool read_only) {
  const std::string& path = db.path();
  absl::StatusOr<int64_t> version = db.QueryInt("PRAGMA user_version");
  if (!version.ok()) return NotSqliteOr(version.status(), path);
  KTUNE_ASSIGN_OR_RETURN(int64_t app_id, db.QueryInt("PRAGMA application_id"));
  KTUNE_ASSIGN_OR_RETURN(
      int64_t tables,
      db.QueryInt("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' "
                  "ESCAPE '\\'"));

  if (*version == 0) {
    if (tables > 0) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is not a ktune store: it has ",
                                                        tables,
                                                        " tables or indices but no ktune schema"));
    }
    if (read_only) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is not a ktune store: it is empty, and a read-only open never creates one"));
    }
    return 0;
  }
  if (app_id != kApplicationId) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a ktune store: application_id is ", app_id, ", not ", kApplicationId));
  }
  if (*version > CurrentSchemaVersion()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has schema version %d, newer than version %d that this build knows; use a newer "
        "ktune",
        path, *version, CurrentSchemaVersion()));
  }
  // quick_check rather than integrity_check: it skips matching indices against tables,
  // which is what makes the full check slow on a large file, and still finds a torn page.
  KTUNE_ASSIGN_OR_RETURN(std::string check, db.QueryText("PRAGMA quick_check"));
  if (check != "ok") {
    return absl::DataLossError(absl::StrCat(path, " fails its integrity check: ", check));
  }
  if (read_only && *version < CurrentSchemaVersion()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has schema version %d, older than version %d of this build; a read-only open "
        "cannot migrate it, open it read-write once",
        path, *version, CurrentSchemaVersion()));
  }
  return static_cast<int>(*version);
}

absl::Status Migrate(Db& db, int target_version) {
  if (target_version < 1 || target_version > CurrentSchemaVersion()) {
    return absl::InvalidArgumentError(absl::StrCat("no schema version ", target_version));
  }
  // WAL is a property of the file, set once; a reader then never waits for the writer.
  KTUNE_ASSIGN_OR_RETURN(std::string mode, db.QueryText("PRAGMA journal_mode = WAL"));
  if (mode != "wal" && db.path() != ":memory:") {
    return absl::FailedPreconditionError(
        absl::StrCat("could not put ", db.path(), " in WAL mode; its journal mode is ", mode));
  }
  KTUNE_ASSIGN_OR_RETURN(int64_t start, db.QueryInt("PRAGMA user_version"));
  for (const Migration& m : Migrations()) {
    if (m.version > target_version) break;
    if (m.version <= start) continue;  // the common case: no write lock needed
    KTUNE_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(&db));
    // Re-read under the write lock: another process may have applied this step meanwhile.
    KTUNE_ASSIGN_OR_RETURN(int64_t version, db.QueryInt("PRAGMA user_version"));
    if (version >= m.version) continue;  // txn rolls back: nothing was written
    if (version != m.version - 1) {
      return absl::InternalError(absl::StrFormat("%s: schema version %d cannot step to %d",
                                                 db.path(), version, m.version));
    }
    KTUNE_RETURN_IF_ERROR(db.Exec(m.sql));
    KTUNE_RETURN_IF_ERROR(db.Exec(absl::StrCat("PRAGMA user_version = ", m.version)));
    KTUNE_RETURN_IF_ERROR(txn.Commit());
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ReadSchemaVersion(const std::string& path) {
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Db> db,
                         Db::Open(path, OpenMode::kReadOnly, /*busy_timeout_ms=*/1000));
  absl::StatusOr<int64_t> version = db->QueryInt("PRAGMA user_version");
  if (!version.ok()) return NotSqliteOr(version.status(), path);
  return static_cast<int>(*version);
}

absl::Status CreateStoreFileAtVersionForTesting(const std::string& path, int version) {
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Db> db,
                         Db::Open(path, OpenMode::kReadWriteCreate, /*busy_timeout_ms=*/1000));
  KTUNE_ASSIGN_OR_RETURN(int existing, CheckSchema(*db, /*read_only=*/false));
  if (existing != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " already holds a store at schema version ", existing));
  }
  return Migrate(*db, version);
}

}  // namespace ktune::store
