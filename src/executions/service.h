// kiln::executions: the one place where an execution is admitted, audited,
// counted, run and logged, whatever asked for it: a one-shot execution
// (POST /v1/execute, POST /execute) or a session's cell (POST
// /v1/sessions/{id}/execute, and MCP's run_python through the sessions).
//
//   front-end -> Service::Run(job, runner)
//                  admission (429/503 are a Rejection, audited "rejected", counted)
//                  audit row "running"
//                  runner.Run(id, cancel, events)  <- the seam: a Spawner job, a
//                                          session's channel, or a test's fake;
//                                          its events pass the output filter
//                  the result and its files pass the output filter; its hits
//                  are recorded (docs/adr/0015)
//                  audit row finished (the result's status, or "internal_error" /
//                  "rejected" when the runner failed), metrics, one log line
//
// The output audit is here because everything a sandbox sends back passes
// here: results, streamed events (SSE, MCP's progress), returned files, and
// (FilterDownload) the files a session's client downloads.
//
// The service sits below sessions, MCP and the HTTP server: they call it, it
// calls none of them. It knows every running execution's cancel token, so a
// shutdown reaches them all (Drain).
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "admission/admission.h"
#include "base/result.h"
#include "config/config.h"
#include "executions/output_filter.h"
#include "executions/security_events.h"
#include "metrics/metrics.h"
#include "spawner/spawner.h"
#include "store/store.h"

namespace kiln::executions {

// Who is asking.
struct Caller {
  std::string tenant;
  std::string key_id;
  std::string peer;  // client address, for the audit log
};

// One execution as admission, the audit log and the logs see it.
struct Job {
  Caller caller;
  std::string profile;
  std::optional<std::string> session_id;  // a session's cell
  std::string code;                       // audited (or only its hash: Deps::store_code)
  int hangup_fd = -1;                     // the client's socket: hanging up while queued gives up
  std::string request_id;                 // for the log line (one-shots)
  spawner::EventFn on_event;              // streamed events (after the output filter)
};

// What actually runs the code: the seam of the service (fakes in tests).
class Runner {
 public:
  virtual ~Runner() = default;
  // Runs execution `id` to its end. `cancel` firing kills it (the result
  // then says "cancelled"). An error: the call failed (nothing ran: a bad
  // request, kInvalidArgument; or the sandbox's process was lost).
  // `on_event` (maybe empty): where its streamed events go.
  virtual Result<spawner::ExecResponse> Run(const std::string& id,
                                            const spawner::CancelToken& cancel,
                                            const spawner::EventFn& on_event) = 0;
};

struct Outcome {
  std::string id;  // the execution's (audit row, logs, the response's "id")
  std::optional<spawner::ExecResponse> response;
  std::optional<admission::Rejection> rejection;  // turned away: 429/503 with Retry-After
  // Refused before running, the audit log failed (before the run: a
  // rejection's row; beside it: the "running" row, which cancels the run),
  // or the runner's.
  std::optional<Error> error;
  bool ran = false;  // the runner was called: `error` is then the runner's or the audit log's
};

struct Deps {
  store::Store* store = nullptr;                        // optional: no audit rows
  admission::AdmissionController* admission = nullptr;  // optional: not admitted
  metrics::Metrics* metrics = nullptr;                  // optional
  SecurityEvents* events = nullptr;                     // optional: what results show
  bool store_code = true;                               // server.store_code
  // The profiles (their output audit; RunOneShot's limits). None: no filter.
  const config::Config* config = nullptr;
  spawner::Spawner* spawner = nullptr;
};

class Service final {
 public:
  // Compiles each profile's output filter.
  explicit Service(Deps deps);
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // One execution: admission, the audit row, `runner`, metrics, the log
  // line. `cancel`: the token that kills it (a session's, which also ends
  // its sandbox); none: the service's own for this execution.
  Outcome Run(const Job& job, Runner& runner, spawner::CancelToken* cancel = nullptr);

  // A one-shot execution: its profile and limits are checked first (a
  // request over a maximum is a 400, not a queue slot), then Run with the
  // spawner. Sets exec.id.
  Outcome RunOneShot(spawner::ExecRequest& exec, const Caller& caller, int hangup_fd,
                     const spawner::EventFn& on_event, const std::string& request_id);

