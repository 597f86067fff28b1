#include "sessions/session_manager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/log.h"
#include "fleet/node_id.h"
#include "store/api_key.h"
#include "store/time_format.h"

namespace kiln::sessions {
namespace {

using Clock = std::chrono::steady_clock;
using executions::NewId;
using store::NowMs;

constexpr size_t kMaxTombstones = 10000;
constexpr int64_t kTombstoneMs = 24LL * 3600 * 1000;

// An error of a file operation as the files API names it (docs/api.md): too
// big is about the body; a bad, clashing or missing path is about the path.
Error FileError(Error e) {
  if (e.code == Code::kResourceExhausted) return WithApiCode(std::move(e), "too_large", "body");
  if (e.code == Code::kInvalidArgument) return WithApiCode(std::move(e), "invalid_value", "path");
  if (e.code == Code::kFailedPrecondition) return WithApiCode(std::move(e), "conflict", "path");
  return e;
}

template <typename T>
Result<T> FileResult(Result<T> r) {
  if (r.ok()) return r;
  return FileError(std::move(r).error());
}

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

struct SessionManager::Session {
  std::string id;
  std::string tenant;
  std::string key_id;
  std::string profile;
  double default_timeout_s = 30;
  double max_timeout_s = 30;
  double idle_ttl_s = 600;
  double max_lifetime_s = 3600;
  double lifetime_cap_s = 3600;  // max_lifetime at creation: SetLifetime's bound
  int64_t created_ms = 0;
  nlohmann::json limits;
  bool pooled = false;  // its sandbox came from the warm pool (preloads imported)
  std::unique_ptr<spawner::SessionChannel> channel;
  spawner::CancelToken cancel;  // kills the running cell (delete, shutdown, lifetime)

  std::mutex op_mu;  // one cell or file operation at a time
  // Guarded by the manager's mu_.
  bool busy = false;
  bool ended = false;
  int64_t last_used_ms = 0;
  int64_t executions = 0;
};

SessionManager::SessionManager(Deps deps) : deps_(deps) {}

SessionManager::~SessionManager() { Shutdown(); }

void SessionManager::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!reaper_.joinable() && !stopping_) reaper_ = std::thread([this] { ReapLoop(); });
}

size_t SessionManager::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

