// store::Conn on PostgreSQL (sql.h, docs/adr/0020): a fleet's shared state.
//
// libpq (Debian's libpq5) is loaded with dlopen on the first PostgreSQL
// open, never linked: every `kiln run` binds each linked library at start
// (-z now, bench/README.md), and a single-node kiln never needs this one.
// libpq-fe.h supplies the types and the functions' signatures only.
#include <dlfcn.h>
#include <libpq-fe.h>

#include <charconv>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "store/backends.h"
#include "store/store.h"

namespace kiln::store {
namespace {

// Version N of the PostgreSQL schema is kPgMigrations[N-1], applied to
// version N-1 in one transaction. Append only, like SQLite's. Version 1 is
// SQLite's version 5 in PostgreSQL's types; text that is sorted or compared
// for equality uses the "C" collation, so the order is SQLite's (bytes).
constexpr const char* kPgMigrations[] = {
    // 1: keys, the audit log, output hits, security events, operator
    // controls, the webhook queue.
    R"sql(
CREATE TABLE api_keys (
  id            TEXT COLLATE "C" PRIMARY KEY,
  tenant        TEXT COLLATE "C" NOT NULL,
  secret_sha256 BYTEA NOT NULL,
  created_ms    BIGINT NOT NULL,
  revoked_ms    BIGINT,
  last_used_ms  BIGINT,
  admin         BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE executions (
  id                TEXT COLLATE "C" PRIMARY KEY,
  tenant            TEXT COLLATE "C" NOT NULL,
  key_id            TEXT NOT NULL,
  profile           TEXT NOT NULL,
  session_id        TEXT COLLATE "C",
  client_addr       TEXT NOT NULL,
  started_ms        BIGINT NOT NULL,
  ended_ms          BIGINT,
  status            TEXT COLLATE "C" NOT NULL,
  code              TEXT,
  code_sha256       TEXT NOT NULL,
  code_size         BIGINT NOT NULL,
  exit_code         BIGINT,
  signal            BIGINT,
  duration_ms       DOUBLE PRECISION,
  cpu_ms            DOUBLE PRECISION,
  peak_memory_bytes BIGINT,
  stdout_bytes      BIGINT,
  stderr_bytes      BIGINT,
  stdout_truncated  BIGINT,
  stderr_truncated  BIGINT,
  policy_violation  TEXT,
  reason            TEXT
);
CREATE INDEX executions_started ON executions(started_ms);
CREATE INDEX executions_tenant ON executions(tenant, started_ms);
CREATE INDEX executions_session ON executions(session_id, started_ms);
CREATE INDEX executions_running ON executions(status) WHERE status = 'running';
CREATE TABLE output_hits (
  id           BIGSERIAL PRIMARY KEY,
  at_ms        BIGINT NOT NULL,
  execution_id TEXT COLLATE "C",
  session_id   TEXT,
  tenant       TEXT COLLATE "C" NOT NULL,
  profile      TEXT NOT NULL,
  detector     TEXT NOT NULL,
  location     TEXT NOT NULL,
  action       TEXT NOT NULL,
  count        BIGINT NOT NULL
);
CREATE INDEX output_hits_at ON output_hits(at_ms);
CREATE INDEX output_hits_execution ON output_hits(execution_id);
CREATE INDEX output_hits_tenant ON output_hits(tenant, at_ms);
CREATE TABLE security_events (
  id           BIGSERIAL PRIMARY KEY,
  at_ms        BIGINT NOT NULL,
  kind         TEXT COLLATE "C" NOT NULL,
  tenant       TEXT COLLATE "C" NOT NULL,
  key_id       TEXT NOT NULL,
  execution_id TEXT,
  session_id   TEXT,
  client_addr  TEXT NOT NULL,
  detail       TEXT NOT NULL
);
CREATE INDEX security_events_at ON security_events(at_ms);
CREATE INDEX security_events_tenant ON security_events(tenant, at_ms);
CREATE INDEX security_events_kind ON security_events(kind, at_ms);
CREATE TABLE quarantines (
  tenant   TEXT COLLATE "C" PRIMARY KEY,
  since_ms BIGINT NOT NULL,
  reason   TEXT NOT NULL,
  by_whom  TEXT NOT NULL
);
CREATE TABLE server_state (
  name     TEXT COLLATE "C" PRIMARY KEY,
  value    TEXT NOT NULL,
  reason   TEXT NOT NULL,
  since_ms BIGINT NOT NULL,
  by_whom  TEXT NOT NULL
);
CREATE TABLE webhook_queue (
  id         BIGSERIAL PRIMARY KEY,
  webhook    TEXT NOT NULL,
  event_id   BIGINT NOT NULL,
  kind       TEXT NOT NULL,
  body       TEXT NOT NULL,
  created_ms BIGINT NOT NULL,
  attempts   BIGINT NOT NULL DEFAULT 0,
  next_ms    BIGINT NOT NULL,
  last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX webhook_queue_next ON webhook_queue(next_ms);
)sql",
    // 2: the node registry (SQLite's version 6).
    R"sql(
ALTER TABLE executions ADD COLUMN node TEXT COLLATE "C";
CREATE INDEX executions_node_running ON executions(node) WHERE status = 'running';
CREATE TABLE nodes (
  id           TEXT COLLATE "C" PRIMARY KEY,
  address      TEXT NOT NULL,
  started_ms   BIGINT NOT NULL,
  heartbeat_ms BIGINT NOT NULL,
  draining     BIGINT NOT NULL DEFAULT 0,
  lost_ms      BIGINT
);
)sql",
};
static_assert(std::size(kPgMigrations) == kPostgresSchemaVersion);

// Any constant: the key of the advisory lock migrations hold ("kiln").
constexpr int64_t kMigrationLock = 0x6b696c6e;

// PostgreSQL's type oids (pg_type.dat) this code reads or binds.
constexpr Oid kBoolOid = 16, kByteaOid = 17, kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23,
              kTextOid = 25, kFloat4Oid = 700, kFloat8Oid = 701, kNumericOid = 1700;

// The libpq functions kiln uses, resolved from libpq.so.5.
struct Pq {
  decltype(&::PQconnectdbParams) connectdb_params;
  decltype(&::PQstatus) status;
  decltype(&::PQerrorMessage) error_message;
  decltype(&::PQfinish) finish;
  decltype(&::PQreset) reset;
  decltype(&::PQexec) exec;
  decltype(&::PQexecParams) exec_params;
  decltype(&::PQprepare) prepare;
  decltype(&::PQexecPrepared) exec_prepared;
  decltype(&::PQresultStatus) result_status;
  decltype(&::PQresultErrorField) result_error_field;
  decltype(&::PQresultErrorMessage) result_error_message;
  decltype(&::PQclear) clear;
  decltype(&::PQntuples) ntuples;
  decltype(&::PQnfields) nfields;
  decltype(&::PQgetisnull) getisnull;
  decltype(&::PQgetvalue) getvalue;
  decltype(&::PQgetlength) getlength;
  decltype(&::PQftype) ftype;
  decltype(&::PQcmdTuples) cmd_tuples;
  decltype(&::PQunescapeBytea) unescape_bytea;
  decltype(&::PQfreemem) freemem;
  decltype(&::PQsetNoticeProcessor) set_notice_processor;
};

Result<const Pq*> LoadPq() {
  static std::once_flag once;
  static Pq pq;
  static std::string error;
  std::call_once(once, [] {
    void* lib = ::dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      error = std::string("cannot load libpq (install Debian's libpq5): ") +
              (e != nullptr ? e : "dlopen failed");
      return;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      void* p = ::dlsym(lib, name);
      if (p == nullptr) {
        ok = false;
        error = std::string("libpq has no ") + name;
      }
      // POSIX guarantees a data pointer from dlsym holds a function's address.
      static_assert(sizeof fn == sizeof p);
      std::memcpy(&fn, &p, sizeof p);
    };
    sym(pq.connectdb_params, "PQconnectdbParams");
    sym(pq.status, "PQstatus");
    sym(pq.error_message, "PQerrorMessage");
    sym(pq.finish, "PQfinish");
    sym(pq.reset, "PQreset");
    sym(pq.exec, "PQexec");
    sym(pq.exec_params, "PQexecParams");
    sym(pq.prepare, "PQprepare");
    sym(pq.exec_prepared, "PQexecPrepared");
    sym(pq.result_status, "PQresultStatus");
    sym(pq.result_error_field, "PQresultErrorField");
    sym(pq.result_error_message, "PQresultErrorMessage");
    sym(pq.clear, "PQclear");
    sym(pq.ntuples, "PQntuples");
    sym(pq.nfields, "PQnfields");
    sym(pq.getisnull, "PQgetisnull");
    sym(pq.getvalue, "PQgetvalue");
    sym(pq.getlength, "PQgetlength");
    sym(pq.ftype, "PQftype");
    sym(pq.cmd_tuples, "PQcmdTuples");
    sym(pq.unescape_bytea, "PQunescapeBytea");
    sym(pq.freemem, "PQfreemem");
    sym(pq.set_notice_processor, "PQsetNoticeProcessor");
    if (ok) error.clear();
  });
  if (!error.empty()) return FailedPrecondition("postgresql: " + error);
  return &pq;
}

// SQLSTATE classes (PostgreSQL's errcodes appendix) as kiln codes.
Code CodeForSqlState(std::string_view state) {
  if (state == "23505") return Code::kAlreadyExists;              // unique_violation
  if (state.substr(0, 2) == "23") return Code::kInvalidArgument;  // other integrity
  if (state.substr(0, 2) == "22") return Code::kInvalidArgument;  // data exception
  if (state.substr(0, 2) == "08") return Code::kUnavailable;      // connection
  if (state == "40001" || state == "40P01" || state == "55P03") return Code::kUnavailable;
  if (state.substr(0, 2) == "57") return Code::kUnavailable;  // operator intervention (shutdown)
  if (state.substr(0, 2) == "53") return Code::kResourceExhausted;
  if (state == "42501" || state.substr(0, 2) == "28") return Code::kPermissionDenied;
  return Code::kInternal;
}

std::string Trimmed(const char* s) {
  std::string out = s != nullptr ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// `?` -> `$1`, `$2`, ... outside quoted literals and identifiers.
std::string NumberPlaceholders(const std::string& sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  int n = 0;
  char quote = 0;
  for (char c : sql) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      out += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      out += c;
    } else if (c == '?') {
      out += '$' + std::to_string(++n);
    } else {
      out += c;
    }
  }
  return out;
}

