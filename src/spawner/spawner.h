// The spawner: where every sandbox of the server is forked (docs/adr/0008,
// docs/architecture.md). A multithreaded process must not fork-and-configure,
// so `kiln serve` starts this single-threaded helper process (`kiln spawner`,
// with posix_spawn) and restarts it whenever it dies. For each execution the
// spawner forks a supervisor process (single-threaded, like `kiln run`),
// which builds the policy from the profile, runs the sandbox with
// RunSandboxed and writes the result back.
//
// Processes: kiln serve --posix_spawn--> spawner --fork--> supervisor --clone3--> sandbox
// Each one dies with its parent (PR_SET_PDEATHSIG), so a server killed with
// SIGKILL leaves no sandbox running; its empty cgroups are removed at the next
// start (CgroupManager::RemoveStale, from `kiln serve`).
//
// Files by process: client.cc is the server's side (this header's classes),
// spawner_main.cc the spawner's main, supervise_main.cc a supervisor's main,
// job_channel.cc the framing and encodings both ends of a job share.
//
// Channels: a SOCK_SEQPACKET control socket server->spawner carrying one job
// socket per execution (SCM_RIGHTS); on the job socket, one request frame and
// one response frame (docs/protocol.md section 5). Closing the server's end of
// a job socket cancels that execution.
#pragma once

#include <sys/types.h>

#include <atomic>
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

#include "base/result.h"
#include "base/unique_fd.h"
#include "config/config.h"
#include "policy/policy.h"
#include "supervisor/execution_result.h"
#include "supervisor/host.h"

namespace kiln::spawner {

// A one-shot execution as a front-end asks for it (the HTTP API, E2B, MCP);
// PlanExecution validates it once into an ExecPlan, which is what runs.
struct ExecRequest {
  std::string id;                   // the execution's id (audit, logs)
  std::string profile = "default";  // a profile of the server's config
  config::LimitSpec limits;         // what the request asked for (the profile caps it)
  std::string code;
  std::string filename = "<cell>";
  std::vector<std::pair<std::string, std::string>> files;  // relative path -> bytes
  std::optional<std::vector<std::string>> return_files;    // globs; empty list = all
  std::vector<std::pair<std::string, std::string>> env;    // validated by the caller
  bool stream = false;  // send output events while it runs (Run's on_event)
};

// What the server decided, once, for one execution (docs/protocol.md section
// 5): the policy built from the profile and the request (limits capped by
// the profile, input files as sealed memfds in it) and whether a pooled
// sandbox fits. It travels to the supervisor as is: the supervisor builds no
// policy and makes no pool decision of its own.
struct ExecPlan {
  std::string id;
  std::string profile;
  std::optional<policy::SandboxPolicy> policy;  // always set in a plan that runs
  bool pooled = false;  // a pooled sandbox of `profile` fits (zygote::PoolFits)
  std::string code;
  std::string filename = "<cell>";
  std::optional<std::vector<std::string>> return_files;  // globs; empty list = all
  std::vector<std::pair<std::string, std::string>> env;
  bool stream = false;
};

// At most this many input files per execution: each travels as a memfd.
inline constexpr size_t kMaxInputFiles = 512;

// Streaming: (event, data) as supervisor::EventSink describes.
using EventFn = std::function<void(std::string_view, const nlohmann::json&)>;

struct SessionRequest {
  std::string id;
  std::string profile = "default";
  config::LimitSpec limits;  // memory, cpus, cpu_time (per cell), ...
  std::vector<std::pair<std::string, std::string>> env;
  double max_lifetime_s = 3600;  // the RLIMIT_CPU backstop of the whole session
  double interrupt_grace_s = 2;
  uint64_t max_file_bytes = 64ULL << 20;
};

// A session's start, decided once (as ExecPlan).
struct SessionPlan {
  std::string id;
  std::string profile;
  std::optional<policy::SandboxPolicy> policy;
  bool pooled = false;
  std::vector<std::pair<std::string, std::string>> env;
  double max_lifetime_s = 3600;
  double interrupt_grace_s = 2;
  uint64_t max_file_bytes = 64ULL << 20;
};

// The pool keys: for each profile with a warm pool, the limits its pooled
// sandboxes were made with. Empty when the server runs no pool.
using PoolKeys = std::map<std::string, policy::Limits>;
PoolKeys PoolKeysOf(const config::Config& config);

// Validates a request once: its profile, its limits against the profile's
// maxima, its files (into sealed memfds), and the pool decision. Errors are
// kInvalidArgument naming the field. `request`'s file bytes are moved out.
Result<ExecPlan> PlanExecution(const config::Config& config, const PoolKeys& pool,
                               ExecRequest& request);
Result<SessionPlan> PlanSession(const config::Config& config, const PoolKeys& pool,
                                const SessionRequest& request);

// What came back, typed: the result as the supervisor made it (read back
// with supervisor::FromJson; returned files in result.returned_files), and
// what the output audit tells the client. Rendered to the API's JSON only
// at an edge (executions::ResultJson).
struct ExecResponse {
  supervisor::ExecutionResult result;
  // HitSet::ClientReport of the output audit (set by the executions
  // service); null when it has nothing to tell.
  nlohmann::json output_audit;
};

// Lets another thread cancel a Run: Cancel() wakes it (an eventfd).
class CancelToken final {
 public:
  CancelToken();
  void Cancel();
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

class FramedChannel;
// Fds that travel beside a frame on a job socket (SCM_RIGHTS), shared.
using SharedFds = std::vector<std::shared_ptr<const UniqueFd>>;

// The server's end of one session's supervisor (a kiln-supervise process that
// keeps one sandbox and runs its cells). Closing it (the destructor) ends the
// session: the supervisor kills the sandbox and exits.
//
// Execute and the file operations are one at a time (the caller serializes
// them); Interrupt may come from any thread at any time.
class SessionChannel final {
 public:
  ~SessionChannel();
  SessionChannel(const SessionChannel&) = delete;
  SessionChannel& operator=(const SessionChannel&) = delete;