Result<nlohmann::json> SessionManager::Create(const Caller& caller, const SessionOptions& options) {
  const config::Config& config = *deps_.config;
  const std::string profile_name =
      options.profile.empty() ? config.server.default_profile : options.profile;
  auto profile = config.Find(profile_name);
  if (!profile.ok()) return profile.error();  // kInvalidArgument, field "profile"
  if (deps_.executions != nullptr) {
    if (auto reason = deps_.executions->lockdown()) {
      return executions::Service::LockdownError(*reason);
    }
  }
  // Decided once: the session's policy and whether a pooled sandbox fits
  // travel to its supervisor as is (spawner::SessionPlan).
  spawner::SessionRequest req;
  req.profile = profile_name;
  req.limits = options.limits;
  req.env = options.env;
  KILN_ASSIGN_OR_RETURN(spawner::SessionPlan plan, deps_.spawner != nullptr
                                                       ? deps_.spawner->Plan(req)
                                                       : spawner::PlanSession(config, {}, req));
  const policy::SandboxPolicy& policy = *plan.policy;
  const double idle_cap = config.server.session_idle_ttl_s;
  const double life_cap = config.server.session_max_lifetime_s;
  if (options.idle_ttl_s && (*options.idle_ttl_s <= 0 || *options.idle_ttl_s > idle_cap)) {
    return InvalidField("idle_ttl",
                        "idle_ttl: must be more than 0 and at most " + Fmt(idle_cap) + " s");
  }
  if (options.max_lifetime_s &&
      (*options.max_lifetime_s <= 0 || *options.max_lifetime_s > life_cap)) {
    return InvalidField("max_lifetime",
                        "max_lifetime: must be more than 0 and at most " + Fmt(life_cap) + " s");
  }
  // The profile's maximum timeout bounds every cell's timeout.
  config::LimitSpec at_max;
  at_max.timeout_s = (*profile)->max.timeout_s;
  double max_timeout = policy.limits().wall_timeout_s;
  if (at_max.timeout_s) max_timeout = std::max(max_timeout, *at_max.timeout_s);

  // Reserve a place under both caps before the (slow) start.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return MakeError(Code::kUnavailable, "the server is shutting down");
    int tenant_live = starting_[caller.tenant];
    for (const auto& [id, s] : sessions_) tenant_live += s->tenant == caller.tenant ? 1 : 0;
    const int tenant_cap = config.Tenant(caller.tenant).max_sessions;
    if (tenant_live >= tenant_cap) {
      return WithApiCode(
          MakeError(Code::kResourceExhausted,
                    "tenant '" + caller.tenant + "' has " + std::to_string(tenant_live) +
                        " live sessions, its maximum (delete one, or let one idle "
                        "out)"),
          "session_limit");
    }
    if (static_cast<int>(sessions_.size()) + starting_total_ >= config.server.max_sessions) {
      return MakeError(Code::kUnavailable, "the server has its maximum of " +
                                               std::to_string(config.server.max_sessions) +
                                               " live sessions");
    }
    ++starting_[caller.tenant];
    ++starting_total_;
  }
  auto release = [this, &caller] {
    std::lock_guard<std::mutex> lock(mu_);
    if (--starting_[caller.tenant] == 0) starting_.erase(caller.tenant);
    --starting_total_;
  };

  auto s = std::make_shared<Session>();
  s->id = deps_.node_id.empty() ? NewId() : fleet::SessionIdFor(deps_.node_id, NewId());
  s->tenant = caller.tenant;
  s->key_id = caller.key_id;
  s->profile = profile_name;
  s->default_timeout_s = policy.limits().wall_timeout_s;
  s->max_timeout_s = max_timeout;
  s->idle_ttl_s = options.idle_ttl_s.value_or(idle_cap);
  s->max_lifetime_s = options.max_lifetime_s.value_or(life_cap);
  s->lifetime_cap_s = s->max_lifetime_s;
  plan.id = s->id;
  plan.max_lifetime_s = s->max_lifetime_s;
  plan.interrupt_grace_s = config.server.interrupt_grace_s;
  plan.max_file_bytes = config.server.max_file_bytes;
  auto channel = deps_.spawner->StartSession(plan, &s->cancel);
  release();
  if (!channel.ok()) return std::move(channel).error();
  s->channel = std::move(*channel);
  s->limits = s->channel->ready().value("limits", nlohmann::json::object());
  s->pooled = s->channel->ready().value("pooled", false);
  s->created_ms = NowMs();
  s->last_used_ms = s->created_ms;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return MakeError(Code::kUnavailable, "the server is shutting down");
    sessions_[s->id] = s;
  }
  KILN_LOG_INFO("session id={} tenant={} profile={} started ({})", s->id, s->tenant, s->profile,
                s->pooled ? "pooled" : "cold");
  return Get(caller, s->id);
}

Result<std::shared_ptr<SessionManager::Session>> SessionManager::Find(const Caller& caller,
                                                                      const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = sessions_.find(id); it != sessions_.end() && it->second->tenant == caller.tenant) {
    if (!it->second->ended) return it->second;
  }
  if (auto it = tombstones_.find(id);
      it != tombstones_.end() && it->second.tenant == caller.tenant) {
    return MakeError(Code::kGone, "session " + id + " is gone: " + it->second.reason);
  }
  // Another node's (docs/adr/0020): gone with its node, or on a node the
  // router could not reach (not yet known lost: retry, never a hang).
  // (Any tenant's: the id alone says so, and says nothing else.)
  if (const std::string_view node = fleet::NodeOfSessionId(id);
      deps_.node_gone && !node.empty() && node != deps_.node_id) {
    if (deps_.node_gone(node))
      return MakeError(Code::kGone, "session " + id + " is gone: node lost");
    return MakeError(Code::kUnavailable, "session " + id + " is on node " + std::string(node) +
                                             ", which did not take this request; retry");
  }
  // Unknown and another tenant's look the same.
  return MakeError(Code::kNotFound, "no session " + id);
}

