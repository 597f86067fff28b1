// store::Conn on SQLite (sql.h): the embedded default, DATA_DIR/kiln.db in
// WAL mode, and its schema's migrations (append only).
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>
#include <utility>

#include "base/unique_fd.h"
#include "store/backends.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace kiln::store {
namespace {

// Version N of the schema is kMigrations[N-1], applied to version N-1 inside
// one transaction. Append only: a released migration never changes.
constexpr const char* kMigrations[] = {
    // 1: keys and the audit log.
    R"sql(
CREATE TABLE api_keys (
  id            TEXT PRIMARY KEY NOT NULL,  -- 12 hex chars, public
  tenant        TEXT NOT NULL,
  secret_sha256 BLOB NOT NULL,              -- sha256 of the 32 secret bytes
  created_ms    INTEGER NOT NULL,
  revoked_ms    INTEGER,
  last_used_ms  INTEGER
) STRICT;
CREATE TABLE executions (
  id                TEXT PRIMARY KEY NOT NULL,
  tenant            TEXT NOT NULL,
  key_id            TEXT NOT NULL,
  profile           TEXT NOT NULL,
  session_id        TEXT,
  client_addr       TEXT NOT NULL,
  started_ms        INTEGER NOT NULL,
  ended_ms          INTEGER,
  status            TEXT NOT NULL,           -- 'running' until finished
  code              TEXT,                    -- NULL when the config keeps only the hash
  code_sha256       TEXT NOT NULL,
  code_size         INTEGER NOT NULL,
  exit_code         INTEGER,
  signal            INTEGER,
  duration_ms       REAL,
  cpu_ms            REAL,
  peak_memory_bytes INTEGER,
  stdout_bytes      INTEGER,
  stderr_bytes      INTEGER,
  stdout_truncated  INTEGER,
  stderr_truncated  INTEGER,
  policy_violation  TEXT,
  reason            TEXT
) STRICT;
CREATE INDEX executions_started ON executions(started_ms);
CREATE INDEX executions_tenant ON executions(tenant, started_ms);
CREATE INDEX executions_session ON executions(session_id, started_ms);
CREATE INDEX executions_running ON executions(status) WHERE status = 'running';
)sql",
    // 2: the output audit's hits (docs/adr/0015): never the matched text.
    R"sql(
CREATE TABLE output_hits (
  at_ms        INTEGER NOT NULL,
  execution_id TEXT,                 -- NULL: a file downloaded from a session
  session_id   TEXT,
  tenant       TEXT NOT NULL,
  profile      TEXT NOT NULL,
  detector     TEXT NOT NULL,
  location     TEXT NOT NULL,
  action       TEXT NOT NULL,
  count        INTEGER NOT NULL
) STRICT;
CREATE INDEX output_hits_at ON output_hits(at_ms);
CREATE INDEX output_hits_execution ON output_hits(execution_id);
CREATE INDEX output_hits_tenant ON output_hits(tenant, at_ms);
)sql",
    // 3: security events (docs/adr/0015).
    R"sql(
CREATE TABLE security_events (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms        INTEGER NOT NULL,
  kind         TEXT NOT NULL,
  tenant       TEXT NOT NULL,
  key_id       TEXT NOT NULL,
  execution_id TEXT,
  session_id   TEXT,
  client_addr  TEXT NOT NULL,
  detail       TEXT NOT NULL
) STRICT;
CREATE INDEX security_events_at ON security_events(at_ms);
CREATE INDEX security_events_tenant ON security_events(tenant, at_ms);
CREATE INDEX security_events_kind ON security_events(kind, at_ms);
)sql",
    // 4: admin keys and the operator's controls (docs/adr/0015).
    R"sql(
