// kiln::store: the server's durable state: API keys, stored only as SHA-256
// hashes of their secrets and each bound to a tenant, and the audit log, one
// row per execution (failed and rejected ones too), output hits, security
// events, the operator's controls and the webhook queue.
//
// Two databases behind one interface (sql.h, docs/adr/0020): by default one
// SQLite database (DATA_DIR/kiln.db, WAL mode) for one node; with a store URL
// (`[store] url = "postgresql://..."`, `--store`) one PostgreSQL database a
// fleet of nodes shares. The statements are the same for both; what follows
// describes SQLite, and PostgreSQL's differences are noted where they are.
//
// Threads: a Store is safe to call from any number of threads. It owns a
// pool of connections and gives each call one of its own: SQLite's pool is
// one connection, so every call is serialised as before; PostgreSQL's is
// OpenOptions::pool_size. Each write is its own transaction, committed
// before the call returns. Other processes
// (the `kiln keys` / `kiln audit` CLI next to a running server) may open the
// same directory: SQLite's file locks and a busy timeout arbitrate, and
// readers never block the writer in WAL mode.
//
// Durability: synchronous=NORMAL in WAL mode. A committed row survives the
// process being SIGKILLed (it is in the WAL, in the page cache); a power
// loss may roll back the last commits, never corrupt the database.
//
// Errors: every SQLite failure is a kiln::Error naming the statement, with
// codes kUnavailable (locked past the busy timeout), kAlreadyExists
// (duplicate id), kDataLoss (corrupt file), kPermissionDenied, kInternal.
// No exceptions. Secrets are never logged, stored or put in an Error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "store/sql.h"