Result<nlohmann::json> SessionManager::Get(const Caller& caller, const std::string& id) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  nlohmann::json j;
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy = s->busy;
    j = {{"id", s->id},
         {"profile", s->profile},
         {"state", busy ? "busy" : "idle"},
         {"created_at", store::FormatTimeMs(s->created_ms, true)},
         {"last_used_at", store::FormatTimeMs(s->last_used_ms, true)},
         {"expires_at",
          store::FormatTimeMs(
              std::min<int64_t>(s->last_used_ms + static_cast<int64_t>(s->idle_ttl_s * 1000),
                                s->created_ms + static_cast<int64_t>(s->max_lifetime_s * 1000)),
              true)},
         {"executions", s->executions},
         {"idle_ttl", s->idle_ttl_s},
         {"max_lifetime", s->max_lifetime_s},
         {"timeout", s->default_timeout_s},
         {"limits", s->limits},
         {"pooled", s->pooled}};
  }
  // Memory in use: asked of the supervisor, unless a cell holds the channel.
  j["memory_bytes"] = nullptr;
  std::unique_lock<std::mutex> op(s->op_mu, std::defer_lock);
  if (!busy && op.try_lock() && s->channel) {
    auto stats = s->channel->Stats();
    if (stats.ok()) j["memory_bytes"] = stats->value("memory_bytes", nlohmann::json(nullptr));
    if (auto gone = s->channel->Gone()) {
      op.unlock();
      End(s, *gone);
      return MakeError(Code::kGone, "session " + id + " is gone: " + *gone);
    }
  }
  return j;
}

nlohmann::json SessionManager::List(const Caller& caller) {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) {
      if (s->tenant == caller.tenant && !s->ended) ids.push_back(id);
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& id : ids) {
    auto j = Get(caller, id);
    if (j.ok()) out.push_back(std::move(*j));
  }
  return {{"sessions", out}};
}

void SessionManager::Bury(const std::string& id, const std::string& tenant,
                          const std::string& reason) {
  // mu_ held.
  if (tombstones_.size() >= kMaxTombstones) {
    auto oldest = std::min_element(
        tombstones_.begin(), tombstones_.end(),
        [](const auto& a, const auto& b) { return a.second.at_ms < b.second.at_ms; });
    tombstones_.erase(oldest);
  }
  tombstones_[id] = Tombstone{tenant, reason, NowMs()};
}

void SessionManager::End(const std::shared_ptr<Session>& s, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->ended) return;
    s->ended = true;
    sessions_.erase(s->id);
    Bury(s->id, s->tenant, reason);
  }
  // A running cell is killed; its thread finishes with "cancelled". The
  // channel closes (and the supervisor kills the sandbox) when the last
  // holder of the session lets go: at once when it is idle.
  s->cancel.Cancel();
  KILN_LOG_INFO("session id={} tenant={} ended: {}", s->id, s->tenant, reason);
}

Status SessionManager::Delete(const Caller& caller, const std::string& id) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  End(s, "deleted by the client");
  return OkStatus();
}

Status SessionManager::SetLifetime(const Caller& caller, const std::string& id, double seconds) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  std::lock_guard<std::mutex> lock(mu_);
  const double age_s = static_cast<double>(NowMs() - s->created_ms) / 1000;
  const double lifetime = age_s + seconds;
  if (!(seconds > 0) || lifetime > s->lifetime_cap_s) {
    return InvalidField("timeout",
                        "timeout: must be more than 0 s and end at most " + Fmt(s->lifetime_cap_s) +
                            " s after the session started (it is " + Fmt(age_s) + " s old)");
  }
  s->max_lifetime_s = lifetime;
  return OkStatus();
}

