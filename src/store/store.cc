#include "store/store.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>

#include "base/log.h"
#include "base/unique_fd.h"
#include "store/api_key.h"
#include "store/sqlite.h"
#include "store/time_format.h"

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
};
static_assert(std::size(kMigrations) == kSchemaVersion);

constexpr int64_t kLastUsedIntervalMs = 60'000;
constexpr int kPruneBatch = 500;
constexpr int kMaxQueryLimit = 1'000'000;

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

int64_t ToInt64(uint64_t v) {
  return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(v);
}

std::optional<uint64_t> OptU64(const Statement& s, int col) {
  if (s.IsNull(col)) return std::nullopt;
  const int64_t v = s.Int(col);
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}

std::optional<int> OptInt32(const Statement& s, int col) {
  if (s.IsNull(col)) return std::nullopt;
  return static_cast<int>(s.Int(col));
}

std::optional<double> OptReal(const Statement& s, int col) {
  if (s.IsNull(col)) return std::nullopt;
  return s.Real(col);
}

std::optional<bool> OptBool(const Statement& s, int col) {
  if (s.IsNull(col)) return std::nullopt;
  return s.Int(col) != 0;
}

KeyInfo ReadKey(const Statement& s, int admin_column) {
  // Columns: id, tenant, created_ms, revoked_ms, last_used_ms; admin at `admin_column`.
  return KeyInfo{s.Text(0),   s.Text(1),   s.Int(2),
                 s.OptInt(3), s.OptInt(4), s.Int(admin_column) != 0};
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

}  // namespace

std::string DefaultDataDirFor(bool root, std::string_view xdg_state_home, std::string_view home) {
  if (root) return "/var/lib/kiln";
  // The XDG spec says relative values are invalid and must be ignored.
  if (!xdg_state_home.empty() && xdg_state_home[0] == '/') {
    return std::string(xdg_state_home) + "/kiln";
  }
  return std::string(home.empty() ? "." : home) + "/.local/state/kiln";
}

std::string DefaultDataDir() {
  const char* xdg = std::getenv("XDG_STATE_HOME");
  const char* env_home = std::getenv("HOME");
  std::string home = env_home != nullptr ? env_home : "";
  if (home.empty() || home[0] != '/') {
    struct passwd pw, *found = nullptr;
    char buf[4096];
    if (::getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
      home = pw.pw_dir;
    }
  }
  return DefaultDataDirFor(::geteuid() == 0, xdg != nullptr ? xdg : "", home);
}

Store::Store(std::string path, std::unique_ptr<Db> db, OpenOptions options)
    : path_(std::move(path)), options_(std::move(options)), db_(std::move(db)) {}

Store::~Store() = default;

int64_t Store::Now() const { return options_.now_ms ? options_.now_ms() : NowMs(); }

Result<std::unique_ptr<Store>> Store::OpenDataDir(const std::string& data_dir, bool create) {
  OpenOptions options;
  options.create = create;
  return Open(data_dir.empty() ? DefaultDataDir() : data_dir, std::move(options));
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& data_dir, OpenOptions options) {
  const std::string path = data_dir + "/kiln.db";
  if (options.create) {
    KILN_TRY(MakeDirs(data_dir));
    // Created here, not by SQLite (0644 less umask), so the keys' hashes and
    // users' code are never readable by others; SQLite gives the -wal and
    // -shm files the database file's mode.
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return ErrnoError("open " + path);
  }
  auto opened = Db::Open(path, options.create);
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
                    ("PRAGMA busy_timeout = " + std::to_string(options.busy_timeout_ms)).c_str()));
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
  return std::unique_ptr<Store>(new Store(path, std::move(db), std::move(options)));
}

// --- Keys.

