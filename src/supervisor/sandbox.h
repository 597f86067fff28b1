// Sandbox: one isolated process tree and the supervisor's side of it.
//
// A sandbox is launched (plan, clone3, uid maps, cgroup), becomes ready (the
// runtime said hello and the worker is in its cgroup), runs cells one at a
// time, and is finished (killed if alive, reaped, accounted, files collected,
// cgroup removed). A one-shot execution (RunSandboxed, `kiln run`, POST
// /v1/execute) is one cell marked `last`: the runtime exits after it, with the
// program's exit status. A session keeps the sandbox between cells.
//
// Runs in a supervisor process that may fork safely: the CLI (single-
// threaded) or a kiln-supervise process of the spawner (docs/adr/0008).
// Not thread-safe: one thread drives a sandbox. The sequence, and which side
// runs each step, is docs/setup-sequence.md.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "policy/policy.h"
#include "supervisor/execution_result.h"
#include "supervisor/host.h"

namespace kiln::supervisor {

struct Program {
  std::string filename;  // shown in tracebacks: "<string>", "<stdin>", "script.py"
  std::string source;
  // Extra environment for the interpreter (e.g. MPLCONFIGDIR for the font
  // cache build); names are validated by the caller.
  std::vector<std::pair<std::string, std::string>> env;
};

// A sandbox set up elsewhere (the warm pool, src/zygote): every layer in
// place, pid 1 in its cgroup before it forked the worker, the runtime's hello
// sent. Sandbox::Adopt drives it from there as Launch's after WaitReady.
//
// A gVisor one (src/zygote/gvisor_pool.cc) fills the same slots: `init_pidfd`
// is its keeper's (runsc's parent, supervisor/gvisor.h), `sync` the keeper's
// control socket, `init_pid` the keeper's pid and `worker_pid` runsc's.
struct AdoptedSandbox {
  policy::Backend backend = policy::Backend::kNative;
  UniqueFd init_pidfd;  // its pid 1 (not our child)
  pid_t init_pid = 0;   // host pids
  pid_t worker_pid = 0;
  uid_t host_uid = 0;  // owns the files put into its workspace
  UniqueFd sync;       // setup channel: X and F records from here on
  UniqueFd runtime;    // the runtime channel (non-blocking)
  UniqueFd out, err;   // capture pipes, read ends (non-blocking)
  UniqueFd workspace;  // O_PATH fd of its /workspace
  std::unique_ptr<isolation::Cgroup> cgroup;
};

struct RunOptions {
  std::optional<std::string> collect_dir;  // --collect
  // Only these top-level workspace entries are collected (empty: all).
  std::vector<std::string> collect_only;
  // Files returned in memory (API requests): those matching these globs
  // (empty list with return_files set: all), up to 64 MiB in all.
  std::optional<std::vector<std::string>> return_files;
  // Readable or hung up: the caller is gone; the sandbox is killed and the
  // result says "cancelled".
  int cancel_fd = -1;
  // The caller already started the cgroup v1 attach warm-up (host.h).
  bool warm_up_started = false;
  // Streaming: every piece of output as it arrives (see EventSink).
  std::function<void(std::string_view, const nlohmann::json&)> on_event;
  // The result as soon as it is known (Sandbox::FinishOptions::on_result).
  std::function<void(const ExecutionResult&)> on_result;
  // Run in this pooled sandbox instead of launching one (consumed). Its
  // limits and environment are its zygote's: the policy's must match them
  // (the caller checks; program.env must be empty).
  AdoptedSandbox* adopt = nullptr;
};

// Errors (the call failed, nothing ran): kFailedPrecondition when the host
// lacks a layer the policy requires (the message is doctor's reason),
// kInternal/kResourceExhausted for supervisor-side failures. A sandbox whose
// setup failed inside the child is a result with outcome kSetupError.
Result<ExecutionResult> RunSandboxed(const HostContext& host, const policy::SandboxPolicy& policy,
                                     const Program& program, const RunOptions& options);

// The pieces of a cell's output as they arrive, in order: "stdout" and
// "stderr" with {"text": "..."}; "display", "result" and "error" with the
// nbformat output object (display_data, execute_result, error).
using EventSink = std::function<void(std::string_view event, const nlohmann::json& data)>;

struct LaunchOptions {
  std::vector<std::pair<std::string, std::string>> env;  // validated by the caller
  bool warm_up_started = false;
  // Sessions: the per-process RLIMIT_CPU backstop is the session's whole
  // budget rather than one cell's (cells are limited by cgroup accounting).
  std::optional<double> rlimit_cpu_s;
};

struct CellSpec {
  std::string code;
  std::string filename = "<cell>";
  double timeout_s = 30;  // wall clock from the cell's start
  // nullopt: kill at the timeout (one-shot). Set (sessions): interrupt first
  // (SIGINT: KeyboardInterrupt in the cell) and kill only when the runtime
  // has not answered within this grace period.
  std::optional<double> interrupt_grace_s;
  // One-shot: the runtime shuts down after this cell; RunCell returns when
  // the sandbox has exited and Finish() gives the final result.
  bool last = false;
  // Members the runtime's execute frame also carries (a session's: context,
  // reset_contexts, env, command; docs/protocol.md).
  nlohmann::json extra = nlohmann::json::object();
};

// What else the driving loop waits for while a cell runs.
struct Waiters {
  int cancel_fd = -1;   // readable or hung up: kill; status "cancelled"
  int control_fd = -1;  // readable: on_control() runs (e.g. an interrupt request)
  std::function<void()> on_control;
};

class Sandbox final {
 public:
  // Plans, creates the cgroup, clones the sandbox and writes its id maps.
  // The runtime then starts on its own; WaitReady waits for it.
  static Result<std::unique_ptr<Sandbox>> Launch(const HostContext& host,
                                                 const policy::SandboxPolicy& policy,
                                                 const LaunchOptions& options);
  // Takes over a pooled sandbox (src/zygote), ready at once (WaitReady
  // returns when its hello is read). The policy's input files are written
  // into its workspace, owned by its uid. kInvalidArgument without every fd.
  // The worker's RLIMIT_CPU is lowered from its zygote's (the most any
  // adopter may keep: zygote::ZygoteOptions::rlimit_cpu_s) to `rlimit_cpu_s`
  // (sessions: the whole session's budget), by default the policy's one-run
  // backstop; from outside (prlimit), before any code of the caller's runs.
  static Result<std::unique_ptr<Sandbox>> Adopt(const HostContext& host,
                                                const policy::SandboxPolicy& policy,
                                                AdoptedSandbox adopted,
                                                std::optional<double> rlimit_cpu_s = std::nullopt);
  ~Sandbox();  // kills and reaps what is left, removes the cgroup
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Until the runtime said hello and the worker is in its cgroup. false: the
  // sandbox failed or was cancelled before that (Finish() says why).
  bool WaitReady(const Waiters& waiters);

