#include "executions/security_events.h"

#include <fmt/format.h>

#include <csignal>

#include "base/log.h"
#include "store/time_format.h"

namespace kiln::executions {
namespace {

constexpr size_t kMaxTrackedPeers = 10000;

}  // namespace

std::string_view ToString(EventKind kind) {
  switch (kind) {
    case EventKind::kSeccompKill: return "seccomp_kill";
    case EventKind::kImportViolation: return "import_violation";
    case EventKind::kPidsLimit: return "pids_limit";
    case EventKind::kMemoryKills: return "memory_kills";
    case EventKind::kOutputFlood: return "output_flood";
    case EventKind::kOutputAudit: return "output_audit";
    case EventKind::kProtocolError: return "protocol_error";
    case EventKind::kAuthFailures: return "auth_failures";
    case EventKind::kSigkillNeeded: return "sigkill_needed";
    case EventKind::kTenantQuarantined: return "tenant_quarantined";
    case EventKind::kTenantReleased: return "tenant_released";
    case EventKind::kLockdown: return "lockdown";
    case EventKind::kAdminAction: return "admin_action";
  }
  return "admin_action";
}

std::optional<EventKind> ParseEventKind(std::string_view name) {
  for (EventKind k : kAllEventKinds) {
    if (ToString(k) == name) return k;
  }
  return std::nullopt;
}

std::string EventKindNames() {
  std::string out;
  for (EventKind k : kAllEventKinds) {
    if (!out.empty()) out += ", ";
    out += ToString(k);
  }
  return out;
}

nlohmann::json EventJson(const store::EventRow& r) {
  auto opt = [](const std::optional<std::string>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return {{"id", r.id},
          {"at", store::FormatTimeMs(r.at_ms, true)},
          {"kind", r.kind},
          {"tenant", r.tenant},
          {"key_id", r.key_id},
          {"execution_id", opt(r.execution_id)},
          {"session_id", opt(r.session_id)},
          {"client_addr", r.client_addr},
          {"detail", r.detail}};
}

store::EventRow SecurityEvents::Record(const SecurityEvent& e) {
  store::EventRow row;
  row.at_ms = store::NowMs();
  row.kind = std::string(ToString(e.kind));
  row.tenant = e.tenant;
  row.key_id = e.key_id;
  row.execution_id = e.execution_id;
  row.session_id = e.session_id;
  row.client_addr = e.client_addr;
  row.detail = e.detail;
  if (store_ != nullptr) {
    auto id = store_->RecordEvent(row);
    if (id.ok()) {
      row.id = *id;
    } else {
      KILN_LOG_ERROR("audit log: security event: {}", id.error().ToString());
    }
  }
  if (metrics_ != nullptr) metrics_->RecordSecurityEvent(row.kind);
  KILN_LOG_WARN("security event id={} kind={} tenant={} key={} execution={} session={} peer={}: {}",
                row.id, row.kind, row.tenant.empty() ? "-" : row.tenant,
                row.key_id.empty() ? "-" : row.key_id, row.execution_id.value_or("-"),
                row.session_id.value_or("-"), row.client_addr.empty() ? "-" : row.client_addr,
                row.detail);
  // Called without the lock: a listener may record an event of its own (a
  // quarantine rule's tenant_quarantined).
  std::vector<Listener> listeners;
  {
    std::lock_guard<std::mutex> lock(listeners_mu_);
    for (const auto& [handle, listener] : listeners_) listeners.push_back(listener);
  }
  for (const auto& listener : listeners) listener(row);
  return row;
}

void SecurityEvents::FromResult(const std::string& tenant, const std::string& key_id,
                                const std::string& peer, const std::string& execution_id,
                                const std::optional<std::string>& session_id,
                                const supervisor::ExecutionResult& result) {
  using supervisor::Outcome;
  const Outcome status = result.outcome;
  const std::string& reason = result.reason;
  auto event = [&](EventKind kind, std::string detail) {
    SecurityEvent e;
    e.kind = kind;
    e.tenant = tenant;
    e.key_id = key_id;
    e.execution_id = execution_id;
    e.session_id = session_id;
    e.client_addr = peer;
    e.detail = std::move(detail);
    Record(e);
  };
  if (result.signal == SIGSYS)
    event(EventKind::kSeccompKill, "killed by seccomp (SIGSYS): " + reason);
  if (result.policy_violation) {
    event(EventKind::kImportViolation, "import policy: " + result.policy_violation->message);
  }
  if (const uint64_t hits = result.pids_limit_hits; hits > 0) {
    event(EventKind::kPidsLimit,
          std::to_string(hits) + " forks refused at the pids limit (a fork or thread bomb?)");
  }
  if (status == Outcome::kOutputLimit) event(EventKind::kOutputFlood, reason);
  if (status == Outcome::kProtocolError) event(EventKind::kProtocolError, reason);
  if (status == Outcome::kTimeout && result.session_state == "lost") {
    event(EventKind::kSigkillNeeded, reason);
  }
  int in_a_row = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status == Outcome::kMemoryLimit) {
      in_a_row = ++memory_kills_[tenant];
      if (in_a_row >= thresholds_.memory_kills_in_a_row) memory_kills_.erase(tenant);
    } else {
      memory_kills_.erase(tenant);
    }
  }
  if (in_a_row >= thresholds_.memory_kills_in_a_row) {
    event(EventKind::kMemoryKills,
          std::to_string(in_a_row) + " executions in a row killed at their memory limit");
  }
}

void SecurityEvents::AuthFailure(const std::string& peer) {
  const int64_t now = store::NowMs();
  int count = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auth_failures_.size() >= kMaxTrackedPeers && auth_failures_.count(peer) == 0) {
      // Bounded: forget the windows that are over.
      for (auto it = auth_failures_.begin(); it != auth_failures_.end();) {
        it = now - it->second.window_start_ms > thresholds_.auth_window_ms
                 ? auth_failures_.erase(it)
                 : std::next(it);
      }
      if (auth_failures_.size() >= kMaxTrackedPeers) return;
    }
    Failures& f = auth_failures_[peer];
    if (now - f.window_start_ms > thresholds_.auth_window_ms) f = Failures{now, 0, false};
    ++f.count;
    if (f.count < thresholds_.auth_failures || f.reported) return;
    f.reported = true;
    count = f.count;
  }
  SecurityEvent e;
  e.kind = EventKind::kAuthFailures;
  e.client_addr = peer;
  e.detail = std::to_string(count) + " requests without a valid API key from " + peer + " within " +
             fmt::format("{:g} s", static_cast<double>(thresholds_.auth_window_ms) / 1000);
  Record(e);
}

int SecurityEvents::Subscribe(Listener listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  const int handle = next_handle_++;
  listeners_.emplace(handle, std::move(listener));
  return handle;
}

void SecurityEvents::Unsubscribe(int handle) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(handle);
}

}  // namespace kiln::executions