Result<CellOutcome> SessionManager::Execute(const Caller& caller, const std::string& id,
                                            const std::string& code,
                                            std::optional<double> timeout_s,
                                            const spawner::EventFn& on_event, int hangup_fd,
                                            const nlohmann::json& extra) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  const double timeout = timeout_s.value_or(s->default_timeout_s);
  if (timeout <= 0 || timeout > s->max_timeout_s) {
    return InvalidField("timeout", "timeout: must be more than 0 and at most " +
                                       Fmt(s->max_timeout_s) + " s (the profile's maximum)");
  }
  KILN_ASSIGN_OR_RETURN(std::unique_lock<std::mutex> op, Claim(*s));
  if (!s->channel) {
    Release(*s);
    return MakeError(Code::kGone, "session " + id + " is gone");
  }
  executions::Job job;
  job.caller = caller;
  job.profile = s->profile;
  job.session_id = s->id;
  job.code = code;
  job.hangup_fd = hangup_fd;
  job.on_event = on_event;
  executions::CellRunner runner(s->channel.get(), code, timeout, hangup_fd, &extra);
  executions::Outcome ran = deps_.executions->Run(job, runner, &s->cancel);
  CellOutcome out;
  out.execution_id = ran.id;
  if (!ran.ran) {  // turned away, or the audit log failed: the session is as it was
    Release(*s);
    if (ran.error) return std::move(*ran.error);
    out.rejection = std::move(ran.rejection);
    return out;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++s->executions;
  }
  Release(*s);
  if (ran.error) {
    op.unlock();
    End(s, ran.error->message);
    return MakeError(Code::kGone, "session " + id + " is gone: " + ran.error->message);
  }
  spawner::ExecResponse& response = *ran.response;
  if (auto gone = s->channel->Gone(); gone || response.result.session_state == "lost") {
    const std::string reason = "the last cell ended it (" +
                               std::string(supervisor::ToString(response.result.outcome)) + ": " +
                               response.result.reason + ")";
    op.unlock();
    End(s, reason);
  }
  out.response = std::move(response);
  return out;
}

Result<bool> SessionManager::Interrupt(const Caller& caller, const std::string& id) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  bool busy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy = s->busy;
  }
  if (busy && s->channel) s->channel->Interrupt();
  return busy;
}

Result<std::unique_lock<std::mutex>> SessionManager::Claim(Session& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ended) return MakeError(Code::kGone, "session " + s.id + " is gone");
    if (s.busy) {
      return WithApiCode(MakeError(Code::kAborted,
                                   "a cell or file operation of this session is running; "
                                   "cells of one session run one at a time"),
                         "session_busy");
    }
    s.busy = true;
  }
  // A status check (GET, the reaper) may hold the channel for a moment.
  return std::unique_lock<std::mutex>(s.op_mu);
}

void SessionManager::Release(Session& s) {
  std::lock_guard<std::mutex> lock(mu_);
  s.busy = false;
  s.last_used_ms = NowMs();
}

template <typename F>
auto SessionManager::WithOp(Session& s, F&& f) -> decltype(f()) {
  KILN_ASSIGN_OR_RETURN(std::unique_lock<std::mutex> op, Claim(s));
  auto result = f();
  Release(s);
  return result;
}

Status SessionManager::PutFile(const Caller& caller, const std::string& id, const std::string& path,
                               const std::string& bytes) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  if (bytes.size() > deps_.config->server.max_file_bytes) {
    return FileError(MakeError(Code::kResourceExhausted,
                               "body: the file is over the " +
                                   std::to_string(deps_.config->server.max_file_bytes) +
                                   "-byte limit per file"));
  }
  return FileResult(WithOp(*s, [&]() -> Status {
    return s->channel ? s->channel->PutFile(path, bytes) : Status(MakeError(Code::kGone, "gone"));
  }));
}

Result<std::string> SessionManager::GetFile(const Caller& caller, const std::string& id,
                                            const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  KILN_ASSIGN_OR_RETURN(std::string bytes, FileResult(WithOp(*s, [&]() -> Result<std::string> {
                          if (!s->channel) return MakeError(Code::kGone, "gone");
                          return s->channel->GetFile(path);
                        })));
  // What leaves the sandbox passes the output audit (docs/adr/0015).
  if (deps_.executions == nullptr) return bytes;
  return deps_.executions->FilterDownload(caller, s->profile, s->id, path, std::move(bytes));
}