  // Runs one cell; precondition: ready and alive. The result holds this cell's
  // output only. When the sandbox died during the cell (a kill: timeout past
  // the grace, memory, output, cpu, protocol), the result's outcome says why,
  // session_state is "lost" and alive() is false. Not `last`: session_state
  // "kept" whenever the runtime answered.
  ExecutionResult RunCell(const CellSpec& cell, const Waiters& waiters, const EventSink& sink);

  // SIGINT to the worker while a cell runs (KeyboardInterrupt); false when no
  // cell runs. The cell's status becomes "interrupted" if it stops from it.
  bool Interrupt();
  // Kills the sandbox now; a running cell's status becomes "cancelled".
  void Cancel();

  // Between cells: notices a sandbox that died on its own (a background
  // thread's OOM, a kill from outside). Non-blocking. fds to poll for that:
  // IdleFds().
  bool CheckAlive();
  std::vector<int> IdleFds() const;
  bool alive() const;
  // Why the sandbox is gone (empty while alive).
  const std::string& death_reason() const { return death_reason_; }

  // O_PATH fd of the workspace directory (files API), -1 before ready.
  int workspace_fd() const;
  // The sandbox's owner outside (for files created by the supervisor).
  uid_t outer_uid() const;
  gid_t outer_gid() const;
  // Memory charged to the sandbox's cgroup now (nullopt: no cgroup).
  std::optional<uint64_t> MemoryInUse();
  const policy::SandboxPolicy& policy() const;

  struct FinishOptions {
    std::optional<std::string> collect_dir;
    std::vector<std::string> collect_only;
    std::optional<std::vector<std::string>> return_files;
    // Called with the result as soon as it is known: for a one-shot run whose
    // runtime reported its exit (`exiting`), before the sandbox's processes
    // are reaped and its cgroup removed; otherwise at the end. Finish still
    // returns the same result.
    std::function<void(const ExecutionResult&)> on_result;
  };
  // Kills the sandbox if alive, reaps it, collects files, removes the cgroup.
  // The result is the last cell's, completed with how the sandbox ended (the
  // one-shot result); setup errors and a never-run program included.
  ExecutionResult Finish(const FinishOptions& options);

 private:
  struct State;
  explicit Sandbox(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
  std::string death_reason_;
};

// The pre-built matplotlib font cache: builds it (once, in a sandbox) if the
// cache directory has none. Failures are returned, and callers go on without
// it (imports then rebuild it per run, slowly, which doctor reports).
Status EnsureFontCache(const HostContext& host);

}  // namespace kiln::supervisor