Result<NewKey> Store::CreateKey(std::string_view tenant, bool admin) {
  if (!IsValidTenant(tenant)) {
    return InvalidArgument("tenant '" + std::string(tenant.substr(0, 80)) +
                           "': use 1-64 characters of A-Z a-z 0-9 . _ -");
  }
  // 48-bit ids collide rarely; a collision is a retry with a fresh id, never
  // a second key sharing one.
  for (int attempt = 0;; ++attempt) {
    KILN_ASSIGN_OR_RETURN(const std::string id_bytes, RandomBytes(kKeyIdChars / 2));
    KILN_ASSIGN_OR_RETURN(std::string secret, RandomBytes(kSecretBytes));
    KILN_ASSIGN_OR_RETURN(const std::string digest, Sha256(secret));
    NewKey out;
    out.info.id = HexEncode(id_bytes);
    out.info.tenant = std::string(tenant);
    out.info.created_ms = Now();
    out.info.admin = admin;
    out.key = FormatApiKey(out.info.id, secret);
    Wipe(secret);

    std::lock_guard lock(mu_);
    KILN_ASSIGN_OR_RETURN(
        Statement insert,
        Statement::Prepare(*db_, "insert api key",
                           "INSERT INTO api_keys (id, tenant, secret_sha256, created_ms, admin) "
                           "VALUES (?, ?, ?, ?, ?)"));
    insert.BindText(1, out.info.id);
    insert.BindText(2, out.info.tenant);
    insert.BindBlob(3, digest);
    insert.BindInt(4, out.info.created_ms);
    insert.BindInt(5, admin ? 1 : 0);
    Status s = insert.Run();
    if (s.ok()) return out;
    Wipe(out.key);
    if (s.error().code != Code::kAlreadyExists || attempt >= 3) return std::move(s).error();
  }
}

Result<std::vector<KeyInfo>> Store::ListKeys() {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement q,
      Statement::Prepare(*db_, "list api keys",
                         "SELECT id, tenant, created_ms, revoked_ms, last_used_ms, admin "
                         "FROM api_keys ORDER BY created_ms, id"));
  std::vector<KeyInfo> keys;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    keys.push_back(ReadKey(q, 5));
  }
  return keys;
}

Status Store::RevokeKey(std::string_view id) {
  if (!IsValidKeyId(id)) {
    return InvalidArgument("key id '" + std::string(id.substr(0, 80)) +
                           "': expected 12 lowercase hex characters (see kiln keys list)");
  }
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement u, Statement::Prepare(*db_, "revoke api key",
                                      "UPDATE api_keys SET revoked_ms = COALESCE(revoked_ms, ?) "
                                      "WHERE id = ?"));
  u.BindInt(1, Now());
  u.BindText(2, id);
  KILN_TRY(u.Run());
  if (db_->Changes() == 0) {
    return MakeError(Code::kNotFound, "no key with id " + std::string(id));
  }
  return OkStatus();
}

Result<std::optional<KeyInfo>> Store::Authenticate(std::string_view presented) {
  auto parsed = ParseApiKey(presented);
  if (!parsed) return std::optional<KeyInfo>();
  auto digest = Sha256(parsed->secret);
  Wipe(parsed->secret);
  if (!digest.ok()) return std::move(digest).error();

  std::lock_guard lock(mu_);
  KeyInfo info;
  {
    // Scoped: the read must be finished before the UPDATE below, or the
    // UPDATE's autocommit would wait for this statement's finalization.
    KILN_ASSIGN_OR_RETURN(
        Statement q,
        Statement::Prepare(*db_, "look up api key",
                           "SELECT id, tenant, created_ms, revoked_ms, last_used_ms, admin, "
                           "secret_sha256 FROM api_keys WHERE id = ?"));
    q.BindText(1, parsed->id);
    KILN_ASSIGN_OR_RETURN(const bool found, q.Step());
    // An unknown id still costs one comparison, so timing says no more than
    // the (public) id does.
    const std::string stored = found ? q.Text(6) : std::string(kSha256Bytes, '\0');
    const bool match = ConstantTimeEquals(stored, *digest) && found;
    if (!match) return std::optional<KeyInfo>();
    info = ReadKey(q, 5);
  }
  if (info.revoked_ms) return std::optional<KeyInfo>();

  const int64_t now = Now();
  if (!info.last_used_ms || now - *info.last_used_ms >= kLastUsedIntervalMs) {
    // Bookkeeping, not a check: if it fails (the CLI holds the write lock past
    // the busy timeout) the key still authenticates.
    auto u = Statement::Prepare(*db_, "update api key last_used",
                                "UPDATE api_keys SET last_used_ms = ? WHERE id = ?");
    Status s = u.ok() ? Status() : Status(u.error());
    if (u.ok()) {
      u->BindInt(1, now);
      u->BindText(2, info.id);
      s = u->Run();
    }
    if (s.ok()) {
      info.last_used_ms = now;
    } else {
      KILN_LOG_WARN("api key {}: {}", info.id, s.error().ToString());
    }
  }
  return std::optional<KeyInfo>(std::move(info));
}