namespace kiln::store {

class ConnPool;

// The reference design's audit retention; the server prunes with
// Prune(NowMs() - DefaultRetentionDays * 86'400'000) from a timer.
inline constexpr int kDefaultRetentionDays = 30;
inline constexpr int64_t kDayMs = 86'400'000;
// The schema this build writes; Open migrates older databases to it and
// refuses newer ones.
inline constexpr int kSchemaVersion = 6;
// The same for a PostgreSQL store (its own series of migrations, postgres.cc).
inline constexpr int kPostgresSchemaVersion = 2;

// Where kiln keeps its state when --data-dir is not given: /var/lib/kiln for
// root, else $XDG_STATE_HOME/kiln (when set and absolute), else
// ~/.local/state/kiln (HOME, else the passwd entry).
std::string DefaultDataDir();
// The rule above as a pure function: `xdg_state_home` and `home` are the
// environment's values ("" when unset).
std::string DefaultDataDirFor(bool root, std::string_view xdg_state_home, std::string_view home);

struct OpenOptions {
  // Create the directory (mode 0700, with missing parents) and kiln.db (mode
  // 0600) if absent. Read-only tools (kiln keys list, kiln audit) pass false
  // so a mistyped --data-dir is kNotFound instead of a new empty database.
  bool create = true;
  // How long a call waits for another process's lock before kUnavailable.
  int busy_timeout_ms = 5000;
  // The clock for created/revoked/last_used/interrupted times; tests fake it.
  std::function<int64_t()> now_ms;
  // PostgreSQL only: connections in the pool (SQLite has one).
  int pool_size = 4;
  // The node this store serves, in a fleet (docs/adr/0020): every audit row
  // BeginExecution writes names it, so another node can mark them
  // interrupted when this one is lost. "" on a single node.
  std::string node_id;
  // How long Authenticate may answer for a key from memory (0: never; every
  // call reads the database). A fleet's nodes set [store] key_cache (1 s):
  // one store round trip fewer per request, and a key revoked on another node
  // (or by `kiln keys revoke --store`) is refused by every node at most this
  // long after the revocation committed. RevokeKey on this Store takes effect
  // here at once. Only keys that authenticated are kept (at most
  // kKeyCacheEntries), never an unknown id.
  int64_t key_cache_ms = 0;
};

inline constexpr size_t kKeyCacheEntries = 4096;

// One kiln node of a fleet, as the node registry holds it.
struct NodeRow {
  std::string id;       // [a-z0-9-], 1-32 chars: also the key in session ids
  std::string address;  // host:port where the node serves HTTP
  int64_t started_ms = 0;
  int64_t heartbeat_ms = 0;        // the node's last heartbeat
  bool draining = false;           // it takes no new sessions
  std::optional<int64_t> lost_ms;  // when another node found its heartbeat expired
};

// What may be shown about a key: never its secret or hash.
struct KeyInfo {
  std::string id;  // 12 lowercase hex chars
  std::string tenant;
  int64_t created_ms = 0;
  std::optional<int64_t> revoked_ms;
  std::optional<int64_t> last_used_ms;  // updated at most once a minute
  bool admin = false;                   // may use /v1/admin/* (docs/api.md, "Operator controls")
};

struct NewKey {
  KeyInfo info;
  std::string key;  // "kiln_<id>_<secret>": shown once, stored nowhere
};

// BeginExecution's row. `id` is the server's execution id (unique).
struct AuditStart {
  std::string id;
  std::string tenant;
  std::string key_id;
  std::string profile;
  std::optional<std::string> session_id;
  int64_t started_ms = 0;
  std::string code;
  bool store_code = true;  // false: only code_sha256 and code_size are kept
  std::string client_addr;
};

// FinishExecution's update of the row `id`.
struct AuditFinish {
  std::string id;
  int64_t ended_ms = 0;
  std::string status;  // "ok", "error", "timeout", ..., "rejected"
  std::optional<int> exit_code;
  std::optional<int> signal;
  double duration_ms = 0;
  double cpu_ms = 0;
  uint64_t peak_memory_bytes = 0;
  uint64_t stdout_bytes = 0, stderr_bytes = 0;
  bool stdout_truncated = false, stderr_truncated = false;
  std::optional<std::string> policy_violation;  // e.g. the violation as JSON text
  std::string reason;
};

// One execution as stored. Fields FinishExecution sets are nullopt while the
// status is "running" (and stay so for rows marked "interrupted").
struct AuditRow {
  std::string id;
  std::string tenant;
  std::string key_id;
  std::string profile;
  std::optional<std::string> session_id;
  std::string client_addr;
  int64_t started_ms = 0;
  std::optional<int64_t> ended_ms;
  std::string status;
  std::optional<std::string> code;  // nullopt when store_code was false
  std::string code_sha256;          // 64 lowercase hex chars, always
  uint64_t code_size = 0;           // bytes, always
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<double> duration_ms;
  std::optional<double> cpu_ms;
  std::optional<uint64_t> peak_memory_bytes;
  std::optional<uint64_t> stdout_bytes, stderr_bytes;
  std::optional<bool> stdout_truncated, stderr_truncated;
  std::optional<std::string> policy_violation;
  std::optional<std::string> reason;
  std::optional<std::string> node;  // the fleet node that ran it (nullopt on a single node)
};

// Filters are ANDed; unset ones match everything. Newest first.
struct AuditQuery {
  std::optional<std::string> tenant;
  std::optional<std::string> session_id;
  std::optional<std::string> status;
  std::optional<int64_t> since_ms;  // started_ms >= since_ms
  int limit = 100;                  // 1..1'000'000, else kInvalidArgument
};

// One hit of the output audit (docs/adr/0015): which detector matched where
// in what an execution (or a session's file download) sent back. Never the
// matched text.
struct OutputHitRow {
  int64_t at_ms = 0;
  std::optional<std::string> execution_id;  // nullopt: a downloaded file
  std::optional<std::string> session_id;
  std::string tenant;
  std::string profile;
  std::string detector;
  std::string location;  // "stdout", "outputs[0].text", "files/out.txt", ...
  std::string action;    // "flag", "redact", "block"
  uint64_t count = 0;
};

struct OutputHitQuery {
  std::optional<std::string> execution_id;
  std::optional<std::string> tenant;
  std::optional<int64_t> since_ms;
  int limit = 100;
};

// One security event (docs/adr/0015): something suspicious the supervisor or
// the server saw. `kind` is executions::EventKind's name.
struct EventRow {
  int64_t id = 0;  // assigned by RecordEvent, increasing
  int64_t at_ms = 0;
  std::string kind;
  std::string tenant;  // "" when no tenant is known (an unauthenticated address)
  std::string key_id;
  std::optional<std::string> execution_id;
  std::optional<std::string> session_id;
  std::string client_addr;
  std::string detail;  // one line for a person; never a secret or the code
};

struct EventQuery {
  std::optional<std::string> tenant;
  std::optional<std::string> kind;
  std::optional<int64_t> since_ms;
  std::optional<int64_t> after_id;  // id > after_id (a live reader's cursor)
  int limit = 100;
  bool oldest_first = false;  // default newest first
};

// A quarantined tenant (docs/api.md, "Operator controls"): its keys get 403.
struct QuarantineRow {
  std::string tenant;
  int64_t since_ms = 0;
  std::string reason;
  std::string by;  // "key <id>", "kiln CLI", "rule <name>"
};

// The server's lockdown: new executions and sessions refused, kept across restarts.
struct LockdownState {
  bool on = false;
  std::string reason;
  int64_t since_ms = 0;
  std::string by;
};

// One tenant's activity since a time (GET /v1/admin/tenants).
struct TenantUsage {
  std::string tenant;
  int64_t executions = 0;  // rows started since (rejected ones included)
  int64_t rejected = 0;
  int64_t events = 0;  // security events since
  std::optional<int64_t> last_execution_ms;
};

// One event waiting to be POSTed to a webhook (a durable queue: a restart
// loses none).
struct WebhookDelivery {
  int64_t id = 0;
  std::string webhook;  // its name in kiln.toml
  int64_t event_id = 0;
  std::string kind;
  std::string body;  // the event's JSON
  int64_t created_ms = 0;
  int attempts = 0;
  int64_t next_ms = 0;  // not before
  std::string last_error;
};

class Store final {
 public:
  // Opens DATA_DIR/kiln.db, sets WAL mode and the busy timeout, and migrates
  // the schema to kSchemaVersion in one transaction. kFailedPrecondition for a
  // database from a newer kiln; kNotFound when !options.create and it is
  // missing; kPermissionDenied/errno errors naming the path otherwise.
  static Result<std::unique_ptr<Store>> Open(const std::string& data_dir, OpenOptions options = {});
  // The CLI's --data-dir: `data_dir`, or DefaultDataDir() when it is empty;
  // `create`: make the database if it is not there (else it is an error).
  static Result<std::unique_ptr<Store>> OpenDataDir(const std::string& data_dir, bool create);
  // The PostgreSQL database `url` names (postgresql://...), its schema
  // migrated to kPostgresSchemaVersion; `options.create` does not apply.
  // kInvalidArgument for another scheme, kUnavailable when it cannot connect.
  static Result<std::unique_ptr<Store>> OpenUrl(const std::string& url, OpenOptions options = {});
  // The CLI's and the server's choice: the store at `url` when it is set
  // (--store, [store] url), else OpenDataDir(data_dir, create).
  static Result<std::unique_ptr<Store>> OpenFor(const std::string& url, const std::string& data_dir,
                                                bool create);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  // DATA_DIR/kiln.db, or the store URL without its password.
  const std::string& path() const { return path_; }
  Dialect dialect() const { return dialect_; }

