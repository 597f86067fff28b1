// The operator's controls (docs/api.md, "Operator controls"; docs/adr/0015):
// quarantine and release a tenant, lock the server down and lift it, revoke a
// key. Each is kept in the store (so it survives a restart), takes effect at
// once (a quarantined tenant's or, in a lockdown, every running execution is
// cancelled and its sessions are ended) and is itself recorded as a security
// event naming who did it.
//
// Thread-safe. The HTTP server asks it on every authenticated request
// (QuarantineReason) and the admin routes call the rest; `kiln serve` calls
// Refresh every second so that `kiln lockdown on|off` (which writes the store
// directly) reaches a running server.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/result.h"
#include "config/config.h"
#include "executions/security_events.h"
#include "executions/service.h"
#include "sessions/session_manager.h"
#include "store/store.h"

namespace kiln::admin {

// Who asked: an admin key over HTTP, the CLI, or a rule.
struct Actor {
  std::string key_id;  // the admin key's id ("" for the CLI or a rule)
  std::string peer;    // client address
  std::string by;      // "key <id>", "kiln CLI", "rule NAME"
};

struct Deps {
  store::Store* store = nullptr;
  executions::SecurityEvents* events = nullptr;  // optional
  executions::Service* executions = nullptr;
  sessions::SessionManager* sessions = nullptr;  // optional
  const config::Config* config = nullptr;        // optional: tenants listed in kiln.toml
};

class Controls final {
 public:
  explicit Controls(Deps deps) : deps_(deps) {}
  Controls(const Controls&) = delete;
  Controls& operator=(const Controls&) = delete;

  // Reads the quarantines and the lockdown from the store and applies them.
  Status Load();
  // Re-reads the lockdown (the CLI may have changed it) and applies a change.
  void Refresh();

  std::optional<std::string> QuarantineReason(const std::string& tenant) const;
  store::LockdownState lockdown() const;

  // The tenant's keys get 403 with the reason; its running executions are
  // cancelled and its sessions ended.
  Result<store::QuarantineRow> Quarantine(const std::string& tenant, const std::string& reason,
                                          const Actor& actor);
  // false: it was not quarantined.
  Result<bool> Release(const std::string& tenant, const Actor& actor);
  // On: new executions and sessions get 503 "lockdown" with the reason, every
  // running execution is cancelled and every session ended. Off: lifted.
  Result<store::LockdownState> SetLockdown(bool on, const std::string& reason, const Actor& actor);
  Status RevokeKey(const std::string& id, const Actor& actor);

  // GET /v1/admin/tenants: every tenant with a key, in kiln.toml, quarantined
  // or active in the last 24 hours: {tenant, keys, admin_keys, revoked_keys,
  // sessions, executions_24h, rejected_24h, events_24h, last_execution,
  // quarantine: {since, reason, by} | null}.
  Result<nlohmann::json> TenantsJson();
  static nlohmann::json LockdownJson(const store::LockdownState& state);

 private:
  void ApplyLockdown(const store::LockdownState& state);
  void Event(executions::EventKind kind, const std::string& tenant, const Actor& actor,
             const std::string& detail);

  Deps deps_;
  mutable std::mutex mu_;
  std::map<std::string, store::QuarantineRow> quarantined_;
  store::LockdownState lockdown_;
};

}  // namespace kiln::admin
