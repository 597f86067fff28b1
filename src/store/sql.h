// kiln::store's seam between the Store and a database (docs/adr/0020): one
// SQL connection interface, `Conn`, with two implementations, SQLite
// (sqlite.h, the embedded default) and PostgreSQL (postgres.h, a fleet's
// shared state). The Store writes each statement once, with `?` placeholders,
// through the `Sql` builder; a connection binds the values its own way
// (SQLite's `?`, PostgreSQL's `$n`) and hands back every row, already read,
// as `Rows`.
//
// The statements stay in the dialect both databases speak (ON CONFLICT ..
// DO UPDATE, RETURNING, CASE); where they cannot, the Store asks
// Conn::dialect().
//
// Not thread-safe: one Conn is used by one thread at a time (the Store's
// pool hands each call a connection of its own).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace kiln::store {

enum class Dialect { kSqlite, kPostgres };

// One bound parameter or one column of a row.
struct Value {
  enum class Kind { kNull, kInt, kReal, kText, kBlob };
  Kind kind = Kind::kNull;
  int64_t i = 0;
  double r = 0;
  std::string s;  // text, or the blob's bytes

  static Value Null() { return Value{}; }
  static Value Int(int64_t v) { return Value{Kind::kInt, v, 0, {}}; }
  static Value Real(double v) { return Value{Kind::kReal, 0, v, {}}; }
  static Value Text(std::string v) { return Value{Kind::kText, 0, 0, std::move(v)}; }
  static Value Blob(std::string v) { return Value{Kind::kBlob, 0, 0, std::move(v)}; }
};

// The values a statement binds, converted from the Store's types.
inline Value ToValue(int64_t v) { return Value::Int(v); }
inline Value ToValue(int v) { return Value::Int(v); }
inline Value ToValue(double v) { return Value::Real(v); }
inline Value ToValue(bool v) { return Value::Int(v ? 1 : 0); }
inline Value ToValue(std::string_view v) { return Value::Text(std::string(v)); }
inline Value ToValue(const std::string& v) { return Value::Text(v); }
inline Value ToValue(const char* v) { return Value::Text(v); }
inline Value ToValue(Value v) { return v; }
template <typename T>
Value ToValue(const std::optional<T>& v) {
  return v ? ToValue(*v) : Value::Null();
}

// A statement and its parameters, built in pieces: each `?` in a piece takes
// the next value. The query functions' shared shape is
//   Sql q("SELECT ... FROM t WHERE 1 = 1");
//   q.AndIf(filter.tenant, "tenant = ?");  // only when the filter is set
//   q.Add(" ORDER BY id DESC LIMIT ?", limit);
class Sql final {
 public:
  Sql() = default;
  template <typename... Args>
  explicit Sql(std::string_view text, Args&&... args) {
    Add(text, std::forward<Args>(args)...);
  }

  template <typename... Args>
  Sql& Add(std::string_view text, Args&&... args) {
    text_ += text;
    (params_.push_back(ToValue(std::forward<Args>(args))), ...);
    return *this;
  }
  // " AND <condition>" binding *value, when value is set.
  template <typename T>
  Sql& AndIf(const std::optional<T>& value, std::string_view condition) {
    if (value) {
      text_ += " AND ";
      Add(condition, *value);
    }
    return *this;
  }

  const std::string& text() const { return text_; }
  const std::vector<Value>& params() const { return params_; }

 private:
  std::string text_;
  std::vector<Value> params_;
};

// One result row. Reading a column of another type converts it (an integer
// column read as text is its decimal digits); reading past the end is NULL.
class Row final {
 public:
  explicit Row(std::vector<Value> columns) : columns_(std::move(columns)) {}
  bool IsNull(size_t i) const {
    return i >= columns_.size() || columns_[i].kind == Value::Kind::kNull;
  }
  int64_t Int(size_t i) const;
  double Real(size_t i) const;
  std::string Text(size_t i) const;  // also a blob's bytes, byte for byte
  std::optional<std::string> OptText(size_t i) const;
  std::optional<int64_t> OptInt(size_t i) const;
  std::optional<double> OptReal(size_t i) const;
  std::optional<uint64_t> OptU64(size_t i) const;  // negative values read as 0
  std::optional<int> OptInt32(size_t i) const;
  std::optional<bool> OptBool(size_t i) const;

 private:
  std::vector<Value> columns_;
};

struct Rows {
  std::vector<Row> rows;
  int64_t changes = 0;  // rows an INSERT/UPDATE/DELETE changed
};

class Conn {
 public:
  virtual ~Conn() = default;
  virtual Dialect dialect() const = 0;
  // Runs one statement to completion. `what` names it in every error
  // ("insert execution: ..."). Errors carry kiln codes: kAlreadyExists for a
  // unique key taken, kUnavailable for a lock or a lost connection,
  // kInvalidArgument for another constraint, kInternal otherwise.
  virtual Result<Rows> Run(std::string_view what, const Sql& sql) = 0;
  // Runs statements without parameters or rows (BEGIN, COMMIT, schema).
  virtual Status Exec(std::string_view what, std::string_view sql) = 0;
};

}  // namespace kiln::store