  // --- Keys.

  // A new random key for `tenant` (1-64 chars of [A-Za-z0-9._-], else
  // kInvalidArgument). The full key is in the result only.
  Result<NewKey> CreateKey(std::string_view tenant, bool admin = false);
  // Every key, revoked ones too, oldest first.
  Result<std::vector<KeyInfo>> ListKeys();
  // Marks the key revoked; later Authenticate calls refuse it. Revoking a
  // revoked key succeeds and keeps the first time. kNotFound for an unknown
  // id, kInvalidArgument for one that is not 12 lowercase hex chars.
  Status RevokeKey(std::string_view id);
  // The key the presented string names, if it is well formed, known, not
  // revoked, and its secret's SHA-256 equals the stored one (compared in
  // constant time). nullopt otherwise: a malformed key is not an error. An
  // Error means the database failed, and the server must refuse the request
  // (fail closed). Updates last_used when the stored one is a minute old.
  Result<std::optional<KeyInfo>> Authenticate(std::string_view presented);

  // --- Audit.

  // Inserts the row with status "running". The code is stored only when
  // store_code; its sha256 and size always. kAlreadyExists for a reused id,
  // kInvalidArgument for an empty id.
  Status BeginExecution(const AuditStart& start);
  // Completes the row; committed before it returns, so the server may reply
  // afterwards. kNotFound if BeginExecution never wrote `finish.id`.
  Status FinishExecution(const AuditFinish& finish);
  // At server start: every row still "running" belonged to a server that
  // died; marks them "interrupted" with ended_ms now. Returns how many.
  // Only one server may use a data directory.
  Result<int> MarkInterrupted();
  // Deletes finished rows that started before `older_than_ms`, in batches so
  // other callers are not blocked for long. Returns how many.
  Result<int> Prune(int64_t older_than_ms);
  Result<std::vector<AuditRow>> Query(const AuditQuery& query);

