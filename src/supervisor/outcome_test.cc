#include "supervisor/outcome.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <functional>
#include <string>
#include <vector>

namespace kiln::supervisor {
namespace {

constexpr int Exited(int code) { return (code & 0xff) << 8; }  // W_EXITCODE(code, 0)
constexpr int Signaled(int sig) { return sig & 0x7f; }         // W_EXITCODE(0, sig)

// A one-shot cell that was sent and ended with the sandbox (the baseline of
// most rows): 2 s timeout, 512 MiB, 1 MiB per stream.
Observations OneShot() {
  Observations o;
  o.has_cell = true;
  o.last = true;
  o.cell_timeout_s = 2;
  o.dead = true;
  o.has_cgroup = true;
  o.limits.wall_timeout_s = 2;
  o.limits.cpu_time_s = 2;
  o.limits.memory_bytes = 512ULL << 20;
  o.limits.output_bytes = 1ULL << 20;
  o.cell_frame_budget = 64ULL << 20;
  return o;
}

// A session cell the runtime answered, the sandbox alive.
Observations Replied(const char* status) {
  Observations o = OneShot();
  o.last = false;
  o.dead = false;
  o.reply_status = status;
  return o;
}

CellError Error(const char* name, const char* value) { return CellError{name, value, {}}; }

struct Row {
  const char* name;
  std::function<Observations()> facts;
  Outcome outcome;
  int exit_code;
  int signal;
  std::string reason;  // exact
  std::optional<std::string> session_state;
  std::optional<SetupStep> setup_step = std::nullopt;  // set: a setup_error with this step
};

const std::vector<Row>& Table() {
  static const std::vector<Row> rows = {
      // --- A live sandbox whose runtime replied (sessions).
      {"replied ok", [] { return Replied("ok"); }, Outcome::kOk, 0, 0, "ok", "kept"},
      {"replied error",
       [] {
         auto o = Replied("error");
         o.error = Error("ZeroDivisionError", "division by zero");
         return o;
       },
       Outcome::kError, 1, 0, "ZeroDivisionError: division by zero", "kept"},
      {"replied error without an error frame", [] { return Replied("error"); }, Outcome::kError, 1,
       0, "error", "kept"},
      {"replied an unknown status", [] { return Replied("odd"); }, Outcome::kError, 1, 0, "error",
       "kept"},
      {"SystemExit(0) keeps the session",
       [] {
         auto o = Replied("exit");
         o.reply_exit_code = 0;
         return o;
       },
       Outcome::kOk, 0, 0, "SystemExit(0); the session goes on", "kept"},
      {"SystemExit(3)",
       [] {
         auto o = Replied("exit");
         o.reply_exit_code = 3;
         return o;
       },
       Outcome::kError, 3, 0, "SystemExit(3); the session goes on", "kept"},
      {"a command's exit code",
       [] {
         auto o = Replied("command");
         o.reply_exit_code = 2;
         return o;
       },
       Outcome::kError, 2, 0, "the command exited 2", "kept"},
      {"a command that succeeded",
       [] {
         auto o = Replied("command");
         o.reply_exit_code = 0;
         return o;
       },
       Outcome::kOk, 0, 0, "the command exited 0", "kept"},
      {"policy violation reported",
       [] {
         auto o = Replied("policy_violation");
         o.policy_violation = PolicyViolationInfo{"os", 1, "import of 'os' is not allowed"};
         return o;
       },
       Outcome::kPolicyViolation, 1, 0, "import of 'os' is not allowed", "kept"},
      {"policy_violation status without its frame is an error",
       [] { return Replied("policy_violation"); }, Outcome::kError, 1, 0, "error", "kept"},
      {"timeout interrupted the cell: timeout over the reply",
       [] {
         auto o = Replied("error");
         o.timed_out = true;
         o.error = Error("KeyboardInterrupt", "");
         return o;
       },
       Outcome::kTimeout, 1, 0,
       "wall-clock timeout of 2 s: the cell was interrupted (KeyboardInterrupt); the session's "
       "state is kept",
       "kept"},
      {"timeout over an interrupt request",
       [] {
         auto o = Replied("error");
         o.timed_out = true;
         o.interrupted = true;
         o.error = Error("KeyboardInterrupt", "");
         return o;
       },
       Outcome::kTimeout, 1, 0,
       "wall-clock timeout of 2 s: the cell was interrupted (KeyboardInterrupt); the session's "
       "state is kept",
       "kept"},
      {"interrupted on request",
       [] {
         auto o = Replied("error");
         o.interrupted = true;
         o.error = Error("KeyboardInterrupt", "");
         return o;
       },
       Outcome::kInterrupted, 1, 0,
       "interrupted on request (KeyboardInterrupt); the session's state is kept", "kept"},
      {"timed out but the cell raised something else",
       [] {
         auto o = Replied("error");
         o.timed_out = true;
         o.error = Error("ValueError", "x");
         return o;
       },
       Outcome::kError, 1, 0, "ValueError: x", "kept"},
      {"a reply after the sandbox died does not count",
       [] {
         auto o = Replied("ok");
         o.dead = true;
         o.worker_status = Signaled(SIGKILL);
         return o;
       },
       Outcome::kSignaled, -1, SIGKILL, "killed by signal 9", "lost"},

      // --- Setup failures.
      {"setup failure",
       [] {
         auto o = OneShot();
         o.has_cell = false;
         o.failure_step = SetupStep::kMountBinds;
         o.failure_errno = ENOENT;
         o.failure_text = "sandbox setup failed at step mount_binds (/usr): No such file";
         return o;
       },
       Outcome::kSetupError, -1, 0, "sandbox setup failed at step mount_binds (/usr): No such file",
       std::nullopt, SetupStep::kMountBinds},
      {"setup failure beats a protocol error and a worker status",
       [] {
         auto o = OneShot();
         o.failure_step = SetupStep::kSeccomp;
         o.failure_text = "seccomp";
         o.protocol_error = "garbage";
         o.worker_status = Exited(0);
         return o;
       },
       Outcome::kSetupError, -1, 0, "seccomp", std::nullopt, SetupStep::kSeccomp},
      {"a kill before the setup failure wins",
       [] {
         auto o = OneShot();
         o.failure_step = SetupStep::kStartProgram;
         o.failure_text = "late";
         o.kill_reason = Outcome::kCancelled;
         return o;
       },
       Outcome::kCancelled, -1, SIGKILL, "cancelled: the caller went away", std::nullopt},

      // --- The supervisor's kills.
      {"wall-clock timeout",
       [] {
         auto o = OneShot();
         o.kill_reason = Outcome::kTimeout;
         o.worker_status = Signaled(SIGKILL);
         return o;
       },
       Outcome::kTimeout, -1, SIGKILL, "wall-clock timeout of 2 s", std::nullopt},
      {"timeout before any cell uses the run's limit",
       [] {
         auto o = OneShot();
         o.has_cell = false;
         o.limits.wall_timeout_s = 7;
         o.kill_reason = Outcome::kTimeout;
         return o;
       },
       Outcome::kTimeout, -1, SIGKILL, "wall-clock timeout of 7 s", std::nullopt},
      {"session: the interrupt went unanswered",
       [] {
         auto o = OneShot();
         o.last = false;
         o.cell_timeout_s = 0.5;
         o.timed_out = true;
         o.kill_reason = Outcome::kTimeout;
         return o;
       },
       Outcome::kTimeout, -1, SIGKILL,
       "wall-clock timeout of 0.5 s: the interrupt went unanswered, the sandbox was killed",
       "lost"},
      {"cpu-time limit (polled)",
       [] {
         auto o = OneShot();
         o.limits.cpu_time_s = 1.5;
         o.kill_reason = Outcome::kCpuLimit;
         return o;
       },
       Outcome::kCpuLimit, -1, SIGKILL, "cpu-time limit of 1.5 s", std::nullopt},
      {"cancelled",
       [] {
         auto o = OneShot();
         o.kill_reason = Outcome::kCancelled;
         return o;
       },
       Outcome::kCancelled, -1, SIGKILL, "cancelled: the caller went away", std::nullopt},
      {"output limit on stdout",
       [] {
         auto o = OneShot();
         o.kill_reason = Outcome::kOutputLimit;
         o.stdout_truncated = true;
         return o;
       },
       Outcome::kOutputLimit, -1, SIGKILL, "output passed 1 MiB on stdout", std::nullopt},
      {"output limit on stderr",
       [] {
         auto o = OneShot();
         o.kill_reason = Outcome::kOutputLimit;
         o.stderr_truncated = true;
         return o;
       },
       Outcome::kOutputLimit, -1, SIGKILL, "output passed 1 MiB on stderr", std::nullopt},
      {"rich outputs over the budget",
       [] {
         auto o = OneShot();
         o.kill_reason = Outcome::kOutputLimit;
         o.outputs_truncated = true;
         o.stdout_truncated = true;
         return o;
       },
       Outcome::kOutputLimit, -1, SIGKILL, "rich outputs passed 64 MiB or 10000 outputs",
       std::nullopt},
      {"a kill beats a protocol error, an OOM kill and a clean exit",
       [] {
         auto o = OneShot();
         o.kill_reason = Outcome::kTimeout;
         o.protocol_error = "garbage";
         o.oom_kills = 1;
         o.worker_status = Exited(0);
         return o;
       },
       Outcome::kTimeout, -1, SIGKILL, "wall-clock timeout of 2 s", std::nullopt},

      // --- The runtime broke the protocol.
      {"protocol error",
       [] {
         auto o = OneShot();
         o.protocol_error = "the runtime sent a malformed frame: x";
         o.worker_status = Signaled(SIGKILL);
         return o;
       },
       Outcome::kProtocolError, -1, SIGKILL, "the runtime sent a malformed frame: x", std::nullopt},
      {"protocol error beats the runtime's policy violation",
       [] {
         auto o = OneShot();
         o.protocol_error = "bad";
         o.reply_status = "policy_violation";
         o.policy_violation = PolicyViolationInfo{"os", 1, "no"};
         return o;
       },
       Outcome::kProtocolError, -1, SIGKILL, "bad", std::nullopt},

      // --- The runtime's policy violation, one-shot.
      {"policy violation, one-shot",
       [] {
         auto o = OneShot();
         o.reply_status = "policy_violation";
         o.policy_violation = PolicyViolationInfo{"socket", 2, "import of 'socket' is denied"};
         o.worker_status = Exited(1);
         return o;
       },
       Outcome::kPolicyViolation, 1, 0, "import of 'socket' is denied", std::nullopt},
      {"policy violation, worker killed",
       [] {
         auto o = OneShot();
         o.reply_status = "policy_violation";
         o.policy_violation = PolicyViolationInfo{"socket", 2, "denied"};
         o.worker_status = Signaled(SIGKILL);
         return o;
       },
       Outcome::kPolicyViolation, -1, 0, "denied", std::nullopt},

      // --- The worker's wait status.
      {"exited 0",
       [] {
         auto o = OneShot();
         o.worker_status = Exited(0);
         return o;
       },
       Outcome::kOk, 0, 0, "exited 0", std::nullopt},
      {"exited 3",
       [] {
         auto o = OneShot();
         o.worker_status = Exited(3);
         return o;
       },
       Outcome::kError, 3, 0, "exited 3", std::nullopt},
      {"exited 1 after an error frame",
       [] {
         auto o = OneShot();
         o.reply_status = "error";
         o.error = Error("NameError", "name 'x' is not defined");
         o.worker_status = Exited(1);
         return o;
       },
       Outcome::kError, 1, 0, "NameError: name 'x' is not defined", std::nullopt},
      {"the session's interpreter exited",
       [] {
         auto o = OneShot();
         o.last = false;
         o.worker_status = Exited(0);
         return o;
       },
       Outcome::kOk, 0, 0, "exited 0 (the interpreter exited: the session ended)", "lost"},
      {"seccomp's SIGSYS",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGSYS);
         return o;
       },
       Outcome::kPolicyViolation, -1, SIGSYS, "killed by seccomp (a forbidden system call ABI)",
       std::nullopt},
      {"SIGSYS beats an OOM kill",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGSYS);
         o.oom_kills = 2;
         return o;
       },
       Outcome::kPolicyViolation, -1, SIGSYS, "killed by seccomp (a forbidden system call ABI)",
       std::nullopt},
      {"OOM kill",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGKILL);
         o.oom_kills = 1;
         return o;
       },
       Outcome::kMemoryLimit, -1, SIGKILL, "out of memory: limit 512 MiB", std::nullopt},
      {"OOM beats cpu spent",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGKILL);
         o.oom_kills = 1;
         o.cpu_ms = 1e9;
         return o;
       },
       Outcome::kMemoryLimit, -1, SIGKILL, "out of memory: limit 512 MiB", std::nullopt},
      {"SIGXCPU: RLIMIT_CPU",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGXCPU);
         return o;
       },
       Outcome::kCpuLimit, -1, SIGXCPU,
       "cpu-time limit of " + FormatSeconds(policy::CpuBackstopSeconds(OneShot().limits, 2, true)) +
           " (RLIMIT_CPU)",
       std::nullopt},
      {"SIGKILL with the backstop's cpu spent",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGKILL);
         o.cpu_ms = policy::CpuBackstopSeconds(o.limits, 2, true) * 1e3;
         return o;
       },
       Outcome::kCpuLimit, -1, SIGKILL,
       "cpu-time limit of " + FormatSeconds(policy::CpuBackstopSeconds(OneShot().limits, 2, true)) +
           " (RLIMIT_CPU)",
       std::nullopt},
      {"the backstop without a cgroup",
       [] {
         auto o = OneShot();
         o.has_cgroup = false;
         o.worker_status = Signaled(SIGXCPU);
         return o;
       },
       Outcome::kCpuLimit, -1, SIGXCPU,
       "cpu-time limit of " +
           FormatSeconds(policy::CpuBackstopSeconds(OneShot().limits, 2, false)) + " (RLIMIT_CPU)",
       std::nullopt},
      {"SIGKILL from elsewhere",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGKILL);
         return o;
       },
       Outcome::kSignaled, -1, SIGKILL, "killed by signal 9", std::nullopt},
      {"SIGSEGV",
       [] {
         auto o = OneShot();
         o.worker_status = Signaled(SIGSEGV);
         return o;
       },
       Outcome::kSignaled, -1, SIGSEGV, "killed by signal 11", std::nullopt},
      {"a clean exit beats a later OOM count",
       [] {
         auto o = OneShot();
         o.worker_status = Exited(0);
         o.oom_kills = 1;
         return o;
       },
       Outcome::kOk, 0, 0, "exited 0", std::nullopt},

      // --- No status from the worker.
      {"OOM kill without a worker status",
       [] {
         auto o = OneShot();
         o.oom_kills = 1;
         return o;
       },
       Outcome::kMemoryLimit, -1, SIGKILL, "out of memory: limit 512 MiB", std::nullopt},
      {"pid 1 exited without a status",
       [] {
         auto o = OneShot();
         o.init_status = Exited(126);
         return o;
       },
       Outcome::kSetupError, -1, 0,
       "the sandbox's pid 1 exited 126 without reporting the program's status", std::nullopt,
       SetupStep::kNone},
      {"pid 1 killed without a status",
       [] {
         auto o = OneShot();
         o.init_status = Signaled(SIGKILL);
         return o;
       },
       Outcome::kSetupError, -1, 0,
       "the sandbox's pid 1 killed by signal 9 without reporting the program's status",
       std::nullopt, SetupStep::kNone},
      {"a pooled sandbox's pid 1 ended without a status (not our child: no wait status)",
       [] {
         auto o = OneShot();
         o.init_status_known = false;
         return o;
       },
       Outcome::kSetupError, -1, 0,
       "the sandbox's pid 1 ended without reporting the program's status", std::nullopt,
       SetupStep::kNone},
      {"session: the sandbox ended between cells",
       [] {
         auto o = OneShot();
         o.has_cell = false;
         o.last = false;
         o.worker_status = Signaled(SIGKILL);
         o.oom_kills = 1;
         return o;
       },
       Outcome::kMemoryLimit, -1, SIGKILL, "out of memory: limit 512 MiB", std::nullopt},
  };
  return rows;
}