  // One cell. The result has session_state; after "lost" the channel is
  // dead (Gone() says why). `hangup_fd`'s peer hanging up interrupts the
  // cell (the session stays); `cancel` firing kills the sandbox. `extra`:
  // the cell's context, reset_contexts, env or command (docs/protocol.md).
  Result<ExecResponse> Execute(const std::string& code, double timeout_s, const EventFn& on_event,
                               int hangup_fd, const CancelToken* cancel,
                               const nlohmann::json& extra = nlohmann::json::object());
  void Interrupt();
  Status PutFile(const std::string& path, const std::string& bytes);
  Result<std::string> GetFile(const std::string& path);
  Result<nlohmann::json> ListFiles();  // [{"path","size","directory"}]
  Status DeleteFile(const std::string& path, bool recursive = false);  // recursive: a full dir too
  Status MakeDir(const std::string& path);  // and its parents; kAlreadyExists
  Status Move(const std::string& from, const std::string& to);
  Result<nlohmann::json> Stats();  // {"memory_bytes": n | null}
  // Non-blocking, between operations: the reason, once the supervisor ended
  // the session on its own (its sandbox died) or is gone.
  std::optional<std::string> Gone();
  // What the supervisor said when the sandbox became ready.
  const nlohmann::json& ready() const { return ready_; }

 private:
  friend class Spawner;
  SessionChannel();
  // One request and its answer; `send` travels beside the request, and the
  // fds beside the answer (its "fds" member) go to `received`.
  Result<nlohmann::json> Call(const nlohmann::json& request, const SharedFds& send = {},
                              SharedFds* received = nullptr);
  std::unique_ptr<FramedChannel> channel_;
  std::mutex write_mu_;
  nlohmann::json ready_;
  std::optional<std::string> gone_;
};

class Spawner final {
 public:
  // Starts the spawner process (kiln's own binary run as `kiln spawner`, a
  // hidden command: posix_spawn, so the caller may have threads) and a thread
  // that restarts it, with backoff, whenever it dies. It parses
  // `config.text` itself and probes the host itself; `host` here decides
  // only whether executions may ask for a pooled sandbox.
  static Result<std::unique_ptr<Spawner>> Start(const config::Config& config,
                                                const supervisor::HostContext& host);
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Thread-safe; blocks until the execution ends. Errors: the request was
  // refused before anything ran (kInvalidArgument naming the field: unknown
  // profile, over a maximum, bad file path), the host cannot run it
  // (kFailedPrecondition), or the spawner/supervisor died (kInternal,
  // kUnavailable). A cancelled execution returns its result with status
  // "cancelled". `hangup_fd` (a client's socket, or -1): its peer hanging up
  // cancels too.
  Result<ExecResponse> Run(ExecPlan plan, const CancelToken* cancel, int hangup_fd = -1,
                           const EventFn& on_event = {});

