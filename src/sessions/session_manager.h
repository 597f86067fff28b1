// SessionManager: kiln's stateful sessions (docs/api.md, "Sessions").
//
// A session is one sandbox kept alive between cells by its own supervisor
// process (spawner::SessionChannel); variables, imports and workspace files
// persist. The manager owns every live session of this server: it enforces
// ownership (a session is visible to its tenant only: any other gets
// kNotFound, exactly as for an id that never existed), the caps (per tenant
// [tenants.*].max_sessions -> kResourceExhausted; all tenants
// [server].max_sessions -> kUnavailable), one operation at a time per session
// (a second concurrent cell or file operation is kAborted: HTTP 409, never
// queued), idle TTL and maximum lifetime (a reaper thread), and remembers why
// a session ended so that using it answers kGone (HTTP 410) with the reason.
//
// Each cell is one execution of the executions service (src/executions):
// admitted like a one-shot execution (global concurrency, the tenant's
// concurrency and rate), one audit row carrying the session id, counted.
//
// Thread-safe. Front-ends: the HTTP server and the MCP server (local mode).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "admission/admission.h"
#include "base/result.h"
#include "config/config.h"
#include "executions/service.h"
#include "spawner/spawner.h"

namespace kiln::sessions {

// Who is asking.
using Caller = executions::Caller;

// POST /v1/sessions, parsed.
struct SessionOptions {
  std::string profile;       // empty: the server's default profile
  config::LimitSpec limits;  // memory, cpus, timeout (the per-cell default), ...
  std::optional<double> idle_ttl_s;
  std::optional<double> max_lifetime_s;
  // The interpreter's environment for the session's life (validated by the
  // caller: server/request.h ParseEnv). A session with one starts cold.
  std::vector<std::pair<std::string, std::string>> env;
};

struct Deps {
  const config::Config* config = nullptr;
  spawner::Spawner* spawner = nullptr;
  executions::Service* executions = nullptr;  // runs the cells (admission, audit, metrics)
  // In a fleet (docs/adr/0020): session ids carry this node's id, and a call
  // for another node's session that node_gone says is gone answers 410
  // "node lost". Empty and unset on a single node.
  std::string node_id{};
  std::function<bool(std::string_view node)> node_gone{};
};

// A cell's outcome as the front-ends need it.
struct CellOutcome {
  std::optional<spawner::ExecResponse> response;  // the result (with session_state)
  std::optional<admission::Rejection> rejection;  // turned away: 429/503 with Retry-After
  std::string execution_id;
};

class SessionManager final {
 public:
  explicit SessionManager(Deps deps);
  ~SessionManager();  // ends every session (their sandboxes are killed)
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  // Starts the reaper thread (idle TTL, maximum lifetime, sandboxes that died).
  void Start();

  // Starts a session and waits until its sandbox is ready. Errors:
  // kInvalidArgument naming the field (profile, memory, timeout, idle_ttl,
  // ...), kResourceExhausted (the tenant's cap), kUnavailable (the server's
  // cap, or shutting down), kFailedPrecondition (the sandbox cannot start).
  Result<nlohmann::json> Create(const Caller& caller, const SessionOptions& options);
  // The session as JSON (docs/api.md). kNotFound / kGone.
  Result<nlohmann::json> Get(const Caller& caller, const std::string& id);
  // The caller's tenant's live sessions.
  nlohmann::json List(const Caller& caller);
  // Ends it (a running cell is killed). kNotFound / kGone.
  Status Delete(const Caller& caller, const std::string& id);

  // Sets the session to end `seconds` from now (its max_lifetime becomes its
  // age plus `seconds`): E2B's sandbox timeout (docs/e2b.md). At most the
  // max_lifetime it was created with (the sandbox's cpu budget was sized for
  // it): kInvalidArgument, field "timeout", beyond. kNotFound / kGone.
  Status SetLifetime(const Caller& caller, const std::string& id, double seconds);

  // Runs one cell. Errors: kNotFound, kGone, kAborted (a cell or file
  // operation is running), kInvalidArgument (timeout over the profile's
  // maximum). A cell that loses the session (hard kill) ends it: the result
  // says session_state "lost" and later calls get kGone. `hangup_fd`: the
  // client's socket; its hanging up interrupts the cell. `extra`: the cell's
  // context, reset_contexts, env or command (docs/protocol.md, "execute"),
  // validated by the caller; `code` is what the audit row keeps.
  Result<CellOutcome> Execute(const Caller& caller, const std::string& id, const std::string& code,
                              std::optional<double> timeout_s, const spawner::EventFn& on_event,
                              int hangup_fd,
                              const nlohmann::json& extra = nlohmann::json::object());
  // KeyboardInterrupt in the running cell. true when a cell was running.
  Result<bool> Interrupt(const Caller& caller, const std::string& id);

  // Files (paths as the API received them, percent-decoded). kInvalidArgument
  // for a bad path, kResourceExhausted over a cap (HTTP 413), kNotFound for
  // a missing file, kAborted while a cell runs.
  Status PutFile(const Caller& caller, const std::string& id, const std::string& path,
                 const std::string& bytes);
  Result<std::string> GetFile(const Caller& caller, const std::string& id, const std::string& path);
  Result<nlohmann::json> ListFiles(const Caller& caller, const std::string& id);
  Status DeleteFile(const Caller& caller, const std::string& id, const std::string& path,
                    bool recursive = false);
  // E2B's files.makeDir and files.rename (kAlreadyExists: the name exists).
  Status MakeDir(const Caller& caller, const std::string& id, const std::string& path);
  Status MoveFile(const Caller& caller, const std::string& id, const std::string& from,
                  const std::string& to);

  // Ends every session of the tenant (a quarantine) or every session (a
  // lockdown), with the reason later calls get (410). Returns how many.
  int EndTenant(const std::string& tenant, const std::string& reason);
  int EndAll(const std::string& reason);
  // {tenant: live sessions} (GET /v1/admin/tenants).
  std::map<std::string, int> LiveByTenant() const;

  // Shutdown: refuse new sessions and cells, cancel running cells, end all.
  void Shutdown();
  size_t live() const;

 private:
  struct Session;
  Result<std::shared_ptr<Session>> Find(const Caller& caller, const std::string& id);
  // Marks the session busy (kAborted if it already is) and takes its channel.
  Result<std::unique_lock<std::mutex>> Claim(Session& s);
  void Release(Session& s);
  template <typename F>
  auto WithOp(Session& s, F&& f) -> decltype(f());
  void End(const std::shared_ptr<Session>& s, const std::string& reason);
  void ReapLoop();
  void Bury(const std::string& id, const std::string& tenant, const std::string& reason);

  Deps deps_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  struct Tombstone {
    std::string tenant;
    std::string reason;
    int64_t at_ms = 0;
  };
  std::map<std::string, Tombstone> tombstones_;
  std::map<std::string, int> starting_;  // per tenant, sessions being created
  int starting_total_ = 0;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace kiln::sessions