// --- Audit.

Status Store::BeginExecution(const AuditStart& start) {
  if (start.id.empty()) return InvalidArgument("audit: empty execution id");
  KILN_ASSIGN_OR_RETURN(const std::string sha, Sha256Hex(start.code));
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement insert,
      Statement::Prepare(*db_, "insert execution",
                         "INSERT INTO executions (id, tenant, key_id, profile, session_id, "
                         "client_addr, started_ms, status, code, code_sha256, code_size) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)"));
  insert.BindText(1, start.id);
  insert.BindText(2, start.tenant);
  insert.BindText(3, start.key_id);
  insert.BindText(4, start.profile);
  insert.BindOptText(5, start.session_id);
  insert.BindText(6, start.client_addr);
  insert.BindInt(7, start.started_ms);
  if (start.store_code) {
    insert.BindText(8, start.code);
  } else {
    insert.BindNull(8);
  }
  insert.BindText(9, sha);
  insert.BindInt(10, ToInt64(start.code.size()));
  return insert.Run();
}

Status Store::FinishExecution(const AuditFinish& f) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement u,
      Statement::Prepare(*db_, "finish execution",
                         "UPDATE executions SET ended_ms = ?, status = ?, exit_code = ?, "
                         "signal = ?, duration_ms = ?, cpu_ms = ?, peak_memory_bytes = ?, "
                         "stdout_bytes = ?, stderr_bytes = ?, stdout_truncated = ?, "
                         "stderr_truncated = ?, policy_violation = ?, reason = ? WHERE id = ?"));
  u.BindInt(1, f.ended_ms);
  u.BindText(2, f.status);
  u.BindOptInt(3, f.exit_code ? std::optional<int64_t>(*f.exit_code) : std::nullopt);
  u.BindOptInt(4, f.signal ? std::optional<int64_t>(*f.signal) : std::nullopt);
  u.BindReal(5, f.duration_ms);
  u.BindReal(6, f.cpu_ms);
  u.BindInt(7, ToInt64(f.peak_memory_bytes));
  u.BindInt(8, ToInt64(f.stdout_bytes));
  u.BindInt(9, ToInt64(f.stderr_bytes));
  u.BindInt(10, f.stdout_truncated ? 1 : 0);
  u.BindInt(11, f.stderr_truncated ? 1 : 0);
  u.BindOptText(12, f.policy_violation);
  u.BindText(13, f.reason);
  u.BindText(14, f.id);
  KILN_TRY(u.Run());
  if (db_->Changes() == 0) {
    return MakeError(Code::kNotFound, "audit: no execution with id " + f.id);
  }
  return OkStatus();
}

Result<int> Store::MarkInterrupted() {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement u,
                        Statement::Prepare(*db_, "mark interrupted executions",
                                           "UPDATE executions SET status = 'interrupted', "
                                           "ended_ms = ?, reason = 'the server stopped before the "
                                           "execution finished' WHERE status = 'running'"));
  u.BindInt(1, Now());
  KILN_TRY(u.Run());
  return static_cast<int>(db_->Changes());
}

