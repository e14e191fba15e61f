// A thin RAII layer over the SQLite C API, internal to server/store: a connection with a
// cache of prepared statements, a borrowed statement, and a write transaction. Every
// sqlite3_* call that returns a result code goes through one checked wrapper, which turns
// it into an absl::Status naming the call, the file, SQLite's message and the SQL.
//
// Thread-compatible: a Db and the statements borrowed from it are used by one thread at a
// time (the store's writer mutex or its reader pool sees to that). sqlite_db.cc is the only
// file in ktune that includes <sqlite3.h>; this header only forward-declares its handles.
#ifndef KTUNE_SERVER_STORE_SQLITE_DB_H_
#define KTUNE_SERVER_STORE_SQLITE_DB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ktune::store::internal {

enum class OpenMode {
  kReadOnly,         // SQLITE_OPEN_READONLY: never creates, never writes the file
  kReadWrite,        // an existing file only
  kReadWriteCreate,  // creates an empty file if there is none
};

class Db;

// A prepared statement borrowed from a Db. Binds are by position and counted: the first
// Bind sets ?1, the next ?2, ... A bind failure is kept and reported by the next Step/Run,
// so call sites stay one line per column. Destruction resets the statement, which ends the
// connection's implicit read transaction (an un-reset SELECT would pin an old snapshot).
class Stmt {
 public:
  Stmt(Stmt&& other) noexcept;
  Stmt& operator=(Stmt&&) = delete;
  Stmt(const Stmt&) = delete;
  ~Stmt();

  Stmt& Bind(int64_t v);
  Stmt& Bind(int v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& Bind(double v);
  Stmt& Bind(absl::string_view text);  // TEXT
  Stmt& BindBlob(absl::string_view bytes);
  Stmt& BindNull();

  // True when a row is ready, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Steps a statement that returns no rows.
  absl::Status Run();

  // Columns of the current row, 0-based. NULL reads as 0 / empty.
  int64_t Int(int col) const;
  double Double(int col) const;
  std::string Text(int col) const;
  std::string Blob(int col) const;  // embedded NULs kept
  bool IsNull(int col) const;

 private:
  friend class Db;
  Stmt(Db* db, sqlite3_stmt* stmt, bool* in_use);

  Db* db_;
  sqlite3_stmt* stmt_;
  bool* in_use_;  // the cache slot's flag; null when this Stmt owns an uncached statement
  int next_bind_ = 1;
  absl::Status bind_status_;
};

// One SQLite connection. Closing it finalizes its cached statements first.
class Db {
 public:
  // Opens `path` ("" is refused; ":memory:" is a private in-memory database) with extended
  // result codes on and `busy_timeout_ms` for lock waits.
  static absl::StatusOr<std::unique_ptr<Db>> Open(const std::string& path, OpenMode mode,
                                                  int busy_timeout_ms);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs a script of statements that return no rows (schema DDL, PRAGMA assignments).
  absl::Status Exec(absl::string_view sql);
  // The cached prepared statement for `sql` (one statement). Nested use of one SQL text is
  // allowed: a statement already borrowed is not shared, a fresh one is prepared instead.
  absl::StatusOr<Stmt> Prepare(absl::string_view sql);
  // Convenience for one-row, one-column queries such as "PRAGMA user_version".
  absl::StatusOr<int64_t> QueryInt(absl::string_view sql);
  absl::StatusOr<std::string> QueryText(absl::string_view sql);

  int64_t LastInsertRowid() const;
  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  // True while a BEGIN has not been committed or rolled back.
  bool InTransaction() const;
  const std::string& path() const { return path_; }

 private:
  friend class Stmt;
  struct CachedStmt {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };

  Db(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  // The one checked wrapper: OK for SQLITE_OK, otherwise a Status naming `call`.
  absl::Status Check(int rc, absl::string_view call, absl::string_view sql = {}) const;

  sqlite3* db_;
  std::string path_;
  std::unordered_map<std::string, std::unique_ptr<CachedStmt>> cache_;
};

// A write transaction, begun IMMEDIATE so the write lock is taken (waiting up to the busy
// timeout) before any statement runs: a deferred one could fail half-way with SQLITE_BUSY
// when upgrading its lock. Rolled back on destruction unless committed.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Db* db);
  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_;  // null once committed or moved from
};

}  // namespace ktune::store::internal

#endif  // KTUNE_SERVER_STORE_SQLITE_DB_H_