Result<nlohmann::json> SessionManager::ListFiles(const Caller& caller, const std::string& id) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  return WithOp(*s, [&]() -> Result<nlohmann::json> {
    if (!s->channel) return MakeError(Code::kGone, "gone");
    return s->channel->ListFiles();
  });
}

Status SessionManager::DeleteFile(const Caller& caller, const std::string& id,
                                  const std::string& path, bool recursive) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  return FileResult(WithOp(*s, [&]() -> Status {
    if (!s->channel) return MakeError(Code::kGone, "gone");
    return s->channel->DeleteFile(path, recursive);
  }));
}

Status SessionManager::MakeDir(const Caller& caller, const std::string& id,
                               const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  return FileResult(WithOp(*s, [&]() -> Status {
    if (!s->channel) return MakeError(Code::kGone, "gone");
    return s->channel->MakeDir(path);
  }));
}

Status SessionManager::MoveFile(const Caller& caller, const std::string& id,
                                const std::string& from, const std::string& to) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(caller, id));
  return FileResult(WithOp(*s, [&]() -> Status {
    if (!s->channel) return MakeError(Code::kGone, "gone");
    return s->channel->Move(from, to);
  }));
}

void SessionManager::ReapLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(500));
    if (stopping_) break;
    const int64_t now = NowMs();
    std::vector<std::pair<std::shared_ptr<Session>, std::string>> to_end;
    for (const auto& [id, s] : sessions_) {
      const int64_t age = now - s->created_ms;
      if (age > static_cast<int64_t>(s->max_lifetime_s * 1000)) {
        to_end.emplace_back(s, "reached its maximum lifetime of " + Fmt(s->max_lifetime_s) + " s");
      } else if (!s->busy && now - s->last_used_ms > static_cast<int64_t>(s->idle_ttl_s * 1000)) {
        to_end.emplace_back(s, "idle for longer than its idle_ttl of " + Fmt(s->idle_ttl_s) + " s");
      } else if (!s->busy) {
        to_end.emplace_back(s, std::string());  // check that its sandbox lives
      }
    }
    // Tombstones expire.
    for (auto it = tombstones_.begin(); it != tombstones_.end();) {
      it = now - it->second.at_ms > kTombstoneMs ? tombstones_.erase(it) : std::next(it);
    }
    lock.unlock();
    for (auto& [s, reason] : to_end) {
      if (!reason.empty()) {
        End(s, reason);
        continue;
      }
      std::unique_lock<std::mutex> op(s->op_mu, std::try_to_lock);
      if (!op.owns_lock() || !s->channel) continue;
      if (auto gone = s->channel->Gone()) {
        op.unlock();
        End(s, *gone);
      }
    }
    lock.lock();
  }
}

int SessionManager::EndTenant(const std::string& tenant, const std::string& reason) {
  std::vector<std::shared_ptr<Session>> ending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) {
      if (s->tenant == tenant) ending.push_back(s);
    }
  }
  for (const auto& s : ending) End(s, reason);
  return static_cast<int>(ending.size());
}

int SessionManager::EndAll(const std::string& reason) {
  std::vector<std::shared_ptr<Session>> ending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) ending.push_back(s);
  }
  for (const auto& s : ending) End(s, reason);
  return static_cast<int>(ending.size());
}

std::map<std::string, int> SessionManager::LiveByTenant() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int> out;
  for (const auto& [id, s] : sessions_) ++out[s->tenant];
  return out;
}

void SessionManager::Shutdown() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (const auto& [id, s] : sessions_) all.push_back(s);
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  for (const auto& s : all) End(s, "the server shut down");
  // Wait for cells still running (their sandboxes were killed) to finish.
  for (const auto& s : all) std::lock_guard<std::mutex> op(s->op_mu);
}

}  // namespace kiln::sessions