Result<int> Store::Prune(int64_t older_than_ms) {
  int total = 0;
  for (;;) {
    std::lock_guard lock(mu_);
    KILN_ASSIGN_OR_RETURN(
        Statement d,
        Statement::Prepare(*db_, "prune executions",
                           "DELETE FROM executions WHERE rowid IN (SELECT rowid FROM executions "
                           "WHERE started_ms < ? AND status != 'running' LIMIT ?)"));
    d.BindInt(1, older_than_ms);
    d.BindInt(2, kPruneBatch);
    KILN_TRY(d.Run());
    const auto n = static_cast<int>(db_->Changes());
    total += n;
    if (n < kPruneBatch) break;
  }
  for (;;) {
    std::lock_guard lock(mu_);
    KILN_ASSIGN_OR_RETURN(
        Statement d, Statement::Prepare(*db_, "prune output hits",
                                        "DELETE FROM output_hits WHERE rowid IN (SELECT rowid FROM "
                                        "output_hits WHERE at_ms < ? LIMIT ?)"));
    d.BindInt(1, older_than_ms);
    d.BindInt(2, kPruneBatch);
    KILN_TRY(d.Run());
    const auto n = static_cast<int>(db_->Changes());
    total += n;
    if (n < kPruneBatch) break;
  }
  for (;;) {
    std::lock_guard lock(mu_);
    KILN_ASSIGN_OR_RETURN(
        Statement d, Statement::Prepare(*db_, "prune security events",
                                        "DELETE FROM security_events WHERE id IN (SELECT id FROM "
                                        "security_events WHERE at_ms < ? LIMIT ?)"));
    d.BindInt(1, older_than_ms);
    d.BindInt(2, kPruneBatch);
    KILN_TRY(d.Run());
    const auto n = static_cast<int>(db_->Changes());
    total += n;
    if (n < kPruneBatch) break;
  }
  if (total > 0) {
    std::lock_guard lock(mu_);
    KILN_TRY(db_->Exec("incremental_vacuum", "PRAGMA incremental_vacuum"));
  }
  return total;
}

Result<std::vector<AuditRow>> Store::Query(const AuditQuery& query) {
  if (query.limit < 1 || query.limit > kMaxQueryLimit) {
    return InvalidArgument("audit query: limit must be 1.." + std::to_string(kMaxQueryLimit));
  }
  std::string sql =
      "SELECT id, tenant, key_id, profile, session_id, client_addr, started_ms, ended_ms, "
      "status, code, code_sha256, code_size, exit_code, signal, duration_ms, cpu_ms, "
      "peak_memory_bytes, stdout_bytes, stderr_bytes, stdout_truncated, stderr_truncated, "
      "policy_violation, reason FROM executions WHERE 1";
  if (query.tenant) sql += " AND tenant = :tenant";
  if (query.session_id) sql += " AND session_id = :session";
  if (query.status) sql += " AND status = :status";
  if (query.since_ms) sql += " AND started_ms >= :since";
  sql += " ORDER BY started_ms DESC, id DESC LIMIT :limit";

  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement q, Statement::Prepare(*db_, "query executions", sql));
  int i = 0;
  if (query.tenant) q.BindText(++i, *query.tenant);
  if (query.session_id) q.BindText(++i, *query.session_id);
  if (query.status) q.BindText(++i, *query.status);
  if (query.since_ms) q.BindInt(++i, *query.since_ms);
  q.BindInt(++i, query.limit);
  std::vector<AuditRow> rows;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    AuditRow r;
    r.id = q.Text(0);
    r.tenant = q.Text(1);
    r.key_id = q.Text(2);
    r.profile = q.Text(3);
    r.session_id = q.OptText(4);
    r.client_addr = q.Text(5);
    r.started_ms = q.Int(6);
    r.ended_ms = q.OptInt(7);
    r.status = q.Text(8);
    r.code = q.OptText(9);
    r.code_sha256 = q.Text(10);
    r.code_size = OptU64(q, 11).value_or(0);
    r.exit_code = OptInt32(q, 12);
    r.signal = OptInt32(q, 13);
    r.duration_ms = OptReal(q, 14);
    r.cpu_ms = OptReal(q, 15);
    r.peak_memory_bytes = OptU64(q, 16);
    r.stdout_bytes = OptU64(q, 17);
    r.stderr_bytes = OptU64(q, 18);
    r.stdout_truncated = OptBool(q, 19);
    r.stderr_truncated = OptBool(q, 20);
    r.policy_violation = q.OptText(21);
    r.reason = q.OptText(22);
    rows.push_back(std::move(r));
  }
  return rows;
}

