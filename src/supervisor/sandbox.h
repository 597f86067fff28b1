// RunSandboxed: one program, one fresh sandbox, one ExecutionResult.
//
// Runs in the supervisor, which must be able to fork safely: the CLI is
// single-threaded; a multithreaded caller (the server, later) uses the spawner
// process that design.md section 2 describes. The sequence, and which side
// runs each step, is docs/setup-sequence.md.
#pragma once

#include <memory>
#include <optional>
#include <string>
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
// place, its worker in its cgroup and its runtime's hello sent. RunSandboxed
// drives it from there as it drives one it cloned itself (`adopt`).
struct AdoptedSandbox {
  UniqueFd init_pidfd;  // its pid 1 (not our child)
  pid_t init_pid = 0;   // host pid of its pid 1
  uid_t host_uid = 0;   // owns the files put into its workspace
  UniqueFd sync;        // setup channel: X and F records from here on
  UniqueFd runtime;     // the runtime channel (non-blocking)
  UniqueFd out, err;    // capture pipes, read ends (non-blocking)
  UniqueFd workspace;   // O_PATH fd of its /workspace
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
  // Drive this pooled sandbox instead of launching one (consumed). Its
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

// The pre-built matplotlib font cache: builds it (once, in a sandbox) if the
// cache directory has none. Failures are returned, and callers go on without
// it (imports then rebuild it per run, slowly, which doctor reports).
Status EnsureFontCache(const HostContext& host);

}  // namespace kiln::supervisor
