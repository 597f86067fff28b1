// A thin RAII adapter over the SQLite3 C API for kiln::store. It is the only
// code in kiln that includes sqlite3.h; every SQLite failure leaves it as a
// kiln::Error naming the statement ("insert execution: UNIQUE constraint
// failed: executions.id (SQLITE_CONSTRAINT_PRIMARYKEY)").
//
// Not thread-safe: Store serialises all use of one Db behind its mutex.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::store {

class Db final {
 public:
  Db() = default;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  Db(Db&& other) noexcept;
  Db& operator=(Db&& other) noexcept;
  ~Db();

  // Opens (and with `create`, creates) the database at `path` with extended
  // result codes and no SQLite-internal mutex (the caller serialises).
  // kNotFound when !create and the file is missing.
  static Result<Db> Open(const std::string& path, bool create);

  // Runs one or more statements with no parameters and no result rows.
  // `what` names them in errors.
  Status Exec(std::string_view what, const char* sql);
  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  int64_t LastInsertRowId() const;  // of this connection's last INSERT
  sqlite3* get() const { return db_; }

  // The error for the last failure on this connection, for `what`.
  Error LastError(std::string_view what, int rc) const;

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

// One prepared statement. Bind indexes are 1-based, column indexes 0-based,
// as in the C API.
class Statement final {
 public:
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // `what` names the statement in every error it returns.
  static Result<Statement> Prepare(Db& db, std::string_view what, std::string_view sql);

  // Binding never fails for in-range indexes of a prepared statement except
  // on out-of-memory; those failures surface from Step().
  void BindInt(int index, int64_t value);
  void BindReal(int index, double value);
  void BindText(int index, std::string_view text);  // copied (SQLITE_TRANSIENT)
  void BindBlob(int index, std::string_view bytes);
  void BindNull(int index);
  void BindOptText(int index, const std::optional<std::string>& text);
  void BindOptInt(int index, const std::optional<int64_t>& value);

  // true: a row is ready; false: the statement is done.
  Result<bool> Step();
  // Steps to completion, ignoring rows.
  Status Run();

  bool IsNull(int column) const;
  int64_t Int(int column) const;
  double Real(int column) const;
  std::string Text(int column) const;  // also reads blobs, byte for byte
  std::optional<std::string> OptText(int column) const;
  std::optional<int64_t> OptInt(int column) const;
  sqlite3_stmt* get() const { return stmt_; }

 private:
  Statement(Db& db, sqlite3_stmt* stmt, std::string what)
      : db_(&db), stmt_(stmt), what_(std::move(what)) {}
  Db* db_;
  sqlite3_stmt* stmt_;
  std::string what_;
  int bind_error_ = 0;  // first failed bind's result code
};

}  // namespace kiln::store
