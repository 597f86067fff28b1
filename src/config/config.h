// kiln.toml: profiles (interpreter, preload modules, import policy, default
// and maximum limits, extra read-only mounts, rich-output caps), read with
// toml++. Unknown keys and bad values are errors that name the key and its
// line. Every front-end turns a profile plus a request into PolicyBuilder
// calls through BuildPolicy, so validation stays in one place (P9).
//
// The repository's kiln.toml is compiled into the binary as the built-in
// configuration (BuiltinConfig), so kiln works with no file at all.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace kiln::config {

// Limits a profile sets by default or as a ceiling, and a request asks for.
struct LimitSpec {
  std::optional<double> timeout_s;
  std::optional<double> cpu_time_s;
  std::optional<uint64_t> memory_bytes;
  std::optional<double> cpus;
  std::optional<uint64_t> pids;
  std::optional<uint64_t> output_bytes;
  std::optional<uint64_t> disk_bytes;
};

// [profiles.NAME.io]: block I/O caps of the profile's sandboxes (a request
// cannot change them). Unset: policy::IoLimits' default; 0: "max", no limit.
struct IoSpec {
  std::optional<uint64_t> read_bps;
  std::optional<uint64_t> write_bps;
  std::optional<uint64_t> read_iops;
  std::optional<uint64_t> write_iops;
};

// Output audit (docs/adr/0015-output-audit-and-security-events.md): what the
// server does with a detector's match in what a sandbox sends back.
enum class AuditAction { kFlag, kRedact, kBlock };
std::string_view ToString(AuditAction a);  // "flag", "redact", "block"

// One detector: an RE2 pattern (bytes, Latin-1: `.` is any byte) and the
// longest text it can match, which bounds how much streamed output may be held
// back while a match could still be forming.
struct OutputDetector {
  std::string name;
  std::string regex;
  uint64_t max_length = 1024;
  AuditAction action = AuditAction::kRedact;
};

// [profiles.NAME.output_audit], resolved: the built-ins it names, then its own
// patterns, each with its action. No table: kDefaultDetectors, redacted.
struct OutputAuditSpec {
  bool enabled = true;
  std::vector<OutputDetector> detectors;
};

// The built-in detectors (name, pattern, max_length; action redact).
const std::vector<OutputDetector>& BuiltinDetectors();
// The ones every profile has when it says nothing: the server's own API keys
// (kiln_<id>_<secret>) and PEM private keys.
inline constexpr std::string_view kDefaultDetectors[] = {"kiln_api_key", "pem_private_key"};
OutputAuditSpec DefaultOutputAudit();

struct Profile {
  std::string name;
  std::string interpreter = "/usr/bin/python3";
  std::vector<std::string> preload;
  policy::ImportPolicy imports;
  std::vector<std::string> mounts;
  std::optional<uint64_t> max_images;
  std::optional<uint64_t> max_image_bytes;
  LimitSpec defaults;
  LimitSpec max;
  IoSpec io;
  bool pool = true;  // `pool = false`: the server never uses a zygote for it
  // `backend = "native" | "gvisor"` (docs/adr/0021): which jail runs it.
  policy::Backend backend = policy::Backend::kNative;
  OutputAuditSpec output_audit = DefaultOutputAudit();
};

// Per-tenant admission limits ([tenants.NAME]; [tenants.default] applies to
// every tenant not listed).
struct TenantConfig {
  int max_concurrent = 4;
  double rate_per_s = 10;  // token bucket refill
  double burst = 20;       // token bucket size
  int max_sessions = 8;    // live sessions (the sessions issue)
};

// [server]: what `kiln serve` listens on and how it admits, records and stops.
struct ServerConfig {
  std::string listen = "127.0.0.1:8080";
  std::string data_dir;                   // empty: store::DefaultDataDir()
  int concurrency = 0;                    // running sandboxes; 0 = the number of cores
  int queue = 64;                         // requests waiting for a sandbox; beyond: 503
  double queue_timeout_s = 30;            // longest wait in the queue; then 503
  uint64_t max_body_bytes = 16ULL << 20;  // larger: 413
  double client_timeout_s = 30;           // to receive a request's headers and body
  double shutdown_grace_s = 30;           // SIGTERM: running executions get this long
  bool store_code = true;                 // audit rows keep the code (else sha256 + size)
  int retention_days = 30;                // audit rows older than this are pruned
  std::string default_profile = "default";
  int max_connections = 512;
  // Sessions (docs/api.md, "Sessions").
  int max_sessions = 64;                  // live sessions of all tenants together
  double session_idle_ttl_s = 600;        // default and cap of a session's idle_ttl
  double session_max_lifetime_s = 3600;   // default and cap of its max_lifetime
  double interrupt_grace_s = 2;           // a timed-out cell's KeyboardInterrupt, then the kill
  uint64_t max_file_bytes = 64ULL << 20;  // one file of the files API
  // Request bodies being received or held, all connections together: a
  // request whose body would pass it gets 503 before its body is read. At
  // least max_body and max_file.
  uint64_t max_bodies_in_flight_bytes = 256ULL << 20;
  // /mcp: browser Origins allowed besides localhost, 127.0.0.1 and [::1]
  // ("scheme://host[:port]" exactly, or "*"); others get 403.
  std::vector<std::string> mcp_allowed_origins;
};

