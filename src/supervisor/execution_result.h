// ExecutionResult: what happened to the program, as opposed to whether the
// API call worked (P8). A crash, a timeout or a kill is a result, never an
// error of the call. The first terminal cause wins.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/setup_step.h"
#include "supervisor/cell_outputs.h"

namespace kiln::supervisor {

enum class Outcome {
  kOk,               // exited 0
  kError,            // exited non-zero
  kTimeout,          // wall-clock timeout; killed by the supervisor
  kCpuLimit,         // cpu-time limit (sandbox total, or RLIMIT_CPU)
  kMemoryLimit,      // killed by the cgroup's OOM killer
  kOutputLimit,      // stdout or stderr passed its cap; killed by the supervisor
  kSignaled,         // killed by a signal for another reason
  kPolicyViolation,  // seccomp killed it (foreign ABI, x32)
  kSetupError,       // the sandbox could not be built; the program never ran
  kProtocolError,    // the sandbox broke the runtime protocol; killed by the supervisor
  kCancelled,        // the caller went away (client disconnect, server shutdown); killed
  kInterrupted,      // a session cell stopped on request (KeyboardInterrupt); the sandbox lives on
};

// "ok", "error", "timeout", "cpu_limit", "memory_limit", "output_limit",
// "signaled", "policy_violation", "setup_error", "protocol_error", "cancelled",
// "interrupted".
std::string_view ToString(Outcome outcome);

struct SetupErrorInfo {
  SetupStep step = SetupStep::kNone;
  int sys_errno = 0;
  std::string message;
};

struct FileContentResult {
  std::string path;
  std::string content;
};

struct CollectedFile {
  std::string path;  // relative to the workspace (and to --collect DIR)
  uint64_t size = 0;
};

// Wall time of each supervisor-side phase, for bench/ (e).
struct PhaseTimes {
  double plan_ms = 0;         // policy -> ChildPlan (BPF, mount plan, fds)
  double cgroup_ms = 0;       // create the cgroup and write its limits
  double clone_ms = 0;        // clone3
  double maps_ms = 0;         // uid/gid maps
  double child_setup_ms = 0;  // maps written -> workspace fd (mounts, pivot)
  double exec_ms = 0;         // workspace fd -> worker about to execve
  double attach_ms = 0;       // v1 cgroup attach of pid 1 (overlaps the child's mounts)
  double start_ms = 0;        // worker about to execve -> program sent (interpreter start)
  double run_ms = 0;          // program sent -> worker exited
  double teardown_ms = 0;     // worker exited -> reaped, cgroup removed, files collected
};

struct ExecutionResult {
  Outcome outcome = Outcome::kSetupError;
  int exit_code = -1;  // when the worker exited; -1 otherwise
  int signal = 0;      // when it was killed by a signal
  std::string stdout_data;
  std::string stderr_data;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  double duration_ms = 0;  // from the program's start to its end
  double cpu_ms = 0;
  uint64_t peak_memory_bytes = 0;
  uint64_t oom_kills = 0;
  uint64_t pids_limit_hits = 0;  // forks refused at the pids limit (cgroup pids.events max)
  std::string limits_backend;    // "cgroup v2", "cgroup v1", "rlimits"
  std::vector<CollectedFile> files;
  std::vector<FileContentResult> returned_files;  // RunOptions::return_files
  std::vector<std::string> collect_skipped;       // "path: why" (symlinks, special files, limits)
  std::string collect_error;  // the copy-out failed part way (files has the rest)
  std::optional<SetupErrorInfo> setup_error;
  std::string reason;  // one line: why this outcome (e.g. "wall-clock timeout of 2 s")
  // Notebook-style results (docs/api.md): nbformat v4 outputs in order.
  nlohmann::json outputs = nlohmann::json::array();
  std::optional<CellError> error;
  std::optional<int64_t> execution_count;
  uint64_t outputs_dropped = 0;    // rich outputs over the image caps
  bool outputs_truncated = false;  // rich outputs over the cell's frame budget
  std::optional<PolicyViolationInfo> policy_violation;
  // Session cells only: whether the session's interpreter (variables,
  // imports, files) survived this cell: "kept" or "lost".
  std::optional<std::string> session_state;
  PhaseTimes phases;
};

// The exit code `kiln run` uses in plain mode: the program's own; 124 on
// timeout (as timeout(1)); 128+N when killed by signal N; 125 on setup error.
int PlainExitCode(const ExecutionResult& r);

// The --json object (docs/api.md). Invalid UTF-8 in stdout/stderr is replaced
// with U+FFFD, never an exception.
nlohmann::json ToJson(const ExecutionResult& r, bool with_files);

// ToJson read back: how a result crosses the job channel typed (docs/protocol.md
// section 5). FromJson(ToJson(r, with_files)) == r, field for field. A member of
// the wrong type, an unknown status or step, or a missing required member
// (status, exit_code, signal, stdout, stderr, reason) is kInvalidArgument
// naming it, never a default.
Result<ExecutionResult> FromJson(const nlohmann::json& j);

// The outcome whose ToString is `name`; nullopt for an unknown name.
std::optional<Outcome> OutcomeFromString(std::string_view name);

}  // namespace kiln::supervisor