Status Store::RecordOutputHits(const std::vector<OutputHitRow>& hits) {
  if (hits.empty()) return OkStatus();
  std::lock_guard lock(mu_);
  KILN_TRY(db_->Exec("begin output hits", "BEGIN IMMEDIATE"));
  for (const auto& h : hits) {
    auto insert = Statement::Prepare(
        *db_, "insert output hit",
        "INSERT INTO output_hits (at_ms, execution_id, session_id, tenant, profile, detector, "
        "location, action, count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    Status st = insert.ok() ? OkStatus() : Status(insert.error());
    if (st.ok()) {
      insert->BindInt(1, h.at_ms);
      insert->BindOptText(2, h.execution_id);
      insert->BindOptText(3, h.session_id);
      insert->BindText(4, h.tenant);
      insert->BindText(5, h.profile);
      insert->BindText(6, h.detector);
      insert->BindText(7, h.location);
      insert->BindText(8, h.action);
      insert->BindInt(9, ToInt64(h.count));
      st = insert->Run();
    }
    if (!st.ok()) {
      (void)db_->Exec("rollback output hits", "ROLLBACK");
      return st;
    }
  }
  return db_->Exec("commit output hits", "COMMIT");
}

Result<std::vector<OutputHitRow>> Store::QueryOutputHits(const OutputHitQuery& query) {
  if (query.limit < 1 || query.limit > kMaxQueryLimit) {
    return InvalidArgument("output hits query: limit must be 1.." + std::to_string(kMaxQueryLimit));
  }
  std::string sql =
      "SELECT at_ms, execution_id, session_id, tenant, profile, detector, location, action, "
      "count FROM output_hits WHERE 1";
  if (query.execution_id) sql += " AND execution_id = :execution";
  if (query.tenant) sql += " AND tenant = :tenant";
  if (query.since_ms) sql += " AND at_ms >= :since";
  sql += " ORDER BY at_ms DESC, rowid DESC LIMIT :limit";
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement q, Statement::Prepare(*db_, "query output hits", sql));
  int i = 0;
  if (query.execution_id) q.BindText(++i, *query.execution_id);
  if (query.tenant) q.BindText(++i, *query.tenant);
  if (query.since_ms) q.BindInt(++i, *query.since_ms);
  q.BindInt(++i, query.limit);
  std::vector<OutputHitRow> rows;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    OutputHitRow r;
    r.at_ms = q.Int(0);
    r.execution_id = q.OptText(1);
    r.session_id = q.OptText(2);
    r.tenant = q.Text(3);
    r.profile = q.Text(4);
    r.detector = q.Text(5);
    r.location = q.Text(6);
    r.action = q.Text(7);
    r.count = static_cast<uint64_t>(std::max<int64_t>(0, q.Int(8)));
    rows.push_back(std::move(r));
  }
  return rows;
}

Result<int64_t> Store::RecordEvent(const EventRow& e) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement insert,
      Statement::Prepare(*db_, "insert security event",
                         "INSERT INTO security_events (at_ms, kind, tenant, key_id, execution_id, "
                         "session_id, client_addr, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  insert.BindInt(1, e.at_ms);
  insert.BindText(2, e.kind);
  insert.BindText(3, e.tenant);
  insert.BindText(4, e.key_id);
  insert.BindOptText(5, e.execution_id);
  insert.BindOptText(6, e.session_id);
  insert.BindText(7, e.client_addr);
  insert.BindText(8, e.detail);
  KILN_TRY(insert.Run());
  return db_->LastInsertRowId();
}