// [pool]: the warm pool of `kiln serve` (src/zygote, docs/adr/0011-zygote.md).
// `kiln run` never uses it.
struct PoolConfig {
  bool enabled = true;        // false: every execution takes the cold path
  int min = 1;                // sandboxes kept ready (or refilling) per profile, at least
  int max = 8;                // ... and at most (Erlang C sizes it in between)
  double target_wait = 0.05;  // P(a request finds no sandbox ready), the sizing's goal
  // Sandboxes being made at once per profile, at most; 0: one per cpu kiln may use.
  int max_refilling = 0;
  // The nice value refills run at (the zygote and its sandboxes until one is
  // taken): below the executions they are made for. 0..19.
  int refill_nice = 10;
  // Imported by each zygote besides the profile's own preload list.
  std::vector<std::string> preload = {"numpy", "pandas", "matplotlib"};
};

// [events] (docs/api.md, "Security events"): what the server does with its
// security events besides storing them.
// The kinds' names (executions::EventKind's; a unit test keeps them equal).
inline constexpr std::string_view kEventKindNames[] = {
    "seccomp_kill",    "import_violation", "pids_limit",    "memory_kills",   "output_flood",
    "output_audit",    "protocol_error",   "auth_failures", "sigkill_needed", "tenant_quarantined",
    "tenant_released", "lockdown",         "admin_action"};

// [[events.quarantine]]: `count` events of `kinds` from one tenant within
// `window_s` quarantine it (until an operator releases it).
struct QuarantineRule {
  std::string name;
  std::vector<std::string> kinds;
  int count = 3;
  double window_s = 600;
};

// [[events.webhook]]: a signed POST of each event (of `kinds`; empty: all) to
// `url` (http://HOST:PORT/PATH), from a durable queue, retried with backoff;
// at most `max_per_minute` events of one kind per minute (the rest dropped).
struct WebhookConfig {
  std::string name;
  std::string url;
  std::string secret;  // HMAC-SHA256 key
  std::vector<std::string> kinds;
  int max_per_minute = 10;
};

// [events]: the rules, the alerts, and when repeated acts become one event.
struct EventsConfig {
  std::vector<QuarantineRule> quarantine;
  std::vector<WebhookConfig> webhooks;
  // memory_kills: this many memory_limit results of one tenant in a row.
  int memory_kills_in_a_row = 3;
  // auth_failures: this many 401s from one address within auth_window_s.
  int auth_failures = 10;
  double auth_window_s = 60;
};

// [store]: where the server's state lives (docs/adr/0020). No url: SQLite
// under [server] data_dir, for one node. A postgresql:// url: the
// PostgreSQL database a fleet of nodes shares.
struct StoreConfig {
  std::string url;  // "" or postgresql://... / postgres://...
  int pool = 4;     // PostgreSQL connections per node, 1..64
  // PostgreSQL only: how long a node answers for a key from memory (0..60 s;
  // 0: every request reads the key). Bounds how late a revocation made
  // elsewhere takes effect on this node (store::OpenOptions::key_cache_ms).
  double key_cache_s = 1;
};

// [fleet]: this node in a fleet sharing a PostgreSQL store (docs/adr/0020);
// used only with a [store] url.
struct FleetConfig {
  std::string node;       // [a-z0-9-], 1-32 chars; "": from the host name
  std::string advertise;  // host:port others and the router reach it at; "": [server] listen
  double heartbeat_s = 2;
  double node_timeout_s = 10;  // a node silent this long is lost
  // On SIGTERM: /readyz answers 503 this long, requests still served, before
  // the server stops accepting (the router's health checks move away first).
  double drain_wait_s = 2;
};

struct Config {
  std::string source;  // file name, or "built-in"
  std::string text;    // the TOML it was parsed from (a restarted spawner parses it again)
  std::map<std::string, Profile> profiles;
  ServerConfig server;
  PoolConfig pool;
  std::map<std::string, TenantConfig> tenants;  // "default" always present
  EventsConfig events;
  StoreConfig store;
  FleetConfig fleet;
  Result<const Profile*> Find(std::string_view name) const;
  // The tenant's limits, or [tenants.default]'s.
  const TenantConfig& Tenant(const std::string& name) const;
};

// The longest duration kiln.toml may give (about 31 years: any longer means
// "never"). Durations become std::chrono nanoseconds and int64 milliseconds
// in the server, the sessions and the pool; this keeps them representable,
// with room to add to now().
inline constexpr double kMaxSeconds = 1e9;

// The rules kiln.toml and `kiln serve`'s flags share; each returns the rule
// a bad value breaks, without the key or flag (the caller names it).
// A fleet node id: 1-32 characters of [a-z0-9-] (it is the key in session ids).
Status CheckNodeId(std::string_view id);
// A store URL: postgresql://... or postgres://... ("" is the SQLite default).
Status CheckStoreUrl(std::string_view url);
// HOST:PORT with a non-empty host and a port 1..65535 ("[::1]:80" too).
Status CheckHostPort(std::string_view address);

// Parses TOML text; `source` names it in errors ("kiln.toml:12: ...").
Result<Config> ParseConfig(std::string_view text, std::string source);
Result<Config> LoadConfigFile(const std::string& path);
// The repository's kiln.toml, embedded at build time.
const Config& BuiltinConfig();
// `--config FILE` as every command reads it: the file, or the built-in copy
// when `path` is empty.
Result<Config> LoadConfigOrBuiltin(const std::string& path);
std::string_view BuiltinConfigText();

// The profile's defaults, overridden by `request` where it says something;
// a request over the profile's maximum is kInvalidArgument naming the field
// ("memory: 8 GiB is over the profile's maximum of 4 GiB"). The builder is
// returned unbuilt so front-ends can add their own calls (files, ...).
Result<policy::PolicyBuilder> PolicyFor(const Profile& profile, const LimitSpec& request);

}  // namespace kiln::config
