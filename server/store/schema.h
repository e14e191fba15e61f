// The store's on-disk format: the schema as an ordered list of migrations, tracked by
// PRAGMA user_version, plus the checks that decide whether a file may be opened at all.
//
// Migrations are append-only: v1 is what the first release created, and each later one
// turns version N-1 into N. An old migration is never edited (the golden test pins their
// text), because files made by older builds were created by exactly that text.
//
// The functions are thread-compatible: each works on one connection, which must not be used
// by another thread meanwhile. Internal to server/store, except the testing hook at the end.
#ifndef KTUNE_SERVER_STORE_SCHEMA_H_
#define KTUNE_SERVER_STORE_SCHEMA_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/sqlite_db.h"

namespace ktune::store {

struct Migration {
  int version;                // the user_version it leaves behind
  absl::string_view summary;  // one line: what and why
  absl::string_view sql;      // statements, run in one transaction
};

// v1, v2, ... in order; version i is at index i-1.
const std::vector<Migration>& Migrations();

// The version this build creates and migrates to.
int CurrentSchemaVersion();

// Every migration's SQL under a "-- vN: summary" header: the text a golden test pins.
std::string SchemaSql();

// Decides, without writing anything, whether `db` holds a store this build can use, and
// returns its schema version (0 for an empty file, which a read-write open may initialize).
//   kDataLoss: not an SQLite file (the message names the path), or fails PRAGMA quick_check.
//   kFailedPrecondition: tables but no ktune schema ("not a ktune store"); a schema newer
//     than CurrentSchemaVersion() (naming both versions); or, when `read_only`, an empty
//     file or an older schema (a read-only open cannot migrate).
absl::StatusOr<int> CheckSchema(internal::Db& db, bool read_only);

// Puts a file database in WAL mode and applies the migrations after its version up to
// `target_version`, each in its own IMMEDIATE transaction that re-reads user_version, so
// two processes opening one new file do not both apply a step.
// REQUIRES: CheckSchema(db, /*read_only=*/false) passed.
absl::Status Migrate(internal::Db& db, int target_version = CurrentSchemaVersion());

// The schema version of the store file at `path`, opened read-only (never created).
absl::StatusOr<int> ReadSchemaVersion(const std::string& path);

// For tests: creates a new store file at an older `version` (1..CurrentSchemaVersion()), as
// an older build would have left it, so migrating from it can be tested.
// kFailedPrecondition if `path` already holds a database with tables.
absl::Status CreateStoreFileAtVersionForTesting(const std::string& path, int version);

}  // namespace ktune::store

#endif  // KTUNE_SERVER_STORE_SCHEMA_H_