ALTER TABLE api_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
CREATE TABLE quarantines (
  tenant   TEXT PRIMARY KEY NOT NULL,
  since_ms INTEGER NOT NULL,
  reason   TEXT NOT NULL,
  by_whom  TEXT NOT NULL
) STRICT;
CREATE TABLE server_state (
  name     TEXT PRIMARY KEY NOT NULL,  -- 'lockdown'
  value    TEXT NOT NULL,              -- 'on' | 'off'
  reason   TEXT NOT NULL,
  since_ms INTEGER NOT NULL,
  by_whom  TEXT NOT NULL
) STRICT;
)sql",
    // 5: the webhook queue (docs/adr/0015).
    R"sql(
CREATE TABLE webhook_queue (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  webhook    TEXT NOT NULL,
  event_id   INTEGER NOT NULL,
  kind       TEXT NOT NULL,
  body       TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  attempts   INTEGER NOT NULL DEFAULT 0,
  next_ms    INTEGER NOT NULL,
  last_error TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX webhook_queue_next ON webhook_queue(next_ms);
)sql",
    // 6: the node registry of a fleet (docs/adr/0020), and which node ran
    // each execution (NULL: a single node's).
    R"sql(
ALTER TABLE executions ADD COLUMN node TEXT;
CREATE INDEX executions_node_running ON executions(node) WHERE status = 'running';
CREATE TABLE nodes (
  id           TEXT PRIMARY KEY NOT NULL,
  address      TEXT NOT NULL,
  started_ms   INTEGER NOT NULL,
  heartbeat_ms INTEGER NOT NULL,
  draining     INTEGER NOT NULL DEFAULT 0,
  lost_ms      INTEGER
) STRICT;
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion);

// mkdir -p with mode 0700 for every directory it creates.
Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return InvalidArgument("data directory: empty path");
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoError("mkdir " + prefix);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoError("stat " + dir);
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(dir + " is not a directory");
  return OkStatus();
}

