#include "executions/service.h"

#include <re2/re2.h>
#include <sys/socket.h>

#include <cstdlib>
#include <future>
#include <system_error>

#include "base/log.h"
#include "store/api_key.h"
#include "store/time_format.h"

namespace kiln::executions {

std::string NewId() {
  auto raw = store::RandomBytes(16);
  if (!raw.ok()) std::abort();  // no CSPRNG: no id (or key) is safe
  return store::HexEncode(*raw);
}

void AuditRejected(store::Store* store, const store::AuditStart& start, const std::string& reason) {
  if (store == nullptr || !store->BeginExecution(start).ok()) return;
  store::AuditFinish f;
  f.id = start.id;
  f.ended_ms = store::NowMs();
  f.status = "rejected";
  f.reason = reason;
  (void)store->FinishExecution(f);
}

store::AuditFinish AuditFinishFromResult(const std::string& id, int64_t ended_ms,
                                         const supervisor::ExecutionResult& r) {
  store::AuditFinish f;
  f.id = id;
  f.ended_ms = ended_ms;
  f.status = std::string(supervisor::ToString(r.outcome));
  if (r.exit_code >= 0) f.exit_code = r.exit_code;
  if (r.signal > 0) f.signal = r.signal;
  f.duration_ms = r.duration_ms;
  f.cpu_ms = r.cpu_ms;
  f.peak_memory_bytes = r.peak_memory_bytes;
  f.stdout_bytes = r.stdout_data.size();
  f.stderr_bytes = r.stderr_data.size();
  f.stdout_truncated = r.stdout_truncated;
  f.stderr_truncated = r.stderr_truncated;
  if (r.policy_violation) {
    f.policy_violation = nlohmann::json{{"module", r.policy_violation->module},
                                        {"line", r.policy_violation->line},
                                        {"message", r.policy_violation->message}}
                             .dump();
  }
  f.reason = r.reason;
  return f;
}

nlohmann::json ResultJson(const spawner::ExecResponse& response) {
  nlohmann::json j = supervisor::ToJson(response.result, false);
  if (!response.output_audit.is_null()) j["output_audit"] = response.output_audit;
  return j;
}

Result<spawner::ExecResponse> SpawnerRunner::Run(const std::string& id,
                                                 const spawner::CancelToken& cancel,
                                                 const spawner::EventFn& on_event) {
  plan_->id = id;
  return spawner_->Run(std::move(*plan_), &cancel, hangup_fd_, on_event);
}

Result<spawner::ExecResponse> CellRunner::Run(const std::string& /*id*/,
                                              const spawner::CancelToken& cancel,
                                              const spawner::EventFn& on_event) {
  return channel_->Execute(code_, timeout_s_, on_event, hangup_fd_, &cancel,
                           extra_ != nullptr ? *extra_ : nlohmann::json::object());
}

namespace {

// One execution's streamed events through its profile's output filter:
// stdout and stderr chunk by chunk (a secret split across chunks is held
// back until it is whole), other events (display, result, error) whole, after
// the text before them. After a block hit nothing more is sent: the result
// ("done") says the output was withheld.
class FilteredEvents final {
 public:
  FilteredEvents(const OutputFilter* filter, const spawner::EventFn& down)
      : filter_(filter), down_(down), out_(filter), err_(filter) {}

  void operator()(std::string_view event, const nlohmann::json& data) {
    if (blocked_) return;
    if (event == "stdout" || event == "stderr") {
      StreamFilter& s = event == "stdout" ? out_ : err_;
      const auto text = data.find("text");
      std::string sent = s.Push(text != data.end() && text->is_string()
                                    ? std::string_view(text->get_ref<const std::string&>())
                                    : std::string_view());
      if (s.blocked()) {
        blocked_ = true;
        return;
      }
      if (!sent.empty()) down_(event, {{"text", std::move(sent)}});
      return;
    }
    Flush();
    if (blocked_) return;
    nlohmann::json copy = data;
    HitSet hits;
    filter_->FilterJson(&copy, std::string(event), &hits);
    if (hits.blocked()) {
      blocked_ = true;
      return;
    }
    down_(event, copy);
  }