  // Shutdown: admission turns everything away (queued requests fail with
  // 503), running executions get `grace`, then are cancelled (their
  // sandboxes are killed; their rows say "cancelled"). True when they all
  // ended within the grace.
  bool Drain(std::chrono::milliseconds grace);
  // Cancels every running execution.
  void CancelRunning();
  // Cancels the tenant's running executions (a quarantine).
  void CancelTenant(const std::string& tenant);
  // Lockdown (docs/api.md, "Operator controls"): with a reason, every new
  // execution is refused (kUnavailable, api code "lockdown"); nullopt lifts it.
  // Running ones are the caller's to cancel.
  void SetLockdown(std::optional<std::string> reason);
  std::optional<std::string> lockdown() const;
  // The error a refused execution or session gets during a lockdown.
  static Error LockdownError(const std::string& reason);
  // Waits until none runs, for at most `timeout`. True if none does.
  bool WaitIdle(std::chrono::milliseconds timeout);
  size_t running() const;

  // A file a session's client downloads, through the profile's output
  // filter; hits are recorded with the session's id. A block hit:
  // kPermissionDenied, api code "output_blocked" (HTTP 403).
  Result<std::string> FilterDownload(const Caller& caller, const std::string& profile,
                                     const std::string& session_id, const std::string& path,
                                     std::string bytes);

 private:
  // The profile's filter: nullptr when its audit is off (or no config); an
  // error when it could not be compiled (its executions then fail closed).
  Result<const OutputFilter*> FilterFor(const std::string& profile) const;
  void RecordHits(const Caller& caller, const std::string& profile,
                  const std::optional<std::string>& execution_id,
                  const std::optional<std::string>& session_id, const HitSet& hits,
                  const std::string& key_id, const std::string& peer);

  const Deps deps_;
  std::map<std::string, std::unique_ptr<const OutputFilter>> filters_;
  std::map<std::string, Error> filter_errors_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::map<spawner::CancelToken*, std::string> running_;  // executions in flight -> tenant
  std::optional<std::string> lockdown_;                   // guarded by mu_
};

// The Runner of one-shot executions: a job of the spawner.
class SpawnerRunner final : public Runner {
 public:
  // All outlive the runner.
  SpawnerRunner(spawner::Spawner* spawner, spawner::ExecPlan* plan, int hangup_fd)
      : spawner_(spawner), plan_(plan), hangup_fd_(hangup_fd) {}
  Result<spawner::ExecResponse> Run(const std::string& id, const spawner::CancelToken& cancel,
                                    const spawner::EventFn& on_event) override;

 private:
  spawner::Spawner* spawner_;
  spawner::ExecPlan* plan_;  // moved into the spawner's job when it runs
  int hangup_fd_;
};

// The Runner of a session's cell: its supervisor's channel.
class CellRunner final : public Runner {
 public:
  // All outlive the runner.
  CellRunner(spawner::SessionChannel* channel, const std::string& code, double timeout_s,
             int hangup_fd, const nlohmann::json* extra = nullptr)
      : channel_(channel),
        code_(code),
        timeout_s_(timeout_s),
        hangup_fd_(hangup_fd),
        extra_(extra) {}
  Result<spawner::ExecResponse> Run(const std::string& id, const spawner::CancelToken& cancel,
                                    const spawner::EventFn& on_event) override;

 private:
  spawner::SessionChannel* channel_;
  const std::string& code_;
  double timeout_s_;
  int hangup_fd_;
  const nlohmann::json* extra_;  // the cell's context, env or command (SessionChannel::Execute)
};

// 32 hex digits from a CSPRNG: execution and session ids.
std::string NewId();

// A request admission turned away is one audit row too, status "rejected".
void AuditRejected(store::Store* store, const store::AuditStart& start, const std::string& reason);

// The audit row's ending from a result.
store::AuditFinish AuditFinishFromResult(const std::string& id, int64_t ended_ms,
                                         const supervisor::ExecutionResult& result);

// A result as the API's JSON (docs/api.md): supervisor::ToJson and the
// output audit's report. The one renderer, called only at the edges (the
// HTTP handlers, MCP); the returned files are the edge's to render.
nlohmann::json ResultJson(const spawner::ExecResponse& response);

}  // namespace kiln::executions
