// ChildPlan: everything the sandbox's first process needs, computed by the
// supervisor before clone (P4). The child only reads it: no heap allocation,
// no locks, no exceptions, no std::string building, no normal logger after
// clone. Every file under src/child/ follows these rules (ci/check-rules).
#pragma once

#include <linux/filter.h>

#include <cstddef>
#include <cstdint>

#include "base/setup_step.h"
#include "isolation/landlock.h"
#include "isolation/mount_ns.h"
#include "isolation/rlimits.h"

namespace kiln::child {

// The fd layout of pid 1 after its fds are arranged (kCloseFds); the worker
// keeps kCodeFd as fd 3 for the launcher and turns the stdio pipes into 1, 2.
inline constexpr int kCodeFd = 3;
inline constexpr int kSyncFd = 4;
inline constexpr int kStdoutFd = 5;
inline constexpr int kStderrFd = 6;

// What pid 1 execs once it has forked the worker (kiln-sandbox-init, from the
// host's libexec directory bound read-only at isolation::kZygoteLibPath):
// `kiln-sandbox-init WORKER_PID`, the setup channel on kSyncFd, SIGCHLD
// blocked. Its memory is then a few pages of its own, not a copy of the
// supervisor's (or the zygote's).
inline constexpr const char* kSandboxInitPath = "/opt/kiln/lib/kiln-sandbox-init";
// SyncMessage::detail of a kForkWorker failure: the exec of that init failed.
inline constexpr int kDetailExecInit = 1;

struct ChildPlan {
  // Inherited fds, at the numbers the supervisor had them.
  int sync_fd = -1;    // SOCK_SEQPACKET to the supervisor (SyncMessage)
  int code_fd = -1;    // read end of the program pipe
  int stdout_fd = -1;  // write ends of the capture pipes
  int stderr_fd = -1;

  bool drop_groups = false;  // root mode: setgroups(0) inside
  const isolation::MountOp* mount_ops = nullptr;
  size_t mount_count = 0;
  const char* new_root = nullptr;
  const char* hostname = "kiln";
  int last_cap = 40;
  isolation::RlimitPlan rlimits;
  isolation::LandlockPlan landlock;  // abi 0: skip (the policy allowed it)
  const sock_filter* seccomp = nullptr;
  size_t seccomp_length = 0;

  const char* exec_path = nullptr;  // absolute, inside the new root
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = "/workspace";
  // What pid 1 execs after the fork of the worker (C22), inside the new root;
  // the root must bind it there (MountLayout::zygote_lib_dir). Not for a
  // zygote's jail, whose pid 1 stays (below).
  const char* init_path = kSandboxInitPath;

  // cgroup v1 (which has no CLONE_INTO_CGROUP): pid 1 asks the supervisor to
  // move it into the sandbox's cgroup (kAttachMe) as soon as the maps exist,
  // waits for kAttached before it forks the worker, and then makes a cgroup
  // namespace rooted there, so /proc/self/cgroup shows "/" and not kiln's
  // cgroup names (which carry the supervisor's host pid).
  bool enter_cgroup = false;

  // A zygote's jail (src/zygote/zygote.cc): the worker is the zygote's
  // interpreter, which keeps CAP_SETUID/CAP_SETGID (ambient) and installs no
  // seccomp filter (its children do, after their own setup); pid 1 outlives
  // it while adopted sandboxes run. The caller leaves landlock at ABI 0.
  bool zygote = false;
};

// Runs in the child of clone3, which is pid 1 of the new pid namespace: the
// setup sequence of docs/setup-sequence.md, one step per line, then forks the
// worker that execs the interpreter and execs the small init (init_path) that
// reaps orphans and reports the worker's wait status. Never returns.
[[noreturn]] void RunChild(const ChildPlan& plan);

}  // namespace kiln::child
