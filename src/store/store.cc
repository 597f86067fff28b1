#include "store/store.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>

#include "base/log.h"
#include "store/api_key.h"
#include "store/backends.h"
#include "store/pool.h"
#include "store/time_format.h"

namespace kiln::store {
namespace {

constexpr int64_t kLastUsedIntervalMs = 60'000;
constexpr int kPruneBatch = 500;
constexpr int kMaxQueryLimit = 1'000'000;

int64_t ToInt64(uint64_t v) {
  return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(v);
}

KeyInfo ReadKey(const Row& r) {
  // Columns: id, tenant, created_ms, revoked_ms, last_used_ms, admin.
  return KeyInfo{r.Text(0), r.Text(1), r.Int(2), r.OptInt(3), r.OptInt(4), r.Int(5) != 0};
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

Store::Store(std::string path, Dialect dialect, std::vector<std::unique_ptr<Conn>> conns,
             OpenOptions options)
    : path_(std::move(path)),
      dialect_(dialect),
      options_(std::move(options)),
      pool_(std::make_unique<ConnPool>(std::move(conns))) {}

Store::~Store() = default;

int64_t Store::Now() const { return options_.now_ms ? options_.now_ms() : NowMs(); }

Result<Rows> Store::Run(std::string_view what, const Sql& sql) {
  auto c = pool_->Acquire();
  return c->Run(what, sql);
}

Result<std::unique_ptr<Store>> Store::OpenDataDir(const std::string& data_dir, bool create) {
  OpenOptions options;
  options.create = create;
  return Open(data_dir.empty() ? DefaultDataDir() : data_dir, std::move(options));
}

Result<std::unique_ptr<Store>> Store::OpenFor(const std::string& url, const std::string& data_dir,
                                              bool create) {
  if (url.empty()) return OpenDataDir(data_dir, create);
  return OpenUrl(url);
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& data_dir, OpenOptions options) {
  KILN_ASSIGN_OR_RETURN(auto conn, OpenSqlite(data_dir, options.create, options.busy_timeout_ms));
  std::vector<std::unique_ptr<Conn>> conns;
  conns.push_back(std::move(conn));
  return std::unique_ptr<Store>(
      new Store(data_dir + "/kiln.db", Dialect::kSqlite, std::move(conns), std::move(options)));
}

Result<std::unique_ptr<Store>> Store::OpenUrl(const std::string& url, OpenOptions options) {
  KILN_ASSIGN_OR_RETURN(auto conns, OpenPostgres(url, options.pool_size));
  return std::unique_ptr<Store>(
      new Store(RedactUrl(url), Dialect::kPostgres, std::move(conns), std::move(options)));
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

    auto inserted =
        Run("insert api key",
            Sql("INSERT INTO api_keys (id, tenant, secret_sha256, created_ms, admin) "
                "VALUES (?, ?, ?, ?, ?)",
                out.info.id, out.info.tenant, Value::Blob(digest), out.info.created_ms, admin));
    if (inserted.ok()) return out;
    Wipe(out.key);
    if (inserted.error().code != Code::kAlreadyExists || attempt >= 3) {
      return std::move(inserted).error();
    }
  }
}

Result<std::vector<KeyInfo>> Store::ListKeys() {
  KILN_ASSIGN_OR_RETURN(
      Rows q, Run("list api keys", Sql("SELECT id, tenant, created_ms, revoked_ms, last_used_ms, "
                                       "admin FROM api_keys ORDER BY created_ms, id")));
  std::vector<KeyInfo> keys;
  for (const Row& r : q.rows) keys.push_back(ReadKey(r));
  return keys;
}

Status Store::RevokeKey(std::string_view id) {
  if (!IsValidKeyId(id)) {
    return InvalidArgument("key id '" + std::string(id.substr(0, 80)) +
                           "': expected 12 lowercase hex characters (see kiln keys list)");
  }
  KILN_ASSIGN_OR_RETURN(
      Rows u,
      Run("revoke api key",
          Sql("UPDATE api_keys SET revoked_ms = COALESCE(revoked_ms, ?) WHERE id = ?", Now(), id)));
  {
    std::lock_guard<std::mutex> lock(key_cache_mu_);
    key_cache_.erase(std::string(id));
  }
  if (u.changes == 0) {
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

  const int64_t now = Now();
  if (options_.key_cache_ms > 0) {
    std::lock_guard<std::mutex> lock(key_cache_mu_);
    auto it = key_cache_.find(parsed->id);
    if (it != key_cache_.end()) {
      const CachedKey& k = it->second;
      const bool fresh = now - k.read_ms >= 0 && now - k.read_ms < options_.key_cache_ms;
      // last_used is bookkeeping of the database's: a stale one goes there.
      const bool used_recently =
          k.info.last_used_ms && now - *k.info.last_used_ms < kLastUsedIntervalMs;
      if (fresh && used_recently) {
        // The secret of a key never changes: a digest that differs from the
        // one read is a wrong secret, within the cache's time as after it.
        if (!ConstantTimeEquals(k.digest, *digest)) return std::optional<KeyInfo>();
        return std::optional<KeyInfo>(k.info);
      }
      key_cache_.erase(it);
    }
  }

  auto c = pool_->Acquire();
  KeyInfo info;
  std::string stored_digest;
  {
    KILN_ASSIGN_OR_RETURN(
        Rows q, c->Run("look up api key",
                       Sql("SELECT id, tenant, created_ms, revoked_ms, last_used_ms, admin, "
                           "secret_sha256 FROM api_keys WHERE id = ?",
                           parsed->id)));
    const bool found = !q.rows.empty();
    // An unknown id still costs one comparison, so timing says no more than
    // the (public) id does.
    const std::string stored = found ? q.rows[0].Text(6) : std::string(kSha256Bytes, '\0');
    const bool match = ConstantTimeEquals(stored, *digest) && found;
    if (!match) return std::optional<KeyInfo>();
    info = ReadKey(q.rows[0]);
    stored_digest = stored;
  }
  if (info.revoked_ms) return std::optional<KeyInfo>();

  if (!info.last_used_ms || now - *info.last_used_ms >= kLastUsedIntervalMs) {
    // Bookkeeping, not a check: if it fails (the CLI holds the write lock past
    // the busy timeout) the key still authenticates.
    auto u = c->Run("update api key last_used",
                    Sql("UPDATE api_keys SET last_used_ms = ? WHERE id = ?", now, info.id));
    if (u.ok()) {
      info.last_used_ms = now;
    } else {
      KILN_LOG_WARN("api key {}: {}", info.id, u.error().ToString());
    }
  }
  if (options_.key_cache_ms > 0) {
    std::lock_guard<std::mutex> lock(key_cache_mu_);
    if (key_cache_.size() >= kKeyCacheEntries) key_cache_.clear();
    key_cache_[info.id] = CachedKey{info, std::move(stored_digest), now};
  }
  return std::optional<KeyInfo>(std::move(info));
}

// --- Audit.

Status Store::BeginExecution(const AuditStart& start) {
  if (start.id.empty()) return InvalidArgument("audit: empty execution id");
  KILN_ASSIGN_OR_RETURN(const std::string sha, Sha256Hex(start.code));
  KILN_TRY(Run(
      "insert execution",
      Sql("INSERT INTO executions (id, tenant, key_id, profile, session_id, "
          "client_addr, started_ms, status, code, code_sha256, code_size, node) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
          start.id, start.tenant, start.key_id, start.profile, start.session_id, start.client_addr,
          start.started_ms, start.store_code ? Value::Text(start.code) : Value::Null(), sha,
          ToInt64(start.code.size()),
          options_.node_id.empty() ? Value::Null() : Value::Text(options_.node_id))));
  return OkStatus();
}

Status Store::FinishExecution(const AuditFinish& f) {
  KILN_ASSIGN_OR_RETURN(
      Rows u,
      Run("finish execution",
          Sql("UPDATE executions SET ended_ms = ?, status = ?, exit_code = ?, "
              "signal = ?, duration_ms = ?, cpu_ms = ?, peak_memory_bytes = ?, "
              "stdout_bytes = ?, stderr_bytes = ?, stdout_truncated = ?, "
              "stderr_truncated = ?, policy_violation = ?, reason = ? WHERE id = ?",
              f.ended_ms, f.status, f.exit_code, f.signal, f.duration_ms, f.cpu_ms,
              ToInt64(f.peak_memory_bytes), ToInt64(f.stdout_bytes), ToInt64(f.stderr_bytes),
              f.stdout_truncated, f.stderr_truncated, f.policy_violation, f.reason, f.id)));
  if (u.changes == 0) {
    return MakeError(Code::kNotFound, "audit: no execution with id " + f.id);
  }
  return OkStatus();
}

Result<int> Store::MarkInterrupted() {
  KILN_ASSIGN_OR_RETURN(Rows u, Run("mark interrupted executions",
                                    Sql("UPDATE executions SET status = 'interrupted', "
                                        "ended_ms = ?, reason = 'the server stopped before the "
                                        "execution finished' WHERE status = 'running'",
                                        Now())));
  return static_cast<int>(u.changes);
}

Result<int> Store::PruneTable(std::string_view what, std::string_view table, std::string_view key,
                              std::string_view where, int64_t older_than_ms) {
  // `key` names each row: SQLite's rowid, or the table's primary key.
  const std::string sql = "DELETE FROM " + std::string(table) + " WHERE " + std::string(key) +
                          " IN (SELECT " + std::string(key) + " FROM " + std::string(table) +
                          " WHERE " + std::string(where) + " LIMIT ?)";
  int total = 0;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(Rows d, Run(what, Sql(sql, older_than_ms, kPruneBatch)));
    const auto n = static_cast<int>(d.changes);
    total += n;
    if (n < kPruneBatch) break;
  }
  return total;
}

Result<int> Store::Prune(int64_t older_than_ms) {
  const bool sqlite = dialect_ == Dialect::kSqlite;
  int total = 0;
  KILN_ASSIGN_OR_RETURN(int executions,
                        PruneTable("prune executions", "executions", sqlite ? "rowid" : "id",
                                   "started_ms < ? AND status != 'running'", older_than_ms));
  KILN_ASSIGN_OR_RETURN(int hits, PruneTable("prune output hits", "output_hits",
                                             sqlite ? "rowid" : "id", "at_ms < ?", older_than_ms));
  KILN_ASSIGN_OR_RETURN(int events, PruneTable("prune security events", "security_events", "id",
                                               "at_ms < ?", older_than_ms));
  total = executions + hits + events;
  if (total > 0 && sqlite) {
    auto c = pool_->Acquire();
    KILN_TRY(c->Exec("incremental_vacuum", "PRAGMA incremental_vacuum"));
  }
  return total;
}

Result<std::vector<AuditRow>> Store::Query(const AuditQuery& query) {
  if (query.limit < 1 || query.limit > kMaxQueryLimit) {
    return InvalidArgument("audit query: limit must be 1.." + std::to_string(kMaxQueryLimit));
  }
  Sql sql(
      "SELECT id, tenant, key_id, profile, session_id, client_addr, started_ms, ended_ms, "
      "status, code, code_sha256, code_size, exit_code, signal, duration_ms, cpu_ms, "
      "peak_memory_bytes, stdout_bytes, stderr_bytes, stdout_truncated, stderr_truncated, "
      "policy_violation, reason, node FROM executions WHERE 1 = 1");
  sql.AndIf(query.tenant, "tenant = ?")
      .AndIf(query.session_id, "session_id = ?")
      .AndIf(query.status, "status = ?")
      .AndIf(query.since_ms, "started_ms >= ?")
      .Add(" ORDER BY started_ms DESC, id DESC LIMIT ?", query.limit);
  KILN_ASSIGN_OR_RETURN(Rows q, Run("query executions", sql));
  std::vector<AuditRow> rows;
  rows.reserve(q.rows.size());
  for (const Row& row : q.rows) {
    AuditRow r;
    r.id = row.Text(0);
    r.tenant = row.Text(1);
    r.key_id = row.Text(2);
    r.profile = row.Text(3);
    r.session_id = row.OptText(4);
    r.client_addr = row.Text(5);
    r.started_ms = row.Int(6);
    r.ended_ms = row.OptInt(7);
    r.status = row.Text(8);
    r.code = row.OptText(9);
    r.code_sha256 = row.Text(10);
    r.code_size = row.OptU64(11).value_or(0);
    r.exit_code = row.OptInt32(12);
    r.signal = row.OptInt32(13);
    r.duration_ms = row.OptReal(14);
    r.cpu_ms = row.OptReal(15);
    r.peak_memory_bytes = row.OptU64(16);
    r.stdout_bytes = row.OptU64(17);
    r.stderr_bytes = row.OptU64(18);
    r.stdout_truncated = row.OptBool(19);
    r.stderr_truncated = row.OptBool(20);
    r.policy_violation = row.OptText(21);
    r.reason = row.OptText(22);
    r.node = row.OptText(23);
    rows.push_back(std::move(r));
  }
  return rows;
}

Status Store::RecordOutputHits(const std::vector<OutputHitRow>& hits) {
  if (hits.empty()) return OkStatus();
  auto c = pool_->Acquire();
  KILN_TRY(
      c->Exec("begin output hits", dialect_ == Dialect::kSqlite ? "BEGIN IMMEDIATE" : "BEGIN"));
  for (const auto& h : hits) {
    auto inserted = c->Run(
        "insert output hit",
        Sql("INSERT INTO output_hits (at_ms, execution_id, session_id, tenant, profile, detector, "
            "location, action, count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            h.at_ms, h.execution_id, h.session_id, h.tenant, h.profile, h.detector, h.location,
            h.action, ToInt64(h.count)));
    if (!inserted.ok()) {
      (void)c->Exec("rollback output hits", "ROLLBACK");
      return std::move(inserted).error();
    }
  }
  return c->Exec("commit output hits", "COMMIT");
}

Result<std::vector<OutputHitRow>> Store::QueryOutputHits(const OutputHitQuery& query) {
  if (query.limit < 1 || query.limit > kMaxQueryLimit) {
    return InvalidArgument("output hits query: limit must be 1.." + std::to_string(kMaxQueryLimit));
  }
  Sql sql(
      "SELECT at_ms, execution_id, session_id, tenant, profile, detector, location, action, "
      "count FROM output_hits WHERE 1 = 1");
  sql.AndIf(query.execution_id, "execution_id = ?")
      .AndIf(query.tenant, "tenant = ?")
      .AndIf(query.since_ms, "at_ms >= ?")
      .Add(dialect_ == Dialect::kSqlite ? " ORDER BY at_ms DESC, rowid DESC LIMIT ?"
                                        : " ORDER BY at_ms DESC, id DESC LIMIT ?",
           query.limit);
  KILN_ASSIGN_OR_RETURN(Rows q, Run("query output hits", sql));
  std::vector<OutputHitRow> rows;
  rows.reserve(q.rows.size());
  for (const Row& row : q.rows) {
    OutputHitRow r;
    r.at_ms = row.Int(0);
    r.execution_id = row.OptText(1);
    r.session_id = row.OptText(2);
    r.tenant = row.Text(3);
    r.profile = row.Text(4);
    r.detector = row.Text(5);
    r.location = row.Text(6);
    r.action = row.Text(7);
    r.count = static_cast<uint64_t>(std::max<int64_t>(0, row.Int(8)));
    rows.push_back(std::move(r));
  }
  return rows;
}

Result<int64_t> Store::RecordEvent(const EventRow& e) {
  KILN_ASSIGN_OR_RETURN(
      Rows r, Run("insert security event",
                  Sql("INSERT INTO security_events (at_ms, kind, tenant, key_id, execution_id, "
                      "session_id, client_addr, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                      "RETURNING id",
                      e.at_ms, e.kind, e.tenant, e.key_id, e.execution_id, e.session_id,
                      e.client_addr, e.detail)));
  if (r.rows.empty()) return Internal("insert security event: no id returned");
  return r.rows[0].Int(0);
}

Result<std::vector<EventRow>> Store::QueryEvents(const EventQuery& query) {
  if (query.limit < 1 || query.limit > kMaxQueryLimit) {
    return InvalidArgument("events query: limit must be 1.." + std::to_string(kMaxQueryLimit));
  }
  Sql sql(
      "SELECT id, at_ms, kind, tenant, key_id, execution_id, session_id, client_addr, detail "
      "FROM security_events WHERE 1 = 1");
  sql.AndIf(query.tenant, "tenant = ?")
      .AndIf(query.kind, "kind = ?")
      .AndIf(query.since_ms, "at_ms >= ?")
      .AndIf(query.after_id, "id > ?")
      .Add(query.oldest_first ? " ORDER BY id ASC" : " ORDER BY id DESC")
      .Add(" LIMIT ?", query.limit);
  KILN_ASSIGN_OR_RETURN(Rows q, Run("query security events", sql));
  std::vector<EventRow> rows;
  rows.reserve(q.rows.size());
  for (const Row& row : q.rows) {
    EventRow r;
    r.id = row.Int(0);
    r.at_ms = row.Int(1);
    r.kind = row.Text(2);
    r.tenant = row.Text(3);
    r.key_id = row.Text(4);
    r.execution_id = row.OptText(5);
    r.session_id = row.OptText(6);
    r.client_addr = row.Text(7);
    r.detail = row.Text(8);
    rows.push_back(std::move(r));
  }
  return rows;
}

// --- Operator controls.

Status Store::SetQuarantine(const QuarantineRow& q) {
  if (!IsValidTenant(q.tenant)) return InvalidArgument("quarantine: invalid tenant name");
  KILN_TRY(
      Run("quarantine tenant",
          Sql("INSERT INTO quarantines (tenant, since_ms, reason, by_whom) VALUES (?, ?, ?, ?) "
              "ON CONFLICT (tenant) DO UPDATE SET since_ms = excluded.since_ms, "
              "reason = excluded.reason, by_whom = excluded.by_whom",
              q.tenant, q.since_ms, q.reason, q.by)));
  return OkStatus();
}

Result<bool> Store::ClearQuarantine(std::string_view tenant) {
  KILN_ASSIGN_OR_RETURN(
      Rows d, Run("release tenant", Sql("DELETE FROM quarantines WHERE tenant = ?", tenant)));
  return d.changes > 0;
}

Result<std::vector<QuarantineRow>> Store::ListQuarantines() {
  KILN_ASSIGN_OR_RETURN(Rows q, Run("list quarantines",
                                    Sql("SELECT tenant, since_ms, reason, by_whom FROM quarantines "
                                        "ORDER BY tenant")));
  std::vector<QuarantineRow> out;
  for (const Row& r : q.rows) {
    out.push_back(QuarantineRow{r.Text(0), r.Int(1), r.Text(2), r.Text(3)});
  }
  return out;
}

Status Store::SetLockdown(const LockdownState& state) {
  KILN_TRY(
      Run("set lockdown", Sql("INSERT INTO server_state (name, value, reason, since_ms, by_whom) "
                              "VALUES ('lockdown', ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                              "value = excluded.value, reason = excluded.reason, "
                              "since_ms = excluded.since_ms, by_whom = excluded.by_whom",
                              state.on ? "on" : "off", state.reason, state.since_ms, state.by)));
  return OkStatus();
}

Result<LockdownState> Store::GetLockdown() {
  KILN_ASSIGN_OR_RETURN(Rows q,
                        Run("get lockdown", Sql("SELECT value, reason, since_ms, by_whom FROM "
                                                "server_state WHERE name = 'lockdown'")));
  LockdownState state;
  if (!q.rows.empty()) {
    const Row& r = q.rows[0];
    state.on = r.Text(0) == "on";
    state.reason = r.Text(1);
    state.since_ms = r.Int(2);
    state.by = r.Text(3);
  }
  return state;
}

Result<std::vector<TenantUsage>> Store::UsageSince(int64_t since_ms) {
  auto c = pool_->Acquire();
  std::map<std::string, TenantUsage> by_tenant;
  KILN_ASSIGN_OR_RETURN(
      Rows executions,
      c->Run("tenant usage",
             Sql("SELECT tenant, COUNT(*), SUM(CASE WHEN status = 'rejected' THEN 1 ELSE 0 END), "
                 "MAX(started_ms) FROM executions WHERE started_ms >= ? GROUP BY tenant",
                 since_ms)));
  for (const Row& r : executions.rows) {
    TenantUsage& u = by_tenant[r.Text(0)];
    u.tenant = r.Text(0);
    u.executions = r.Int(1);
    u.rejected = r.Int(2);
    u.last_execution_ms = r.OptInt(3);
  }
  KILN_ASSIGN_OR_RETURN(
      Rows events, c->Run("tenant events", Sql("SELECT tenant, COUNT(*) FROM security_events WHERE "
                                               "at_ms >= ? AND tenant != '' GROUP BY tenant",
                                               since_ms)));
  for (const Row& r : events.rows) {
    TenantUsage& u = by_tenant[r.Text(0)];
    u.tenant = r.Text(0);
    u.events = r.Int(1);
  }
  std::vector<TenantUsage> out;
  for (auto& [name, u] : by_tenant) out.push_back(std::move(u));
  return out;
}

// --- The node registry.

Status Store::Heartbeat(const NodeRow& n) {
  const int64_t now = Now();
  KILN_TRY(Run("node heartbeat",
               Sql("INSERT INTO nodes (id, address, started_ms, heartbeat_ms, draining, lost_ms) "
                   "VALUES (?, ?, ?, ?, ?, NULL) ON CONFLICT (id) DO UPDATE SET "
                   "address = excluded.address, heartbeat_ms = excluded.heartbeat_ms, "
                   "draining = excluded.draining, lost_ms = NULL",
                   n.id, n.address, n.started_ms != 0 ? n.started_ms : now, now, n.draining)));
  return OkStatus();
}

Result<std::vector<NodeRow>> Store::ListNodes() {
  KILN_ASSIGN_OR_RETURN(Rows q, Run("list nodes", Sql("SELECT id, address, started_ms, "
                                                      "heartbeat_ms, draining, lost_ms FROM nodes "
                                                      "ORDER BY id")));
  std::vector<NodeRow> out;
  for (const Row& r : q.rows) {
    out.push_back(NodeRow{r.Text(0), r.Text(1), r.Int(2), r.Int(3), r.Int(4) != 0, r.OptInt(5)});
  }
  return out;
}

Status Store::RemoveNode(std::string_view id) {
  KILN_TRY(Run("remove node", Sql("DELETE FROM nodes WHERE id = ?", id)));
  return OkStatus();
}

Result<int> Store::MarkNodeInterrupted(std::string_view node, std::string_view reason) {
  KILN_ASSIGN_OR_RETURN(Rows u, Run("mark node's executions interrupted",
                                    Sql("UPDATE executions SET status = 'interrupted', "
                                        "ended_ms = ?, reason = ? WHERE status = 'running' AND "
                                        "node = ?",
                                        Now(), reason, node)));
  return static_cast<int>(u.changes);
}

Result<std::vector<std::string>> Store::ReapLostNodes(int64_t timeout_ms) {
  const int64_t now = Now();
  KILN_ASSIGN_OR_RETURN(
      Rows claimed,
      Run("claim lost nodes", Sql("UPDATE nodes SET lost_ms = ? WHERE heartbeat_ms < ? AND "
                                  "lost_ms IS NULL RETURNING id",
                                  now, now - timeout_ms)));
  std::vector<std::string> ids;
  for (const Row& r : claimed.rows) {
    ids.push_back(r.Text(0));
    KILN_TRY(MarkNodeInterrupted(ids.back(), "node " + ids.back() +
                                                 " was lost (its heartbeat expired) before the "
                                                 "execution finished"));
  }
  return ids;
}

// --- The webhook queue.

Status Store::EnqueueWebhook(const WebhookDelivery& d) {
  KILN_TRY(Run("enqueue webhook",
               Sql("INSERT INTO webhook_queue (webhook, event_id, kind, body, created_ms, next_ms) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   d.webhook, d.event_id, d.kind, d.body, d.created_ms, d.next_ms)));
  return OkStatus();
}

Result<std::vector<WebhookDelivery>> Store::DueWebhooks(int64_t now_ms, int limit) {
  KILN_ASSIGN_OR_RETURN(
      Rows q, Run("due webhooks",
                  Sql("SELECT id, webhook, event_id, kind, body, created_ms, attempts, next_ms, "
                      "last_error FROM webhook_queue WHERE next_ms <= ? ORDER BY id LIMIT ?",
                      now_ms, limit)));
  std::vector<WebhookDelivery> out;
  for (const Row& r : q.rows) {
    WebhookDelivery d;
    d.id = r.Int(0);
    d.webhook = r.Text(1);
    d.event_id = r.Int(2);
    d.kind = r.Text(3);
    d.body = r.Text(4);
    d.created_ms = r.Int(5);
    d.attempts = static_cast<int>(r.Int(6));
    d.next_ms = r.Int(7);
    d.last_error = r.Text(8);
    out.push_back(std::move(d));
  }
  return out;
}

Status Store::WebhookDone(int64_t id) {
  KILN_TRY(Run("webhook done", Sql("DELETE FROM webhook_queue WHERE id = ?", id)));
  return OkStatus();
}

Status Store::WebhookRetry(int64_t id, int attempts, int64_t next_ms, const std::string& error) {
  KILN_TRY(Run("webhook retry", Sql("UPDATE webhook_queue SET attempts = ?, next_ms = ?, "
                                    "last_error = ? WHERE id = ?",
                                    attempts, next_ms, error.substr(0, 500), id)));
  return OkStatus();
}

Result<int64_t> Store::WebhookQueued() {
  KILN_ASSIGN_OR_RETURN(Rows q,
                        Run("webhook queue size", Sql("SELECT COUNT(*) FROM webhook_queue")));
  return q.rows.empty() ? 0 : q.rows[0].Int(0);
}

}  // namespace kiln::store
