#include "server/store/sqlite_db.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"

namespace ktune::store::internal {
namespace {

// The most specific absl code for an SQLite primary result code.
absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;  // another connection holds the lock
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_CONSTRAINT:
    case SQLITE_READONLY:
    case SQLITE_MISMATCH:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
    case SQLITE_TOOBIG:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_CANTOPEN:
      return absl::StatusCode::kUnavailable;
    case SQLITE_RANGE:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

// SQL as one line, shortened, for error messages.
std::string Abbreviate(absl::string_view sql) {
  std::string out;
  bool space = false;
  for (char c : sql) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
    if (out.size() >= 120) return absl::StrCat(out, "...");
  }
  return out;
}

bool OnlyWhitespace(const char* s) {
  for (; s != nullptr && *s != '\0'; ++s) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(*s))) return false;
  }
  return true;
}

}  // namespace

// ---- Db ----

absl::Status Db::Check(int rc, absl::string_view call, absl::string_view sql) const {
  if (rc == SQLITE_OK) return absl::OkStatus();
  // sqlite3_errmsg describes the connection's latest failure, which is this call's;
  // without a connection only the generic text for the code is known.
  const char* message = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  std::string text = absl::StrCat(call, " on ", path_, ": ", message, " [sqlite ", rc, "]");
  if (!sql.empty()) absl::StrAppend(&text, " in \"", Abbreviate(sql), "\"");
  return absl::Status(CodeFor(rc), text);
}

namespace {

// True when a read-only open of the WAL store `path` could not work as SQLite does it: there
// is no -shm file (a clean close removes it) and we may not create one beside the store (a
// folder we cannot write), so the first read fails with SQLITE_READONLY_DIRECTORY ("attempt
// to write a readonly database"). With no -wal file either, every commit is in the main
// file, and reading it as immutable (no -shm, no locks) sees all of them. A writer that
// starts later is not seen; a read-only reader of a folder it cannot write takes that.
bool NeedsImmutable(const std::string& path) {
  struct stat st;
  if (::stat((path + "-shm").c_str(), &st) == 0 || ::stat((path + "-wal").c_str(), &st) == 0) {
    return false;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  return ::access(dir.c_str(), W_OK) != 0;
}

// "file:PATH?immutable=1", PATH with the characters a URI gives meaning to escaped.
std::string ImmutableUri(const std::string& path) {
  std::string uri = "file:";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      absl::StrAppend(&uri, "%", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      uri.push_back(c);
    }
  }
  return uri + "?immutable=1";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path, OpenMode mode,
                                             int busy_timeout_ms) {
  if (path.empty()) {
    // SQLite would open a private temporary file, which is never what a caller meant.
    return absl::InvalidArgumentError("sqlite database path is empty");
  }
  if (mode != OpenMode::kReadWriteCreate && path != ":memory:") {
    // SQLite would only say "unable to open database file".
    struct stat st;
    if (stat(path.c_str(), &st) != 0 && errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("no database file at ", path,
                       mode == OpenMode::kReadOnly ? " (a read-only open never creates one)" : ""));
    }
  }
  // NOMUTEX: each connection is used by one thread at a time (see the header), so
  // SQLite's own per-connection mutex would only cost.
  int flags = SQLITE_OPEN_NOMUTEX;
  switch (mode) {
    case OpenMode::kReadOnly:
      flags |= SQLITE_OPEN_READONLY;
      break;
    case OpenMode::kReadWrite:
      flags |= SQLITE_OPEN_READWRITE;
      break;
    case OpenMode::kReadWriteCreate:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
  }
  if (mode == OpenMode::kReadWriteCreate && path != ":memory:") {
    // SQLite creates a new file 0644 (less the umask): the store is born 0600 instead, and
    // its -wal and -shm files follow the main file's mode. An empty file is a new database
    // to SQLite; one that exists is left as it is.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
  }
  std::string name = path;
  if (mode == OpenMode::kReadOnly && NeedsImmutable(path)) {
    name = ImmutableUri(path);
    flags |= SQLITE_OPEN_URI;
  }
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(name.c_str(), &raw, flags, nullptr);
  // sqlite3_open_v2 allocates a handle even when it fails; the Db owns and closes it.
  std::unique_ptr<Db> db(new Db(raw, path));
  KTUNE_RETURN_IF_ERROR(db->Check(rc, "sqlite3_open_v2"));
  KTUNE_RETURN_IF_ERROR(
      db->Check(sqlite3_extended_result_codes(raw, 1), "sqlite3_extended_result_codes"));
  KTUNE_RETURN_IF_ERROR(
      db->Check(sqlite3_busy_timeout(raw, busy_timeout_ms), "sqlite3_busy_timeout"));
  return db;
}

