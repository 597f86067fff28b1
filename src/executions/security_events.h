// Security events (docs/adr/0015-output-audit-and-security-events.md): what
// the supervisor and the server already know to be suspicious, as typed
// events. Each one is stored in the audit database (retention as the
// executions'), counted in kiln_security_events_total{kind}, logged (one
// warning line) and handed to the listeners (the live stream of
// GET /v1/admin/events, the quarantine rules, the webhook queue).
//
// Where they come from:
//   the executions service, from a result: seccomp_kill (SIGSYS),
//     import_violation, pids_limit (forks refused at pids.max), output_flood
//     (output_limit), protocol_error (a forged or malformed runtime frame),
//     sigkill_needed (a session cell that ignored its interrupt), and
//     memory_kills after memory_kills_in_a_row memory_limit results of one tenant
//     in a row;
//   the output audit: output_audit (one event per execution or download with hits);
//   the HTTP server: auth_failures (auth_failures 401s from one
//     address within auth_window_ms; one event per window);
//   the operator: admin_action, lockdown, tenant_quarantined, tenant_released.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "metrics/metrics.h"
#include "store/store.h"
#include "supervisor/execution_result.h"

namespace kiln::executions {

enum class EventKind {
  kSeccompKill,
  kImportViolation,
  kPidsLimit,
  kMemoryKills,
  kOutputFlood,
  kOutputAudit,
  kProtocolError,
  kAuthFailures,
  kSigkillNeeded,
  kTenantQuarantined,
  kTenantReleased,
  kLockdown,
  kAdminAction,
};

inline constexpr EventKind kAllEventKinds[] = {
    EventKind::kSeccompKill,       EventKind::kImportViolation, EventKind::kPidsLimit,
    EventKind::kMemoryKills,       EventKind::kOutputFlood,     EventKind::kOutputAudit,
    EventKind::kProtocolError,     EventKind::kAuthFailures,    EventKind::kSigkillNeeded,
    EventKind::kTenantQuarantined, EventKind::kTenantReleased,  EventKind::kLockdown,
    EventKind::kAdminAction,
};

// "seccomp_kill", "import_violation", ...
std::string_view ToString(EventKind kind);
std::optional<EventKind> ParseEventKind(std::string_view name);
// Every name, comma-separated (for errors and help).
std::string EventKindNames();

// When repeated acts become one event ([events] of kiln.toml; these are its defaults).
struct EventThresholds {
  int memory_kills_in_a_row = 3;    // memory_limit results of one tenant in a row
  int auth_failures = 10;           // 401s from one address ...
  int64_t auth_window_ms = 60'000;  // ... within this window (one event per window)
};

struct SecurityEvent {
  EventKind kind = EventKind::kAdminAction;
  std::string tenant;
  std::string key_id;
  std::optional<std::string> execution_id;
  std::optional<std::string> session_id;
  std::string client_addr;
  std::string detail;
};

// The JSON of an event (GET /v1/admin/events, `kiln events --json`, the
// webhook): {id, at, kind, tenant, key_id, execution_id, session_id,
// client_addr, detail}.
nlohmann::json EventJson(const store::EventRow& row);

class SecurityEvents final {
 public:
  // Both optional (a test's, or `kiln mcp` locally: events are only logged).
  SecurityEvents(store::Store* store, metrics::Metrics* metrics, EventThresholds thresholds = {})
      : store_(store), metrics_(metrics), thresholds_(thresholds) {}
  SecurityEvents(const SecurityEvents&) = delete;
  SecurityEvents& operator=(const SecurityEvents&) = delete;

  // Stores, counts, logs and hands the event to the listeners. Returns the
  // stored row (id 0 when there is no store or it failed).
  store::EventRow Record(const SecurityEvent& event);

  // The events one execution's result shows.
  void FromResult(const std::string& tenant, const std::string& key_id, const std::string& peer,
                  const std::string& execution_id, const std::optional<std::string>& session_id,
                  const supervisor::ExecutionResult& result);
  // One 401 from `peer`: an auth_failures event at the threshold.
  void AuthFailure(const std::string& peer);

  using Listener = std::function<void(const store::EventRow&)>;
  // Called, in order, for every event after it is stored; from the thread
  // that recorded it (keep it short), without any lock of this class held.
  // Returns a handle for Unsubscribe; a listener may be called once more
  // after Unsubscribe returns, so what it captures must outlive that.
  int Subscribe(Listener listener);
  void Unsubscribe(int handle);

 private:
  store::Store* store_;
  metrics::Metrics* metrics_;
  const EventThresholds thresholds_;
  std::mutex mu_;
  std::map<std::string, int> memory_kills_;  // tenant -> memory_limit results in a row
  struct Failures {
    int64_t window_start_ms = 0;
    int count = 0;
    bool reported = false;
  };
  std::map<std::string, Failures> auth_failures_;  // peer -> this window's 401s
  std::mutex listeners_mu_;
  std::map<int, Listener> listeners_;
  int next_handle_ = 1;
};

}  // namespace kiln::executions
