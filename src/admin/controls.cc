#include "admin/controls.h"

#include <set>

#include "base/log.h"
#include "store/api_key.h"
#include "store/time_format.h"

namespace kiln::admin {

void Controls::Event(executions::EventKind kind, const std::string& tenant, const Actor& actor,
                     const std::string& detail) {
  if (deps_.events == nullptr) return;
  executions::SecurityEvent e;
  e.kind = kind;
  e.tenant = tenant;
  e.key_id = actor.key_id;
  e.client_addr = actor.peer;
  e.detail = detail + " (by " + actor.by + ")";
  deps_.events->Record(e);
}

Status Controls::Load() {
  KILN_ASSIGN_OR_RETURN(std::vector<store::QuarantineRow> rows, deps_.store->ListQuarantines());
  KILN_ASSIGN_OR_RETURN(store::LockdownState state, deps_.store->GetLockdown());
  {
    std::lock_guard<std::mutex> lock(mu_);
    quarantined_.clear();
    for (auto& r : rows) quarantined_[r.tenant] = std::move(r);
  }
  ApplyLockdown(state);
  if (state.on) KILN_LOG_WARN("lockdown is on: {} (since a previous start)", state.reason);
  return OkStatus();
}

void Controls::Refresh() {
  auto state = deps_.store->GetLockdown();
  if (!state.ok()) return;
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    changed = state->on != lockdown_.on || state->since_ms != lockdown_.since_ms;
  }
  if (changed) {
    KILN_LOG_WARN("lockdown {} by {}: {}", state->on ? "on" : "off", state->by, state->reason);
    ApplyLockdown(*state);
  }
}

void Controls::ApplyLockdown(const store::LockdownState& state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lockdown_ = state;
  }
  if (!state.on) {
    deps_.executions->SetLockdown(std::nullopt);
    return;
  }
  // Refuse first, then stop what runs: nothing starts in between.
  deps_.executions->SetLockdown(state.reason);
  deps_.executions->CancelRunning();
  if (deps_.sessions != nullptr)
    deps_.sessions->EndAll("the server is in lockdown: " + state.reason);
}

std::optional<std::string> Controls::QuarantineReason(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = quarantined_.find(tenant);
  if (it == quarantined_.end()) return std::nullopt;
  return it->second.reason;
}

store::LockdownState Controls::lockdown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lockdown_;
}

Result<store::QuarantineRow> Controls::Quarantine(const std::string& tenant,
                                                  const std::string& reason, const Actor& actor) {
  if (!store::IsValidTenant(tenant)) {
    return InvalidField("tenant", "tenant: '" + tenant.substr(0, 80) +
                                      "' is not a tenant name (1-64 of A-Z a-z 0-9 . _ -)");
  }
  store::QuarantineRow row{tenant, store::NowMs(), reason.empty() ? "no reason given" : reason,
                           actor.by};
  KILN_TRY(deps_.store->SetQuarantine(row));
  {
    std::lock_guard<std::mutex> lock(mu_);
    quarantined_[tenant] = row;
  }
  deps_.executions->CancelTenant(tenant);
  int ended = 0;
  if (deps_.sessions != nullptr) {
    ended = deps_.sessions->EndTenant(tenant, "the tenant was quarantined: " + row.reason);
  }
  Event(executions::EventKind::kTenantQuarantined, tenant, actor,
        "quarantined: " + row.reason + "; " + std::to_string(ended) + " session(s) ended");
  return row;
}

Result<bool> Controls::Release(const std::string& tenant, const Actor& actor) {
  KILN_ASSIGN_OR_RETURN(const bool was, deps_.store->ClearQuarantine(tenant));
  {
    std::lock_guard<std::mutex> lock(mu_);
    quarantined_.erase(tenant);
  }
  if (was) Event(executions::EventKind::kTenantReleased, tenant, actor, "released");
  return was;
}

Result<store::LockdownState> Controls::SetLockdown(bool on, const std::string& reason,
                                                   const Actor& actor) {
  store::LockdownState state;
  state.on = on;
  state.reason = on && reason.empty() ? "no reason given" : reason;
  state.since_ms = store::NowMs();
  state.by = actor.by;
  KILN_TRY(deps_.store->SetLockdown(state));
  ApplyLockdown(state);
  Event(executions::EventKind::kLockdown, "", actor,
        on ? "lockdown on: " + state.reason
           : "lockdown off" + (reason.empty() ? std::string() : ": " + reason));
  return state;
}

Status Controls::RevokeKey(const std::string& id, const Actor& actor) {
  KILN_TRY(deps_.store->RevokeKey(id));
  Event(executions::EventKind::kAdminAction, "", actor, "revoked key " + id);
  return OkStatus();
}

nlohmann::json Controls::LockdownJson(const store::LockdownState& s) {
  if (!s.on) return {{"on", false}, {"reason", nullptr}, {"since", nullptr}, {"by", nullptr}};
  return {{"on", true},
          {"reason", s.reason},
          {"since", store::FormatTimeMs(s.since_ms, true)},
          {"by", s.by}};
}

Result<nlohmann::json> Controls::TenantsJson() {
  const int64_t since = store::NowMs() - store::kDayMs;
  KILN_ASSIGN_OR_RETURN(std::vector<store::KeyInfo> keys, deps_.store->ListKeys());
  KILN_ASSIGN_OR_RETURN(std::vector<store::TenantUsage> usage, deps_.store->UsageSince(since));
  std::map<std::string, int> live;
  if (deps_.sessions != nullptr) live = deps_.sessions->LiveByTenant();
  std::map<std::string, store::QuarantineRow> quarantined;
  {
    std::lock_guard<std::mutex> lock(mu_);
    quarantined = quarantined_;
  }
  std::set<std::string> names;
  for (const auto& k : keys) names.insert(k.tenant);
  for (const auto& u : usage) names.insert(u.tenant);
  for (const auto& [t, n] : live) names.insert(t);
  for (const auto& [t, q] : quarantined) names.insert(t);
  if (deps_.config != nullptr) {
    for (const auto& [t, cfg] : deps_.config->tenants) {
      if (t != "default") names.insert(t);
    }
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& name : names) {
    int active = 0, admin = 0, revoked = 0;
    for (const auto& k : keys) {
      if (k.tenant != name) continue;
      if (k.revoked_ms) {
        ++revoked;
      } else {
        ++active;
        admin += k.admin ? 1 : 0;
      }
    }
    nlohmann::json t = {{"tenant", name},
                        {"keys", active},
                        {"admin_keys", admin},
                        {"revoked_keys", revoked},
                        {"sessions", live.count(name) ? live[name] : 0},
                        {"executions_24h", 0},
                        {"rejected_24h", 0},
                        {"events_24h", 0},
                        {"last_execution", nullptr},
                        {"quarantine", nullptr}};
    for (const auto& u : usage) {
      if (u.tenant != name) continue;
      t["executions_24h"] = u.executions;
      t["rejected_24h"] = u.rejected;
      t["events_24h"] = u.events;
      if (u.last_execution_ms)
        t["last_execution"] = store::FormatTimeMs(*u.last_execution_ms, true);
    }
    if (auto it = quarantined.find(name); it != quarantined.end()) {
      t["quarantine"] = {{"since", store::FormatTimeMs(it->second.since_ms, true)},
                         {"reason", it->second.reason},
                         {"by", it->second.by}};
    }
    list.push_back(std::move(t));
  }
  return nlohmann::json{{"tenants", list}};
}

}  // namespace kiln::admin