void IgnoreNotice(void*, const char*) {}

class PgConn final : public Conn {
 public:
  PgConn(const Pq* pq, PGconn* conn) : pq_(pq), conn_(conn) {
    pq_->set_notice_processor(conn_, IgnoreNotice, nullptr);
  }
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;
  ~PgConn() override { pq_->finish(conn_); }

  Dialect dialect() const override { return Dialect::kPostgres; }

  Result<Rows> Run(std::string_view what, const Sql& sql) override {
    KILN_TRY(Reconnect(what));
    const std::string text = NumberPlaceholders(sql.text());
    const auto& params = sql.params();
    std::vector<std::string> storage(params.size());
    std::vector<const char*> values(params.size());
    std::vector<int> lengths(params.size()), formats(params.size());
    std::vector<Oid> types(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const Value& v = params[i];
      switch (v.kind) {
        case Value::Kind::kNull: values[i] = nullptr; break;
        case Value::Kind::kInt:
          storage[i] = std::to_string(v.i);
          types[i] = kInt8Oid;
          break;
        case Value::Kind::kReal: {
          char buf[64];
          auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v.r);
          storage[i] = ec == std::errc() ? std::string(buf, end) : "0";
          types[i] = kFloat8Oid;
          break;
        }
        case Value::Kind::kText:
          storage[i] = v.s;
          types[i] = kTextOid;
          break;
        case Value::Kind::kBlob:
          storage[i] = v.s;
          types[i] = kByteaOid;
          formats[i] = 1;  // binary: the bytes as they are
          break;
      }
      if (v.kind != Value::Kind::kNull) {
        values[i] = storage[i].c_str();
        lengths[i] = static_cast<int>(storage[i].size());
      }
    }
    // Each statement (its text and parameter types) is prepared once per
    // connection and then only executed: the server parses and plans it once
    // (bench/fleet_bench.py measured the parse of every statement as most of
    // the PostgreSQL store's cost per execution). Past kMaxPrepared distinct
    // statements the rest are sent whole, as before.
    const int n = static_cast<int>(params.size());
    std::string key = text;
    key += '\0';
    for (Oid t : types) key += std::to_string(t) + ",";
    auto stmt = prepared_.find(key);
    if (stmt == prepared_.end() && prepared_.size() < kMaxPrepared) {
      const std::string name = "kiln_s" + std::to_string(++statements_);
      PGresult* made = pq_->prepare(conn_, name.c_str(), text.c_str(), n, types.data());
      Result<Rows> ok = Collect(what, made);
      pq_->clear(made);
      if (!ok.ok()) return std::move(ok).error();
      stmt = prepared_.emplace(std::move(key), name).first;
    }
    PGresult* res = stmt != prepared_.end()
                        ? pq_->exec_prepared(conn_, stmt->second.c_str(), n, values.data(),
                                             lengths.data(), formats.data(), /*resultFormat=*/0)
                        : pq_->exec_params(conn_, text.c_str(), n, types.data(), values.data(),
                                           lengths.data(), formats.data(), /*resultFormat=*/0);
    Result<Rows> out = Collect(what, res);
    pq_->clear(res);
    return out;
  }

  Status Exec(std::string_view what, std::string_view sql) override {
    KILN_TRY(Reconnect(what));
    PGresult* res = pq_->exec(conn_, std::string(sql).c_str());
    Result<Rows> out = Collect(what, res);
    pq_->clear(res);
    if (!out.ok()) return std::move(out).error();
    return OkStatus();
  }

 private:
  // A connection the server closed (a restart, a failover) is opened again
  // before the next statement, never retried after a failed one.
  Status Reconnect(std::string_view what) {
    if (pq_->status(conn_) == CONNECTION_OK) return OkStatus();
    pq_->reset(conn_);
    prepared_.clear();  // a new session has none of them
    if (pq_->status(conn_) == CONNECTION_OK) return OkStatus();
    return MakeError(Code::kUnavailable, "postgresql: " + std::string(what) + ": " +
                                             Trimmed(pq_->error_message(conn_)));
  }

  Result<Rows> Collect(std::string_view what, PGresult* res) {
    const ExecStatusType st = res != nullptr ? pq_->result_status(res) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      const char* state = res != nullptr ? pq_->result_error_field(res, PG_DIAG_SQLSTATE) : nullptr;
      std::string message =
          "postgresql: " + std::string(what) + ": " +
          Trimmed(res != nullptr ? pq_->result_error_message(res) : pq_->error_message(conn_));
      Code code = Code::kUnavailable;  // no result at all: the connection failed
      if (state != nullptr) {
        code = CodeForSqlState(state);
        message += std::string(" (SQLSTATE ") + state + ")";
      } else if (pq_->status(conn_) == CONNECTION_OK && res != nullptr) {
        code = Code::kInternal;
      }
      return MakeError(code, std::move(message));
    }
    Rows out;
    const int n = pq_->ntuples(res), f = pq_->nfields(res);
    out.rows.reserve(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      std::vector<Value> columns;
      columns.reserve(static_cast<size_t>(f));
      for (int c = 0; c < f; ++c) {
        if (pq_->getisnull(res, r, c) != 0) {
          columns.push_back(Value::Null());
          continue;
        }
        const char* data = pq_->getvalue(res, r, c);
        const auto len = static_cast<size_t>(pq_->getlength(res, r, c));
        const std::string_view text(data, len);
        switch (pq_->ftype(res, c)) {
          case kInt2Oid:
          case kInt4Oid:
          case kInt8Oid: {
            int64_t v = 0;
            std::from_chars(text.data(), text.data() + text.size(), v);
            columns.push_back(Value::Int(v));
            break;
          }
          case kNumericOid:
          case kFloat4Oid:
          case kFloat8Oid:
            if (text.find_first_of(".eEN") == std::string_view::npos) {
              int64_t v = 0;
              std::from_chars(text.data(), text.data() + text.size(), v);
              columns.push_back(Value::Int(v));
            } else {
              columns.push_back(Value::Real(std::strtod(std::string(text).c_str(), nullptr)));
            }
            break;
          case kBoolOid: columns.push_back(Value::Int(text == "t" ? 1 : 0)); break;
          case kByteaOid: {
            size_t size = 0;
            unsigned char* raw = pq_->unescape_bytea(
                static_cast<const unsigned char*>(static_cast<const void*>(data)), &size);
            if (raw == nullptr) return Internal("postgresql: " + std::string(what) + ": bytea");
            columns.push_back(
                Value::Blob(std::string(static_cast<char*>(static_cast<void*>(raw)), size)));
            pq_->freemem(raw);
            break;
          }
          default: columns.push_back(Value::Text(std::string(text))); break;
        }
      }
      out.rows.emplace_back(std::move(columns));
    }
    const char* tuples = pq_->cmd_tuples(res);
    if (tuples != nullptr && *tuples != '\0') out.changes = std::atoll(tuples);
    return out;
  }

  const Pq* pq_;
  PGconn* conn_;
  static constexpr size_t kMaxPrepared = 512;
  std::unordered_map<std::string, std::string> prepared_;  // text + types -> statement name
  uint64_t statements_ = 0;
};

