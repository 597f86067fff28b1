#include "store/sqlite.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <utility>

namespace kiln::store {
namespace {

Code CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Code::kUnavailable;
    case SQLITE_CONSTRAINT:
      return (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE)
                 ? Code::kAlreadyExists
                 : Code::kInvalidArgument;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
    case SQLITE_TOOBIG: return Code::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return Code::kDataLoss;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH: return Code::kPermissionDenied;
    case SQLITE_CANTOPEN: return Code::kFailedPrecondition;
    default: return Code::kInternal;
  }
}

Error MakeSqliteError(std::string_view what, int rc, const char* detail, int sys_errno) {
  std::string message = "sqlite: " + std::string(what) + ": ";
  message += detail != nullptr ? detail : sqlite3_errstr(rc);
  message += " (";
  message += sqlite3_errstr(rc);
  message += ", code " + std::to_string(rc) + ")";
  Error e = MakeError(CodeFor(rc), std::move(message));
  e.sys_errno = sys_errno;
  return e;
}

}  // namespace

Db::Db(Db&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Db& Db::operator=(Db&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Db::~Db() {
  // close_v2 defers the close until every statement is finalized; Statement
  // finalizes in its destructor, so nothing leaks even on early returns.
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Result<Db> Db::Open(const std::string& path, bool create) {
  if (!create) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      Error e = ErrnoError("stat " + path);
      if (e.sys_errno == ENOENT) e.code = Code::kNotFound;
      return e;
    }
  }
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) |
                    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Db db(raw);  // a handle comes back even on failure, and must be closed
  if (rc != SQLITE_OK) {
    return MakeSqliteError("open " + path, rc, raw != nullptr ? sqlite3_errmsg(raw) : nullptr,
                           raw != nullptr ? sqlite3_system_errno(raw) : 0);
  }
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

Status Db::Exec(std::string_view what, const char* sql) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return LastError(what, rc);
  return OkStatus();
}

int64_t Db::Changes() const { return sqlite3_changes64(db_); }
int64_t Db::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }

Error Db::LastError(std::string_view what, int rc) const {
  // sqlite3_errmsg describes the most recent failure on the connection, which
  // is this one because the caller holds the store's mutex.
  return MakeSqliteError(what, rc, sqlite3_errmsg(db_), sqlite3_system_errno(db_));
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      what_(std::move(other.what_)),
      bind_error_(other.bind_error_) {}

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

Result<Statement> Statement::Prepare(Db& db, std::string_view what, std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc =
      sqlite3_prepare_v2(db.get(), sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    if (stmt != nullptr) sqlite3_finalize(stmt);
    return db.LastError("prepare " + std::string(what), rc);
  }
  return Statement(db, stmt, std::string(what));
}

#define KILN_SQLITE_BIND(call)                                                       \
  do {                                                                               \
    const int kiln_bind_rc_ = (call);                                                \
    if (kiln_bind_rc_ != SQLITE_OK && bind_error_ == 0) bind_error_ = kiln_bind_rc_; \
  } while (0)

void Statement::BindInt(int index, int64_t value) {
  KILN_SQLITE_BIND(sqlite3_bind_int64(stmt_, index, value));
}
void Statement::BindReal(int index, double value) {
  KILN_SQLITE_BIND(sqlite3_bind_double(stmt_, index, value));
}
// A null pointer would bind NULL, not an empty value: an empty string_view may
// have one.
void Statement::BindText(int index, std::string_view text) {
  KILN_SQLITE_BIND(sqlite3_bind_text64(stmt_, index, text.data() != nullptr ? text.data() : "",
                                       text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
}
void Statement::BindBlob(int index, std::string_view bytes) {
  KILN_SQLITE_BIND(sqlite3_bind_blob64(stmt_, index, bytes.data() != nullptr ? bytes.data() : "",
                                       bytes.size(), SQLITE_TRANSIENT));
}
void Statement::BindNull(int index) { KILN_SQLITE_BIND(sqlite3_bind_null(stmt_, index)); }
void Statement::BindOptText(int index, const std::optional<std::string>& text) {
  if (text) {
    BindText(index, *text);
  } else {
    BindNull(index);
  }
}
void Statement::BindOptInt(int index, const std::optional<int64_t>& value) {
  if (value) {
    BindInt(index, *value);
  } else {
    BindNull(index);
  }
}

#undef KILN_SQLITE_BIND

Result<bool> Statement::Step() {
  if (bind_error_ != 0) return db_->LastError("bind " + what_, bind_error_);
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->LastError(what_, rc);
}

Status Statement::Run() {
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool row, Step());
    if (!row) return OkStatus();
  }
}

bool Statement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}
int64_t Statement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::Real(int column) const { return sqlite3_column_double(stmt_, column); }
std::string Statement::Text(int column) const {
  // column_blob before column_bytes, as the SQLite docs require, and no
  // conversion to text (which could rewrite invalid UTF-8).
  const void* data = sqlite3_column_blob(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (data == nullptr || size <= 0) return {};
  return std::string(static_cast<const char*>(data), static_cast<size_t>(size));
}
std::optional<std::string> Statement::OptText(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Text(column);
}
std::optional<int64_t> Statement::OptInt(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Int(column);
}

}  // namespace kiln::store
