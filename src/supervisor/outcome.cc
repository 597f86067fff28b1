#include "supervisor/outcome.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstdio>

#include "base/units.h"

namespace kiln::supervisor {

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

Verdict Classify(const Observations& o) {
  Verdict v;
  const policy::Limits& limits = o.limits;
  const bool session_cell = o.has_cell && !o.last;
  if (!o.dead && o.has_cell && o.reply_status) {
    // The runtime answered; the sandbox lives on (sessions).
    const std::string status = o.reply_status.value_or("error");
    v.exit_code = static_cast<int>(o.reply_exit_code.value_or(status == "ok" ? 0 : 1));
    v.session_state = "kept";
    const bool keyboard = o.error && o.error->name == "KeyboardInterrupt";
    if (o.timed_out && keyboard) {
      v.outcome = Outcome::kTimeout;
      v.reason = "wall-clock timeout of " + FormatSeconds(o.cell_timeout_s) +
                 ": the cell was interrupted (KeyboardInterrupt); the session's state is kept";
    } else if (o.interrupted && keyboard) {
      v.outcome = Outcome::kInterrupted;
      v.reason = "interrupted on request (KeyboardInterrupt); the session's state is kept";
    } else if (status == "ok") {
      v.outcome = Outcome::kOk;
      v.reason = "ok";
    } else if (status == "policy_violation" && o.policy_violation) {
      v.outcome = Outcome::kPolicyViolation;
      v.reason = o.policy_violation->message;
    } else if (status == "command") {
      v.outcome = v.exit_code == 0 ? Outcome::kOk : Outcome::kError;
      v.reason = "the command exited " + std::to_string(v.exit_code);
    } else if (status == "exit") {
      v.outcome = v.exit_code == 0 ? Outcome::kOk : Outcome::kError;
      v.reason = "SystemExit(" + std::to_string(v.exit_code) + "); the session goes on";
    } else {
      v.outcome = Outcome::kError;
      v.reason = o.error ? o.error->name + ": " + o.error->value : "error";
    }
    return v;
  }

  // The sandbox is gone: the first terminal cause wins.
  if (session_cell) v.session_state = "lost";
  const double timeout_s = o.has_cell ? o.cell_timeout_s : limits.wall_timeout_s;
  if (o.failure_step && !o.kill_reason) {
    v.outcome = Outcome::kSetupError;
    v.setup_error = SetupErrorInfo{*o.failure_step, o.failure_errno, o.failure_text};
    v.reason = o.failure_text;
  } else if (o.kill_reason) {
    v.outcome = *o.kill_reason;
    v.signal = SIGKILL;
    if (*o.kill_reason == Outcome::kTimeout) {
      v.reason = "wall-clock timeout of " + FormatSeconds(timeout_s);
      if (o.has_cell && o.timed_out)
        v.reason += ": the interrupt went unanswered, the sandbox was killed";
    } else if (*o.kill_reason == Outcome::kCpuLimit) {
      v.reason = "cpu-time limit of " + FormatSeconds(limits.cpu_time_s);
    } else if (*o.kill_reason == Outcome::kCancelled) {
      v.reason = "cancelled: the caller went away";
    } else if (*o.kill_reason == Outcome::kOutputLimit) {
      v.reason = o.outputs_truncated ? "rich outputs passed " + FormatSize(o.cell_frame_budget) +
                                           " or " + std::to_string(kMaxOutputsPerCell) + " outputs"
                                     : "output passed " + FormatSize(limits.output_bytes) + " on " +
                                           (o.stdout_truncated ? "stdout" : "stderr");
    }
  } else if (o.protocol_error) {
    v.outcome = Outcome::kProtocolError;
    v.signal = SIGKILL;
    v.reason = *o.protocol_error;
  } else if (o.has_cell && o.reply_status == "policy_violation" && o.policy_violation) {
    v.outcome = Outcome::kPolicyViolation;
    v.exit_code =
        o.worker_status && WIFEXITED(*o.worker_status) ? WEXITSTATUS(*o.worker_status) : -1;
    v.reason = o.policy_violation->message;
  } else if (o.worker_status) {
    const int ws = *o.worker_status;
    if (WIFEXITED(ws)) {
      v.exit_code = WEXITSTATUS(ws);
      v.outcome = v.exit_code == 0 ? Outcome::kOk : Outcome::kError;
      v.reason = v.exit_code == 0 ? "exited 0" : "exited " + std::to_string(v.exit_code);
      if (v.exit_code != 0 && o.error) v.reason = o.error->name + ": " + o.error->value;
      if (session_cell) v.reason += " (the interpreter exited: the session ended)";
    } else if (WIFSIGNALED(ws)) {
      v.signal = WTERMSIG(ws);
      const double cpu_limit_s = policy::CpuBackstopSeconds(limits, timeout_s, o.has_cgroup);
      const bool cpu_spent = o.cpu_ms >= cpu_limit_s * 1e3;
      if (v.signal == SIGSYS) {
        v.outcome = Outcome::kPolicyViolation;
        v.reason = "killed by seccomp (a forbidden system call ABI)";
      } else if (v.signal == SIGKILL && o.oom_kills > 0) {
        v.outcome = Outcome::kMemoryLimit;
        v.reason = "out of memory: limit " + FormatSize(limits.memory_bytes);
      } else if (v.signal == SIGXCPU || (v.signal == SIGKILL && cpu_spent)) {
        v.outcome = Outcome::kCpuLimit;
        v.reason = "cpu-time limit of " + FormatSeconds(cpu_limit_s) + " (RLIMIT_CPU)";
      } else {
        v.outcome = Outcome::kSignaled;
        v.reason = std::string("killed by signal ") + std::to_string(v.signal);
      }
    }
  } else if (o.oom_kills > 0) {
    v.outcome = Outcome::kMemoryLimit;
    v.signal = SIGKILL;
    v.reason = "out of memory: limit " + FormatSize(limits.memory_bytes);
  } else {
    v.outcome = Outcome::kSetupError;
    // A pooled sandbox's pid 1 is not the supervisor's child: its end is
    // seen (its pidfd), its wait status is not.
    std::string why = !o.init_status_known ? "ended"
                      : WIFSIGNALED(o.init_status)
                          ? "killed by signal " + std::to_string(WTERMSIG(o.init_status))
                          : "exited " + std::to_string(WEXITSTATUS(o.init_status));
    v.setup_error =
        SetupErrorInfo{SetupStep::kNone, 0,
                       "the sandbox's pid 1 " + why + " without reporting the program's status"};
    v.reason = v.setup_error->message;
  }
  return v;
}

}  // namespace kiln::supervisor