  // The plans of this server (its configuration and its pool).
  Result<ExecPlan> Plan(ExecRequest& request) const {
    return PlanExecution(config_, pool_keys_, request);
  }
  Result<SessionPlan> Plan(const SessionRequest& request) const {
    return PlanSession(config_, pool_keys_, request);
  }

  // Starts a session's supervisor and sandbox; returns when the sandbox is
  // ready (its interpreter and preloads started). A session whose limits and
  // environment match its profile's pool takes a pooled sandbox (preloads
  // imported) and keeps it; ready()["pooled"] says which. Errors as Run's; a
  // sandbox that failed to start is kFailedPrecondition/kInternal with the
  // reason.
  Result<std::unique_ptr<SessionChannel>> StartSession(const SessionPlan& plan,
                                                       const CancelToken* cancel);

  // The warm pool in plain sight: {enabled, running, reason, profiles: {NAME:
  // {ready, refilling, in_use, target, zygote_ready, hits, cold_fallbacks,
  // refills, refill_ms_total, last_refill_ms, failures, zygote_starts}}}
  // (docs/api.md, GET /readyz). Counters restart with the spawner or the
  // pool process. kUnavailable when the spawner does not answer.
  Result<nlohmann::json> PoolStatus();

  pid_t pid() const { return pid_; }
  // Whether the spawner process runs (false while it is being restarted:
  // executions and sessions are then refused with kUnavailable).
  bool Alive() const;
  // How many times it died and was started again.
  int restarts() const { return restarts_; }

 private:
  Spawner() = default;
  // A job socket handed to the spawner; `pool_profile` non-empty: the
  // execution takes a pooled sandbox of that profile if one is ready (the
  // plan's decision). `generation`: which spawner took it.
  Result<UniqueFd> NewJob(const std::string& pool_profile, uint64_t* generation);
  Result<UniqueFd> SendJob(const std::string& tag, uint64_t* generation);
  // An execution's channel ended without an answer: kUnavailable (retry)
  // whatever died, the spawner or the execution's supervisor.
  Error Died(uint64_t generation, const std::string& what, const Error& e);
  Status Launch();  // with send_mu_ held
  void Watch();     // the restarting thread
  std::atomic<pid_t> pid_{-1};
  UniqueFd pidfd_;
  UniqueFd control_;
  std::mutex send_mu_;
  std::atomic<bool> up_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> restarts_{0};
  UniqueFd wake_;  // eventfd: the destructor stops the watcher
  std::thread watcher_;
  config::Config config_;  // the plans' profiles (read-only after Start)
  PoolKeys pool_keys_;     // empty: the spawner runs no warm pool
};

// `kiln spawner` (hidden): the spawner process. fd 3 is its control socket,
// fd 4 holds the configuration's text; `server` is the pid it dies with.
[[noreturn]] void RunSpawnerProcess(pid_t server);

// Encoding of the job channel (job_channel.cc), exposed for unit tests: the
// plan's frame, and in `fds` the open files that travel beside it (its
// input files; fds[i] is the frame's fd i).
Result<nlohmann::json> EncodePlan(const ExecPlan& p, SharedFds* fds);
Result<ExecPlan> DecodePlan(const nlohmann::json& j, SharedFds fds);
Result<nlohmann::json> EncodeSessionPlan(const SessionPlan& p, SharedFds* fds);
Result<SessionPlan> DecodeSessionPlan(const nlohmann::json& j, SharedFds fds);
// A result's frame (docs/protocol.md section 5): the result as
// supervisor::ToJson makes it, and in `fds` one sealed memfd with the
// returned files' bytes end to end (none when no file returns); the frame
// lists each file's path and size, in order. DecodeResult checks the memfd
// (sealed, its size the sum of the sizes) and reads each file from it once.
Result<nlohmann::json> EncodeResult(const supervisor::ExecutionResult& r, SharedFds* fds);
Result<ExecResponse> DecodeResult(const nlohmann::json& frame, const SharedFds& fds);
// How many fds a frame says travel beside it (its "fds" member).
Result<size_t> FdsOf(const nlohmann::json& j);

}  // namespace kiln::spawner