Result<std::unique_ptr<Conn>> Connect(const Pq* pq, const std::string& url) {
  // Ours first: the URL's own connect_timeout or application_name win.
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"5", "kiln", url.c_str(), nullptr};
  PGconn* conn = pq->connectdb_params(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) return MakeError(Code::kResourceExhausted, "postgresql: out of memory");
  if (pq->status(conn) != CONNECTION_OK) {
    std::string message =
        "postgresql: connect to " + RedactUrl(url) + ": " + Trimmed(pq->error_message(conn));
    pq->finish(conn);
    return MakeError(Code::kUnavailable, std::move(message));
  }
  return std::unique_ptr<Conn>(new PgConn(pq, conn));
}

Status Migrate(Conn& c) {
  KILN_TRY(c.Exec("begin migration", "BEGIN"));
  Status s = [&c]() -> Status {
    // Held to COMMIT: of nodes starting together one migrates, the others
    // wait and then see the version it wrote.
    KILN_TRY(c.Run("lock migration", Sql("SELECT pg_advisory_xact_lock(?)", kMigrationLock)));
    KILN_TRY(c.Exec("create schema_version",
                    "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)"));
    KILN_ASSIGN_OR_RETURN(Rows got,
                          c.Run("read schema_version", Sql("SELECT version FROM schema_version")));
    const int64_t version = got.rows.empty() ? 0 : got.rows[0].Int(0);
    if (version > kPostgresSchemaVersion) {
      return FailedPrecondition("postgresql schema version " + std::to_string(version) +
                                " is newer than this kiln's (" +
                                std::to_string(kPostgresSchemaVersion) + "): use a newer kiln");
    }
    for (int64_t v = version; v < kPostgresSchemaVersion; ++v) {
      KILN_TRY(c.Exec("migration to postgresql schema version " + std::to_string(v + 1),
                      kPgMigrations[v]));
    }
    if (version != kPostgresSchemaVersion) {
      KILN_TRY(c.Exec("clear schema_version", "DELETE FROM schema_version"));
      KILN_TRY(c.Run("write schema_version", Sql("INSERT INTO schema_version (version) VALUES (?)",
                                                 int64_t{kPostgresSchemaVersion})));
    }
    return c.Exec("commit migration", "COMMIT");
  }();
  if (!s.ok()) (void)c.Exec("rollback migration", "ROLLBACK");
  return s;
}

}  // namespace

bool IsPostgresUrl(std::string_view url) {
  return url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
}

std::string RedactUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t authority = scheme + 3;
  const size_t end = url.find_first_of("/?", authority);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at == std::string::npos || at < authority) return url;
  const size_t colon = url.find(':', authority);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon) + url.substr(at);
}

Result<std::vector<std::unique_ptr<Conn>>> OpenPostgres(const std::string& url, int pool_size) {
  if (!IsPostgresUrl(url)) {
    return InvalidArgument("store url '" + RedactUrl(url).substr(0, 200) +
                           "': expected postgresql://...");
  }
  if (pool_size < 1) return InvalidArgument("store: pool size must be at least 1");
  KILN_ASSIGN_OR_RETURN(const Pq* pq, LoadPq());
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < pool_size; ++i) {
    KILN_ASSIGN_OR_RETURN(auto c, Connect(pq, url));
    conns.push_back(std::move(c));
  }
  KILN_TRY(Migrate(*conns[0]));
  return conns;
}

}  // namespace kiln::store