Db::~Db() {
  for (auto& [sql, cached] : cache_) sqlite3_finalize(cached->stmt);
  // close_v2 never fails for a valid handle; it defers the close while an uncached Stmt is
  // still alive, so there is nothing to report from a destructor.
  sqlite3_close_v2(db_);
}

absl::Status Db::Exec(absl::string_view sql) {
  std::string text(sql);  // sqlite3_exec wants a NUL-terminated script
  char* error = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error);
  sqlite3_free(error);  // the same text as sqlite3_errmsg, which Check reports
  return Check(rc, "sqlite3_exec", sql);
}

absl::StatusOr<Stmt> Db::Prepare(absl::string_view sql) {
  std::string key(sql);
  auto it = cache_.find(key);
  if (it != cache_.end() && !it->second->in_use) {
    it->second->in_use = true;
    return Stmt(this, it->second->stmt, &it->second->in_use);
  }
  const bool cache = it == cache_.end();
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  KTUNE_RETURN_IF_ERROR(
      Check(sqlite3_prepare_v3(db_, key.c_str(), static_cast<int>(key.size()),
                               cache ? SQLITE_PREPARE_PERSISTENT : 0, &stmt, &tail),
            "sqlite3_prepare_v3", sql));
  if (stmt == nullptr || !OnlyWhitespace(tail)) {
    sqlite3_finalize(stmt);
    return absl::InternalError(
        absl::StrCat("Prepare wants exactly one SQL statement: \"", Abbreviate(sql), "\""));
  }
  if (!cache) return Stmt(this, stmt, nullptr);
  auto slot = std::make_unique<CachedStmt>();
  slot->stmt = stmt;
  slot->in_use = true;
  bool* in_use = &slot->in_use;
  cache_.emplace(std::move(key), std::move(slot));
  return Stmt(this, stmt, in_use);
}

absl::StatusOr<int64_t> Db::QueryInt(absl::string_view sql) {
  KTUNE_ASSIGN_OR_RETURN(Stmt st, Prepare(sql));
  KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::InternalError(absl::StrCat("no row from \"", sql, "\""));
  return st.Int(0);
}

absl::StatusOr<std::string> Db::QueryText(absl::string_view sql) {
  KTUNE_ASSIGN_OR_RETURN(Stmt st, Prepare(sql));
  KTUNE_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::InternalError(absl::StrCat("no row from \"", sql, "\""));
  return st.Text(0);
}

int64_t Db::LastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }
int64_t Db::Changes() const { return sqlite3_changes64(db_); }
bool Db::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

// ---- Stmt ----

Stmt::Stmt(Db* db, sqlite3_stmt* stmt, bool* in_use) : db_(db), stmt_(stmt), in_use_(in_use) {}

Stmt::Stmt(Stmt&& other) noexcept
    : db_(other.db_),
      stmt_(other.stmt_),
      in_use_(other.in_use_),
      next_bind_(other.next_bind_),
      bind_status_(std::move(other.bind_status_)) {
  other.stmt_ = nullptr;
  other.in_use_ = nullptr;
}

Stmt::~Stmt() {
  if (stmt_ == nullptr) return;
  if (in_use_ == nullptr) {
    sqlite3_finalize(stmt_);
    return;
  }
  // reset only repeats the last step's error, already reported by Step; clear_bindings
  // cannot fail. Neither result has anywhere to go from a destructor.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  *in_use_ = false;
}