TEST(Classify, Table) {
  for (const Row& row : Table()) {
    SCOPED_TRACE(row.name);
    const Verdict v = Classify(row.facts());
    EXPECT_EQ(ToString(v.outcome), ToString(row.outcome));
    EXPECT_EQ(v.exit_code, row.exit_code);
    EXPECT_EQ(v.signal, row.signal);
    EXPECT_EQ(v.reason, row.reason);
    EXPECT_EQ(v.session_state, row.session_state);
    ASSERT_EQ(v.setup_error.has_value(), row.setup_step.has_value());
    if (v.setup_error) {
      EXPECT_EQ(v.setup_error->step, *row.setup_step);
      EXPECT_EQ(v.setup_error->message, row.reason);
    }
  }
}

TEST(Classify, SetupErrorCarriesErrno) {
  Observations o = OneShot();
  o.failure_step = SetupStep::kLandlock;
  o.failure_errno = EPERM;
  o.failure_text = "landlock";
  const Verdict v = Classify(o);
  ASSERT_TRUE(v.setup_error.has_value());
  EXPECT_EQ(v.setup_error->sys_errno, EPERM);
}

TEST(FormatSeconds, Shortest) {
  EXPECT_EQ(FormatSeconds(2), "2 s");
  EXPECT_EQ(FormatSeconds(0.25), "0.25 s");
}

}  // namespace
}  // namespace kiln::supervisor