Result<std::vector<EventRow>> Store::QueryEvents(const EventQuery& query) {
  if (query.limit < 1 || query.limit > kMaxQueryLimit) {
    return InvalidArgument("events query: limit must be 1.." + std::to_string(kMaxQueryLimit));
  }
  std::string sql =
      "SELECT id, at_ms, kind, tenant, key_id, execution_id, session_id, client_addr, detail "
      "FROM security_events WHERE 1";
  if (query.tenant) sql += " AND tenant = :tenant";
  if (query.kind) sql += " AND kind = :kind";
  if (query.since_ms) sql += " AND at_ms >= :since";
  if (query.after_id) sql += " AND id > :after";
  sql += query.oldest_first ? " ORDER BY id ASC" : " ORDER BY id DESC";
  sql += " LIMIT :limit";
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement q, Statement::Prepare(*db_, "query security events", sql));
  int i = 0;
  if (query.tenant) q.BindText(++i, *query.tenant);
  if (query.kind) q.BindText(++i, *query.kind);
  if (query.since_ms) q.BindInt(++i, *query.since_ms);
  if (query.after_id) q.BindInt(++i, *query.after_id);
  q.BindInt(++i, query.limit);
  std::vector<EventRow> rows;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    EventRow r;
    r.id = q.Int(0);
    r.at_ms = q.Int(1);
    r.kind = q.Text(2);
    r.tenant = q.Text(3);
    r.key_id = q.Text(4);
    r.execution_id = q.OptText(5);
    r.session_id = q.OptText(6);
    r.client_addr = q.Text(7);
    r.detail = q.Text(8);
    rows.push_back(std::move(r));
  }
  return rows;
}

// --- Operator controls.

Status Store::SetQuarantine(const QuarantineRow& q) {
  if (!IsValidTenant(q.tenant)) return InvalidArgument("quarantine: invalid tenant name");
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement u,
                        Statement::Prepare(*db_, "quarantine tenant",
                                           "INSERT OR REPLACE INTO quarantines (tenant, since_ms, "
                                           "reason, by_whom) VALUES (?, ?, ?, ?)"));
  u.BindText(1, q.tenant);
  u.BindInt(2, q.since_ms);
  u.BindText(3, q.reason);
  u.BindText(4, q.by);
  return u.Run();
}

Result<bool> Store::ClearQuarantine(std::string_view tenant) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement d,
      Statement::Prepare(*db_, "release tenant", "DELETE FROM quarantines WHERE tenant = ?"));
  d.BindText(1, tenant);
  KILN_TRY(d.Run());
  return db_->Changes() > 0;
}

Result<std::vector<QuarantineRow>> Store::ListQuarantines() {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement q, Statement::Prepare(*db_, "list quarantines",
                                      "SELECT tenant, since_ms, reason, by_whom FROM quarantines "
                                      "ORDER BY tenant"));
  std::vector<QuarantineRow> out;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    out.push_back(QuarantineRow{q.Text(0), q.Int(1), q.Text(2), q.Text(3)});
  }
  return out;
}

Status Store::SetLockdown(const LockdownState& state) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement u,
                        Statement::Prepare(*db_, "set lockdown",
                                           "INSERT OR REPLACE INTO server_state (name, value, "
                                           "reason, since_ms, by_whom) VALUES ('lockdown', ?, ?, "
                                           "?, ?)"));
  u.BindText(1, state.on ? "on" : "off");
  u.BindText(2, state.reason);
  u.BindInt(3, state.since_ms);
  u.BindText(4, state.by);
  return u.Run();
}

Result<LockdownState> Store::GetLockdown() {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement q,
                        Statement::Prepare(*db_, "get lockdown",
                                           "SELECT value, reason, since_ms, by_whom FROM "
                                           "server_state WHERE name = 'lockdown'"));
  LockdownState state;
  KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
  if (row) {
    state.on = q.Text(0) == "on";
    state.reason = q.Text(1);
    state.since_ms = q.Int(2);
    state.by = q.Text(3);
  }
  return state;
}