Status Migrate(Db& db) {
  // IMMEDIATE takes the write lock first, so two processes opening a new
  // directory at once cannot both see version 0 and both create tables.
  KILN_TRY(db.Exec("begin migration", "BEGIN IMMEDIATE"));
  auto rollback = [&db] { (void)db.Exec("rollback migration", "ROLLBACK"); };
  Status s = [&db]() -> Status {
    KILN_TRY(db.Exec("create schema_version",
                     "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
    int64_t version = 0;
    {
      KILN_ASSIGN_OR_RETURN(
          Statement get,
          Statement::Prepare(db, "read schema_version", "SELECT version FROM schema_version"));
      KILN_ASSIGN_OR_RETURN(const bool has_row, get.Step());
      if (has_row) version = get.Int(0);
    }
    if (version > kSchemaVersion) {
      return FailedPrecondition("database schema version " + std::to_string(version) +
                                " is newer than this kiln's (" + std::to_string(kSchemaVersion) +
                                "): use a newer kiln");
    }
    for (int64_t v = version; v < kSchemaVersion; ++v) {
      KILN_TRY(db.Exec("migration to schema version " + std::to_string(v + 1), kMigrations[v]));
    }
    if (version != kSchemaVersion) {
      KILN_TRY(db.Exec("clear schema_version", "DELETE FROM schema_version"));
      KILN_ASSIGN_OR_RETURN(Statement set,
                            Statement::Prepare(db, "write schema_version",
                                               "INSERT INTO schema_version (version) VALUES (?)"));
      set.BindInt(1, kSchemaVersion);
      KILN_TRY(set.Run());
    }
    return db.Exec("commit migration", "COMMIT");
  }();
  if (!s.ok()) rollback();
  return s;
}

class SqliteConn final : public Conn {
 public:
  explicit SqliteConn(std::unique_ptr<Db> db) : db_(std::move(db)) {}
  Dialect dialect() const override { return Dialect::kSqlite; }

  Result<Rows> Run(std::string_view what, const Sql& sql) override {
    KILN_ASSIGN_OR_RETURN(Statement st, Statement::Prepare(*db_, what, sql.text()));
    int index = 0;
    for (const Value& v : sql.params()) {
      ++index;
      switch (v.kind) {
        case Value::Kind::kNull: st.BindNull(index); break;
        case Value::Kind::kInt: st.BindInt(index, v.i); break;
        case Value::Kind::kReal: st.BindReal(index, v.r); break;
        case Value::Kind::kText: st.BindText(index, v.s); break;
        case Value::Kind::kBlob: st.BindBlob(index, v.s); break;
      }
    }
    Rows out;
    for (;;) {
      KILN_ASSIGN_OR_RETURN(const bool has_row, st.Step());
      if (!has_row) break;
      const int n = sqlite3_column_count(st.get());
      std::vector<Value> columns;
      columns.reserve(static_cast<size_t>(n));
      for (int c = 0; c < n; ++c) {
        switch (sqlite3_column_type(st.get(), c)) {
          case SQLITE_NULL: columns.push_back(Value::Null()); break;
          case SQLITE_INTEGER: columns.push_back(Value::Int(st.Int(c))); break;
          case SQLITE_FLOAT: columns.push_back(Value::Real(st.Real(c))); break;
          case SQLITE_BLOB: columns.push_back(Value::Blob(st.Text(c))); break;
          default: columns.push_back(Value::Text(st.Text(c))); break;
        }
      }
      out.rows.emplace_back(std::move(columns));
    }
    out.changes = db_->Changes();
    return out;
  }

  Status Exec(std::string_view what, std::string_view sql) override {
    return db_->Exec(what, std::string(sql).c_str());
  }

 private:
  std::unique_ptr<Db> db_;
};

}  // namespace

Result<std::unique_ptr<Conn>> OpenSqlite(const std::string& data_dir, bool create,
                                         int busy_timeout_ms) {
  const std::string path = data_dir + "/kiln.db";
  if (create) {
    KILN_TRY(MakeDirs(data_dir));
    // Created here, not by SQLite (0644 less umask), so the keys' hashes and
    // users' code are never readable by others; SQLite gives the -wal and
    // -shm files the database file's mode.
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return ErrnoError("open " + path);
  }
  auto opened = Db::Open(path, create);
  if (!opened.ok()) {
    Error e = std::move(opened).error();
    if (e.code == Code::kNotFound) {
      e.message = "no kiln database in " + data_dir + " (" + e.message + ")";
    }
    return e;
  }
  auto db = std::make_unique<Db>(std::move(*opened));
  // busy_timeout first: switching to WAL and migrating take locks another
  // process may hold.
  KILN_TRY(db->Exec("set busy_timeout",
                    ("PRAGMA busy_timeout = " + std::to_string(busy_timeout_ms)).c_str()));
  // Only takes effect on a new, empty database: lets Prune return freed pages.
  KILN_TRY(db->Exec("set auto_vacuum", "PRAGMA auto_vacuum = INCREMENTAL"));
  {
    KILN_ASSIGN_OR_RETURN(Statement wal,
                          Statement::Prepare(*db, "set journal_mode", "PRAGMA journal_mode = WAL"));
    KILN_ASSIGN_OR_RETURN(const bool row, wal.Step());
    if (!row || wal.Text(0) != "wal") {
      return FailedPrecondition("sqlite: " + path + ": cannot use WAL journal mode (got '" +
                                (row ? wal.Text(0) : std::string()) + "')");
    }
  }
  // NORMAL is durable against a killed process in WAL mode (see store.h);
  // secure_delete so pruned code does not linger in free pages.
  KILN_TRY(db->Exec("set synchronous", "PRAGMA synchronous = NORMAL"));
  KILN_TRY(db->Exec("set secure_delete", "PRAGMA secure_delete = FAST"));
  KILN_TRY(Migrate(*db));
  return std::unique_ptr<Conn>(new SqliteConn(std::move(db)));
}

}  // namespace kiln::store
