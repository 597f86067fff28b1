// The typed status of a cell or a run, decided from what the supervisor
// observed (P8: "the first terminal cause wins"). Pure: no process, no fd, no
// clock; the supervisor (sandbox.cc) gathers the observations and copies the
// verdict into its ExecutionResult. Runs in the supervisor process (`kiln
// run`, kiln-supervise); table-tested in outcome_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/setup_step.h"
#include "policy/policy.h"
#include "supervisor/cell_outputs.h"
#include "supervisor/execution_result.h"

namespace kiln::supervisor {

// What the supervisor saw of a sandbox and its current cell.
struct Observations {
  // --- The cell (none: the sandbox ended before any was sent, or between
  // cells).
  bool has_cell = false;
  bool last = false;          // the one-shot cell (the runtime exits after it)
  double cell_timeout_s = 0;  // its wall-clock timeout
  bool timed_out = false;     // the timeout interrupted it (sessions: SIGINT first)
  bool interrupted = false;   // Interrupt() on request
  // The runtime's execute_reply: its status ("ok", "error",
  // "policy_violation", "exit") and SystemExit code, if it replied.
  std::optional<std::string> reply_status;
  std::optional<int64_t> reply_exit_code;
  std::optional<CellError> error;                       // the cell's `error` frame
  std::optional<PolicyViolationInfo> policy_violation;  // its `policy_violation` frame
  bool outputs_truncated = false;                       // frames over the cell's budget
  bool stdout_truncated = false, stderr_truncated = false;

  // --- The sandbox.
  bool dead = false;  // pid 1 exited or was killed
  // A setup record `F` (or a supervisor-side setup failure) and its text.
  std::optional<SetupStep> failure_step;
  int failure_errno = 0;
  std::string failure_text;
  // Why the supervisor killed it (timeout, cpu, output, cancel), if it did.
  std::optional<Outcome> kill_reason;
  std::optional<std::string> protocol_error;  // the runtime broke the protocol
  std::optional<int> worker_status;           // wait status: `X`, or the runtime's `exiting`
  int init_status = 0;                        // pid 1's wait status (cold sandboxes)
  bool init_status_known = true;              // false for an adopted native sandbox: not our child
  uint64_t oom_kills = 0;                     // the cgroup's OOM kills
  double cpu_ms = 0;                          // cpu time used (accounting of the cell or run)
  bool has_cgroup = false;                    // the cpu quota limits it (CpuBackstopSeconds)

  // --- Limits, for the reasons.
  policy::Limits limits;
  uint64_t cell_frame_budget = 0;  // all frames of one cell together
};

struct Verdict {
  Outcome outcome = Outcome::kSetupError;
  int exit_code = -1;
  int signal = 0;
  std::string reason;
  std::optional<SetupErrorInfo> setup_error;
  // Session cells only: "kept" (the runtime answered, the sandbox lives on)
  // or "lost".
  std::optional<std::string> session_state;
};

// The outcome, in this order of precedence: a live sandbox whose runtime
// replied (sessions: the reply decides, a timeout's or an interrupt's
// KeyboardInterrupt first); then, for a dead sandbox, a setup failure (unless
// the supervisor killed it first), the supervisor's kill, a protocol error,
// the runtime's policy violation, the worker's wait status (seccomp's SIGSYS,
// an OOM kill, RLIMIT_CPU, another signal, its exit code), an OOM kill
// without a status, and last a pid 1 that ended without reporting one.
Verdict Classify(const Observations& o);

// "2 s", "0.5 s": how reasons print seconds.
std::string FormatSeconds(double s);

}  // namespace kiln::supervisor