Stmt& Stmt::Bind(int64_t v) {
  int i = next_bind_++;
  if (bind_status_.ok()) {
    bind_status_ =
        db_->Check(sqlite3_bind_int64(stmt_, i, v), "sqlite3_bind_int64", sqlite3_sql(stmt_));
  }
  return *this;
}

Stmt& Stmt::Bind(double v) {
  int i = next_bind_++;
  if (bind_status_.ok()) {
    bind_status_ =
        db_->Check(sqlite3_bind_double(stmt_, i, v), "sqlite3_bind_double", sqlite3_sql(stmt_));
  }
  return *this;
}

Stmt& Stmt::Bind(absl::string_view text) {
  int i = next_bind_++;
  if (bind_status_.ok()) {
    // SQLITE_TRANSIENT copies: callers bind temporaries such as ConfigToJson(...).
    bind_status_ = db_->Check(
        sqlite3_bind_text64(stmt_, i, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
        "sqlite3_bind_text64", sqlite3_sql(stmt_));
  }
  return *this;
}

Stmt& Stmt::BindBlob(absl::string_view bytes) {
  int i = next_bind_++;
  if (bind_status_.ok()) {
    // A NULL pointer would bind SQL NULL; an empty blob must stay a (zero-length) blob.
    static const char kEmpty = 0;
    const char* data = bytes.empty() ? &kEmpty : bytes.data();
    bind_status_ = db_->Check(sqlite3_bind_blob64(stmt_, i, data, bytes.size(), SQLITE_TRANSIENT),
                              "sqlite3_bind_blob64", sqlite3_sql(stmt_));
  }
  return *this;
}

Stmt& Stmt::BindNull() {
  int i = next_bind_++;
  if (bind_status_.ok()) {
    bind_status_ = db_->Check(sqlite3_bind_null(stmt_, i), "sqlite3_bind_null", sqlite3_sql(stmt_));
  }
  return *this;
}

absl::StatusOr<bool> Stmt::Step() {
  KTUNE_RETURN_IF_ERROR(bind_status_);
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Check(rc, "sqlite3_step", sqlite3_sql(stmt_));
}

absl::Status Stmt::Run() {
  KTUNE_ASSIGN_OR_RETURN(bool row, Step());
  if (row) {
    return absl::InternalError(
        absl::StrCat("statement returned a row: \"", Abbreviate(sqlite3_sql(stmt_)), "\""));
  }
  return absl::OkStatus();
}

int64_t Stmt::Int(int col) const { return sqlite3_column_int64(stmt_, col); }
double Stmt::Double(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Stmt::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (p == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
}

std::string Stmt::Blob(int col) const {
  // _bytes must follow _blob: the pointer call may convert the value first.
  const void* p = sqlite3_column_blob(stmt_, col);
  if (p == nullptr) return "";
  return std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
}

bool Stmt::IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

// ---- Transaction ----

absl::StatusOr<Transaction> Transaction::Begin(Db* db) {
  KTUNE_ASSIGN_OR_RETURN(Stmt begin, db->Prepare("BEGIN IMMEDIATE"));
  KTUNE_RETURN_IF_ERROR(begin.Run());
  return Transaction(db);
}

absl::Status Transaction::Commit() {
  KTUNE_ASSIGN_OR_RETURN(Stmt commit, db_->Prepare("COMMIT"));
  KTUNE_RETURN_IF_ERROR(commit.Run());
  db_ = nullptr;
  return absl::OkStatus();
}

Transaction::~Transaction() {
  // Some errors (SQLITE_FULL, SQLITE_IOERR, ...) roll back by themselves; only roll back
  // what is still open. A failed ROLLBACK leaves the connection's transaction to be
  // undone when it closes, and a destructor has nowhere to report it.
  if (db_ != nullptr && db_->InTransaction()) db_->Exec("ROLLBACK").IgnoreError();
}

}  // namespace ktune::store::internal
