#include "executions/service.h"

#include <sys/socket.h>

#include <cstdlib>

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
                                         const nlohmann::json& j) {
  store::AuditFinish f;
  f.id = id;
  f.ended_ms = ended_ms;
  f.status = j.value("status", "internal_error");
  if (j.contains("exit_code") && j["exit_code"].is_number_integer())
    f.exit_code = j["exit_code"].get<int>();
  if (j.contains("signal") && j["signal"].is_number_integer()) f.signal = j["signal"].get<int>();
  f.duration_ms = j.value("duration_ms", 0.0);
  f.cpu_ms = j.value("cpu_ms", 0.0);
  f.peak_memory_bytes = j.value("peak_memory_bytes", uint64_t{0});
  f.stdout_bytes = j.value("stdout", std::string()).size();
  f.stderr_bytes = j.value("stderr", std::string()).size();
  f.stdout_truncated = j.value("stdout_truncated", false);
  f.stderr_truncated = j.value("stderr_truncated", false);
  if (j.contains("policy_violation")) f.policy_violation = j["policy_violation"].dump();
  f.reason = j.value("reason", "");
  return f;
}

Result<spawner::ExecResponse> SpawnerRunner::Run(const std::string& id,
                                                 const spawner::CancelToken& cancel) {
  exec_->id = id;
  return spawner_->Run(*exec_, &cancel, hangup_fd_, on_event_);
}

Result<spawner::ExecResponse> CellRunner::Run(const std::string& /*id*/,
                                              const spawner::CancelToken& cancel) {
  return channel_->Execute(code_, timeout_s_, on_event_, hangup_fd_, &cancel);
}

Outcome Service::Run(const Job& job, Runner& runner, spawner::CancelToken* cancel) {
  Outcome out;
  out.id = NewId();
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
  if (deps_.store != nullptr) {
    if (Status st = deps_.store->BeginExecution(audit); !st.ok()) {
      out.error = MakeError(Code::kInternal, "audit log: " + st.error().ToString());
      return out;
    }
  }

  std::optional<spawner::CancelToken> own;
  if (cancel == nullptr) cancel = &own.emplace();
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.insert(cancel);
  }
  auto set_active = [this] {
    if (deps_.metrics != nullptr && deps_.admission != nullptr)
      deps_.metrics->SetActive(deps_.admission->active());
  };
  set_active();
  out.ran = true;
  auto response = runner.Run(out.id, *cancel);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(cancel);
  }
  idle_.notify_all();
  if (permit) permit->Reset();
  set_active();

  store::AuditFinish f;
  if (!response.ok()) {
    f.id = out.id;
    f.ended_ms = store::NowMs();
    f.status = response.error().code == Code::kInvalidArgument ? "rejected" : "internal_error";
    f.reason = response.error().ToString();
    out.error = std::move(response).error();
  } else {
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
  // Profile and limits first: a request over a maximum is a 400, not a queue slot.
  auto profile = deps_.config->Find(exec.profile);
  if (!profile.ok()) {
    out.error = profile.error();  // kInvalidArgument, field "profile"
    return out;
  }
  auto builder = config::PolicyFor(**profile, exec.limits);
  if (!builder.ok()) {
    out.error = builder.error();
    return out;
  }
  // Paths only: the bytes are not copied on the request path; their total is
  // checked here against the policy's workspace, and again by the supervisor.
  uint64_t file_bytes = 0;
  for (const auto& [path, bytes] : exec.files) {
    builder->AddFileContent(path, std::string());
    file_bytes += bytes.size();
  }
  auto built = builder->Build();
  if (!built.ok()) {
    out.error = built.error();
    return out;
  }
  if (file_bytes > built->limits().workspace_bytes) {
    out.error =
        InvalidField("files", "files: the files (" + std::to_string(file_bytes) +
                                  " bytes) do not fit the workspace (" +
                                  std::to_string(built->limits().workspace_bytes) + " bytes)");
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
  SpawnerRunner runner(deps_.spawner, &exec, hangup_fd, on_event);
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
  for (auto* token : running_) token->Cancel();
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