  // --- Output audit hits (pruned with the executions, by at_ms).
  Status RecordOutputHits(const std::vector<OutputHitRow>& hits);
  // Newest first.
  Result<std::vector<OutputHitRow>> QueryOutputHits(const OutputHitQuery& query);

  // --- Security events (pruned with the executions, by at_ms).
  // Returns the event's id.
  Result<int64_t> RecordEvent(const EventRow& event);
  Result<std::vector<EventRow>> QueryEvents(const EventQuery& query);

  // --- Operator controls (kept across restarts).
  Status SetQuarantine(const QuarantineRow& q);  // insert or replace
  // Whether the tenant was quarantined.
  Result<bool> ClearQuarantine(std::string_view tenant);
  Result<std::vector<QuarantineRow>> ListQuarantines();
  Status SetLockdown(const LockdownState& state);
  Result<LockdownState> GetLockdown();  // on = false when never set
  Result<std::vector<TenantUsage>> UsageSince(int64_t since_ms);

  // --- The node registry (a fleet sharing a PostgreSQL store; SQLite holds
  // it too, for one node).
  // Inserts or refreshes the node's row: address, draining, heartbeat_ms =
  // now, lost_ms cleared (a node found lost that beats again is back).
  Status Heartbeat(const NodeRow& node);
  // Every node, by id.
  Result<std::vector<NodeRow>> ListNodes();
  // The node left cleanly: its row is deleted.
  Status RemoveNode(std::string_view id);
  // Claims every node whose heartbeat is older than now - timeout_ms and that
  // no node has claimed yet (one UPDATE ... RETURNING: of nodes reaping at
  // once, each lost node goes to exactly one), sets its lost_ms, and marks
  // its running audit rows "interrupted". Returns the claimed ids.
  Result<std::vector<std::string>> ReapLostNodes(int64_t timeout_ms);
  // The running rows of `node` become "interrupted" with `reason`; how many.
  Result<int> MarkNodeInterrupted(std::string_view node, std::string_view reason);

  // --- The webhook queue.
  Status EnqueueWebhook(const WebhookDelivery& d);
  // Due ones (next_ms <= now), oldest first.
  Result<std::vector<WebhookDelivery>> DueWebhooks(int64_t now_ms, int limit);
  Status WebhookDone(int64_t id);  // delivered, or given up
  Status WebhookRetry(int64_t id, int attempts, int64_t next_ms, const std::string& error);
  Result<int64_t> WebhookQueued();

 private:
  Store(std::string path, Dialect dialect, std::vector<std::unique_ptr<Conn>> conns,
        OpenOptions options);
  int64_t Now() const;
  // One statement on a connection of the pool.
  Result<Rows> Run(std::string_view what, const Sql& sql);
  // DELETE in batches of rows matching `where` (binding older_than_ms).
  Result<int> PruneTable(std::string_view what, std::string_view table, std::string_view key,
                         std::string_view where, int64_t older_than_ms);

  const std::string path_;
  const Dialect dialect_;
  const OpenOptions options_;
  std::unique_ptr<ConnPool> pool_;

  // Authenticate's memory (OpenOptions::key_cache_ms): key id -> the stored
  // row and secret digest, and when they were read.
  struct CachedKey {
    KeyInfo info;
    std::string digest;
    int64_t read_ms = 0;
  };
  std::mutex key_cache_mu_;
  std::unordered_map<std::string, CachedKey> key_cache_;
};

}  // namespace kiln::store