  // What the streams still hold back.
  void Flush() {
    for (auto [name, s] : {std::pair<const char*, StreamFilter*>{"stdout", &out_},
                           std::pair<const char*, StreamFilter*>{"stderr", &err_}}) {
      if (blocked_) return;
      std::string sent = s->Flush();
      if (s->blocked()) {
        blocked_ = true;
        return;
      }
      if (!sent.empty()) down_(name, {{"text", std::move(sent)}});
    }
  }

 private:
  const OutputFilter* filter_;
  const spawner::EventFn& down_;
  StreamFilter out_, err_;
  bool blocked_ = false;
};

}  // namespace

Service::Service(Deps deps) : deps_(deps) {
  if (deps_.config == nullptr) return;
  for (const auto& [name, profile] : deps_.config->profiles) {
    // Any secret the server knows is a detector too: the webhooks' keys.
    config::OutputAuditSpec spec = profile.output_audit;
    for (const auto& w : deps_.config->events.webhooks) {
      spec.detectors.push_back({"server_secret", RE2::QuoteMeta(w.secret), w.secret.size(),
                                config::AuditAction::kRedact});
    }
    auto compiled = OutputFilter::Compile(spec);
    if (!compiled.ok()) {
      KILN_LOG_ERROR("profile {}: {}", name, compiled.error().message);
      filter_errors_.emplace(name, compiled.error());
      continue;
    }
    filters_.emplace(name, std::move(*compiled));
  }
}

Result<const OutputFilter*> Service::FilterFor(const std::string& profile) const {
  if (auto it = filter_errors_.find(profile); it != filter_errors_.end()) {
    return Internal("the output audit of profile '" + profile +
                    "' could not be compiled: " + it->second.message);
  }
  auto it = filters_.find(profile);
  return it == filters_.end() ? nullptr : it->second.get();
}

void Service::RecordHits(const Caller& caller, const std::string& profile,
                         const std::optional<std::string>& execution_id,
                         const std::optional<std::string>& session_id, const HitSet& hits,
                         const std::string& key_id, const std::string& peer) {
  if (hits.empty()) return;
  std::string summary;
  std::vector<store::OutputHitRow> rows;
  const int64_t now = store::NowMs();
  for (const OutputHit& h : hits.hits()) {
    store::OutputHitRow r;
    r.at_ms = now;
    r.execution_id = execution_id;
    r.session_id = session_id;
    r.tenant = caller.tenant;
    r.profile = profile;
    r.detector = h.detector;
    r.location = h.where;
    r.action = std::string(config::ToString(h.action));
    r.count = h.count;
    if (deps_.metrics != nullptr) deps_.metrics->RecordOutputHit(r.detector, r.action, h.count);
    // Never the text: the detector and where.
    KILN_LOG_WARN("output audit: {}={} tenant={} detector={} where={} action={} count={}",
                  execution_id ? "execution" : "session",
                  execution_id ? *execution_id : session_id.value_or("-"), caller.tenant,
                  r.detector, r.location, r.action, r.count);
    if (summary.size() < 400) {
      summary +=
          (summary.empty() ? "" : ", ") + r.detector + " in " + r.location + " (" + r.action + ")";
    }
    rows.push_back(std::move(r));
  }
  if (deps_.events != nullptr) {
    SecurityEvent e;
    e.kind = EventKind::kOutputAudit;
    e.tenant = caller.tenant;
    e.key_id = key_id;
    e.execution_id = execution_id;
    e.session_id = session_id;
    e.client_addr = peer;
    e.detail = "output audit: " + summary;
    deps_.events->Record(e);
  }
  if (deps_.store != nullptr) {
    if (Status st = deps_.store->RecordOutputHits(rows); !st.ok()) {
      KILN_LOG_ERROR("audit log: output hits: {}", st.error().ToString());
    }
  }
}

Result<std::string> Service::FilterDownload(const Caller& caller, const std::string& profile,
                                            const std::string& session_id, const std::string& path,
                                            std::string bytes) {
  KILN_ASSIGN_OR_RETURN(const OutputFilter* filter, FilterFor(profile));
  if (filter == nullptr || !filter->Matches(bytes)) return bytes;
  HitSet hits;
  std::string filtered = filter->Filter(bytes, "files/" + path, &hits);
  RecordHits(caller, profile, std::nullopt, session_id, hits, caller.key_id, caller.peer);
  if (hits.blocked()) {
    return WithApiCode(
        MakeError(Code::kPermissionDenied,
                  "the file was withheld by the output audit of profile '" + profile + "'"),
        "output_blocked", "path");
  }
  return filtered;
}

Outcome Service::Run(const Job& job, Runner& runner, spawner::CancelToken* cancel) {
  Outcome out;
  out.id = NewId();
  // The profile's output filter, before anything runs: one that could not be
  // compiled fails its executions (closed), never lets output through.
  auto filter = FilterFor(job.profile);
  if (!filter.ok()) {
    out.error = filter.error();
    return out;
  }
  store::AuditStart audit;
  audit.id = out.id;
  audit.tenant = job.caller.tenant;
  audit.key_id = job.caller.key_id;
  audit.profile = job.profile;
  audit.session_id = job.session_id;
  audit.started_ms = store::NowMs();
  audit.code = job.code;
  audit.store_code = deps_.store_code;
  audit.client_addr = job.caller.peer;
  // A lockdown refuses every new execution (docs/api.md, "Operator controls"):
  // audited "rejected" and counted as admission's refusals are.
  if (auto reason = lockdown()) {
    if (deps_.metrics != nullptr) deps_.metrics->RecordRejection("lockdown");
    AuditRejected(deps_.store, audit, "lockdown: " + *reason);
    out.error = LockdownError(*reason);
    return out;
  }

  std::optional<admission::Permit> permit;
  if (deps_.admission != nullptr) {
    const int hangup_fd = job.hangup_fd;
    auto acquired = deps_.admission->Acquire(job.caller.tenant, [hangup_fd] {
      if (hangup_fd < 0) return false;
      char c;
      return ::recv(hangup_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;  // hung up while queued
    });
    if (!acquired.ok()) {
      out.rejection = std::move(acquired).error();
      if (deps_.metrics != nullptr) deps_.metrics->RecordRejection(out.rejection->reason);
      // Rejected requests are recorded too: one row, status "rejected".
      AuditRejected(deps_.store, audit, out.rejection->reason);
      return out;
    }
    permit.emplace(std::move(acquired).value());
  }
  std::optional<spawner::CancelToken> own;
  if (cancel == nullptr) cancel = &own.emplace();
  // The "running" row is written while the sandbox is handed the job, not
  // before: one store round trip (and its commit) off the request's path
  // (docs/adr/0020). Its failure still fails the execution closed: the
  // token cancels the run at once, and the answer is the store's error,
  // never the program's result. At most that round trip of a program can run
  // before the failure is known, with no row; a row that was begun is always
  // finished (or marked interrupted by the fleet) before Run returns.
  std::future<Status> begun;
  if (deps_.store != nullptr) {
    auto begin = [store = deps_.store, &audit, cancel] {
      Status st = store->BeginExecution(audit);
      if (!st.ok()) cancel->Cancel();
      return st;
    };
    try {
      begun = std::async(std::launch::async, begin);
    } catch (const std::system_error&) {  // no thread to spare: before the run, as it was
      std::promise<Status> now;
      now.set_value(begin());
      begun = now.get_future();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.emplace(cancel, job.caller.tenant);
  }
  auto set_active = [this] {
    if (deps_.metrics != nullptr && deps_.admission != nullptr)
      deps_.metrics->SetActive(deps_.admission->active());
  };
  set_active();
  out.ran = true;
  std::optional<FilteredEvents> filtered;
  spawner::EventFn events = job.on_event;
  if (job.on_event && *filter != nullptr) {
    filtered.emplace(*filter, job.on_event);
    events = [&filtered](std::string_view event, const nlohmann::json& data) {
      (*filtered)(event, data);
    };
  }
  auto response = runner.Run(out.id, *cancel, events);
  if (filtered) filtered->Flush();
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(cancel);
  }
  idle_.notify_all();
  if (permit) permit->Reset();
  set_active();
  if (begun.valid()) {
    if (Status st = begun.get(); !st.ok()) {
      KILN_LOG_ERROR("audit log: execution {} was cancelled: {}", out.id, st.error().ToString());
      out.response.reset();
      out.error = MakeError(Code::kInternal, "audit log: " + st.error().ToString());
      return out;
    }
  }

  store::AuditFinish f;
  if (!response.ok()) {
    f.id = out.id;
    f.ended_ms = store::NowMs();
    f.status = response.error().code == Code::kInvalidArgument ? "rejected" : "internal_error";
    f.reason = response.error().ToString();
    out.error = std::move(response).error();
  } else {
    if (*filter != nullptr) {
      HitSet hits;
      (*filter)->FilterResult(&response->result, &hits);
      response->output_audit = hits.ClientReport();
      RecordHits(job.caller, job.profile, out.id, job.session_id, hits, job.caller.key_id,
                 job.caller.peer);
    }
    f = AuditFinishFromResult(out.id, store::NowMs(), response->result);
    if (deps_.metrics != nullptr)
      deps_.metrics->RecordExecution(f.status, job.profile, f.duration_ms / 1e3);
    out.response = std::move(*response);
  }
  // Committed before the reply is sent: a crash after this loses nothing.
  if (deps_.store != nullptr) {
    if (Status st = deps_.store->FinishExecution(f); !st.ok()) {
      KILN_LOG_ERROR("audit log: {}", st.error().ToString());
    }
  }
  // What the result shows of the program's behaviour (docs/adr/0015).
  if (deps_.events != nullptr && out.response) {
    deps_.events->FromResult(job.caller.tenant, job.caller.key_id, job.caller.peer, out.id,
                             job.session_id, out.response->result);
  }
  if (job.session_id) {
    KILN_LOG_INFO("execution id={} session={} tenant={} profile={} status={} duration_ms={:.1f}",
                  out.id, *job.session_id, job.caller.tenant, job.profile, f.status, f.duration_ms);
  } else {
    KILN_LOG_INFO("execution id={} request={} tenant={} profile={} status={} duration_ms={:.1f}",
                  out.id, job.request_id, job.caller.tenant, job.profile, f.status, f.duration_ms);
  }
  return out;
}

Outcome Service::RunOneShot(spawner::ExecRequest& exec, const Caller& caller, int hangup_fd,
                            const spawner::EventFn& on_event, const std::string& request_id) {
  Outcome out;
  if (deps_.config == nullptr) {
    out.error = Internal("one-shot executions are off");
    return out;
  }
  // Decided once (spawner::ExecPlan): the profile, the policy with the
  // limits capped by it, the files as sealed memfds, and the pool decision,
  // which travel to the supervisor as is. First: a request over a maximum
  // is a 400 (naming the field), not a queue slot.
  auto plan = deps_.spawner != nullptr ? deps_.spawner->Plan(exec)
                                       : spawner::PlanExecution(*deps_.config, {}, exec);
  if (!plan.ok()) {
    out.error = plan.error();
    return out;
  }
  if (deps_.spawner == nullptr) {
    out.error = Internal("one-shot executions are off");
    return out;
  }
  Job job;
  job.caller = caller;
  job.profile = exec.profile;
  job.code = exec.code;
  job.hangup_fd = hangup_fd;
  job.request_id = request_id;
  job.on_event = on_event;
  SpawnerRunner runner(deps_.spawner, &*plan, hangup_fd);
  out = Run(job, runner);
  exec.id = out.id;
  return out;
}

bool Service::Drain(std::chrono::milliseconds grace) {
  if (deps_.admission != nullptr) deps_.admission->BeginShutdown();
  if (WaitIdle(grace)) return true;
  CancelRunning();
  return false;
}

void Service::CancelRunning() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [token, tenant] : running_) token->Cancel();
}

void Service::CancelTenant(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [token, t] : running_) {
    if (t == tenant) token->Cancel();
  }
}

void Service::SetLockdown(std::optional<std::string> reason) {
  std::lock_guard<std::mutex> lock(mu_);
  lockdown_ = std::move(reason);
}

std::optional<std::string> Service::lockdown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lockdown_;
}

Error Service::LockdownError(const std::string& reason) {
  return WithApiCode(MakeError(Code::kUnavailable, "the server is in lockdown: " + reason),
                     "lockdown");
}

bool Service::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, timeout, [this] { return running_.empty(); });
}

size_t Service::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_.size();
}

}  // namespace kiln::executions