Result<std::vector<TenantUsage>> Store::UsageSince(int64_t since_ms) {
  std::lock_guard lock(mu_);
  std::map<std::string, TenantUsage> by_tenant;
  {
    KILN_ASSIGN_OR_RETURN(
        Statement q,
        Statement::Prepare(*db_, "tenant usage",
                           "SELECT tenant, COUNT(*), SUM(status = 'rejected'), MAX(started_ms) "
                           "FROM executions WHERE started_ms >= ? GROUP BY tenant"));
    q.BindInt(1, since_ms);
    for (;;) {
      KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
      if (!row) break;
      TenantUsage& u = by_tenant[q.Text(0)];
      u.tenant = q.Text(0);
      u.executions = q.Int(1);
      u.rejected = q.Int(2);
      u.last_execution_ms = q.OptInt(3);
    }
  }
  {
    KILN_ASSIGN_OR_RETURN(Statement q,
                          Statement::Prepare(*db_, "tenant events",
                                             "SELECT tenant, COUNT(*) FROM security_events WHERE "
                                             "at_ms >= ? AND tenant != '' GROUP BY tenant"));
    q.BindInt(1, since_ms);
    for (;;) {
      KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
      if (!row) break;
      TenantUsage& u = by_tenant[q.Text(0)];
      u.tenant = q.Text(0);
      u.events = q.Int(1);
    }
  }
  std::vector<TenantUsage> out;
  for (auto& [name, u] : by_tenant) out.push_back(std::move(u));
  return out;
}

// --- The webhook queue.

Status Store::EnqueueWebhook(const WebhookDelivery& d) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement i,
                        Statement::Prepare(*db_, "enqueue webhook",
                                           "INSERT INTO webhook_queue (webhook, event_id, kind, "
                                           "body, created_ms, next_ms) VALUES (?, ?, ?, ?, ?, ?)"));
  i.BindText(1, d.webhook);
  i.BindInt(2, d.event_id);
  i.BindText(3, d.kind);
  i.BindText(4, d.body);
  i.BindInt(5, d.created_ms);
  i.BindInt(6, d.next_ms);
  return i.Run();
}

Result<std::vector<WebhookDelivery>> Store::DueWebhooks(int64_t now_ms, int limit) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(
      Statement q,
      Statement::Prepare(*db_, "due webhooks",
                         "SELECT id, webhook, event_id, kind, body, created_ms, attempts, next_ms, "
                         "last_error FROM webhook_queue WHERE next_ms <= ? ORDER BY id LIMIT ?"));
  q.BindInt(1, now_ms);
  q.BindInt(2, limit);
  std::vector<WebhookDelivery> out;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    WebhookDelivery d;
    d.id = q.Int(0);
    d.webhook = q.Text(1);
    d.event_id = q.Int(2);
    d.kind = q.Text(3);
    d.body = q.Text(4);
    d.created_ms = q.Int(5);
    d.attempts = static_cast<int>(q.Int(6));
    d.next_ms = q.Int(7);
    d.last_error = q.Text(8);
    out.push_back(std::move(d));
  }
  return out;
}

Status Store::WebhookDone(int64_t id) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement d, Statement::Prepare(*db_, "webhook done",
                                                        "DELETE FROM webhook_queue WHERE id = ?"));
  d.BindInt(1, id);
  return d.Run();
}

Status Store::WebhookRetry(int64_t id, int attempts, int64_t next_ms, const std::string& error) {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement u,
                        Statement::Prepare(*db_, "webhook retry",
                                           "UPDATE webhook_queue SET attempts = ?, next_ms = ?, "
                                           "last_error = ? WHERE id = ?"));
  u.BindInt(1, attempts);
  u.BindInt(2, next_ms);
  u.BindText(3, error.substr(0, 500));
  u.BindInt(4, id);
  return u.Run();
}

Result<int64_t> Store::WebhookQueued() {
  std::lock_guard lock(mu_);
  KILN_ASSIGN_OR_RETURN(Statement q, Statement::Prepare(*db_, "webhook queue size",
                                                        "SELECT COUNT(*) FROM webhook_queue"));
  KILN_ASSIGN_OR_RETURN(const bool row, q.Step());
  return row ? q.Int(0) : 0;
}

}  // namespace kiln::store
