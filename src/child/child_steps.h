// Steps shared by the two children that set a sandbox up: RunChild (the cold
// path's pid 1, child_main.cc) and RunZygoteChild (a pooled sandbox forked
// from a zygote, zygote_child.cc). Restricted dialect (P4): no allocation, no
// locks, no exceptions, no logger; async-signal-safe calls only.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstddef>

#include "base/setup_step.h"
#include "child/sync_message.h"
#include "isolation/mount_ns.h"

namespace kiln::child {

// The setup channel that Send and Fail write to. Set it first thing; the fd
// arrangement moves it to kSyncFd (ArrangeFds does this itself).
void SetSyncFd(int fd);
int SyncFd();

// One record on the setup channel (MSG_NOSIGNAL: a dead peer must not kill us
// with SIGPIPE; we notice it otherwise). With SO_PASSCRED on the receiving end
// the kernel attaches our pid, uid and gid as the receiver sees them.
void Send(const SyncMessage& m);
// SyncMessage{kFailure, step, err, detail}, then _exit(127).
[[noreturn]] void Fail(SetupStep step, int err, int detail = -1);

#define KILN_CHILD_STEP(step, expr)                    \
  do {                                                 \
    if ((expr) != 0) ::kiln::child::Fail(step, errno); \
  } while (0)

// Unblocks every signal and resets every disposition to the default: the
// caller (supervisor, spawner, zygote) may ignore or block signals for its
// own reasons, and the program must start with neither.
void ResetSignals();

// Blocks until one record with `tag` arrives on the setup channel. -1 with
// errno EPIPE at EOF (the peer died), EPROTO for anything else.
int WaitForRecord(SyncTag tag);

// ApplyMountOpsInChild, or Fail with the failing op's step and index. (Inline:
// kiln-sandbox-init links this file's .cc without the mount code.)
inline void ApplyMountOpsOrFail(const isolation::MountOp* ops, size_t count) {
  size_t failed = 0;
  if (isolation::ApplyMountOpsInChild(ops, count, &failed) != 0) {
    const SetupStep step = failed < count ? ops[failed].step : SetupStep::kMountPrivate;
    Fail(step, errno, failed < count ? static_cast<int>(failed) : -1);
  }
}

// Sends an O_PATH fd of /workspace to the supervisor (kWorkspaceFd record).
int SendWorkspaceFd();

// vm.memfd_noexec = 2 for our pid namespace (kernel >= 6.3; pid namespaces
// made below it inherit at least that): a memfd is created sealed
// non-executable, and asking for an executable one is refused, so code
// written into memory cannot be exec'd as /proc/self/fd/N. Only while our
// euid is still the host's root (the supervisor's, before the inside ids are
// set): sysctl files are writable by the host's root alone. Best effort:
// -1 with errno where the kernel has no such sysctl or we are not root
// (doctor reports the host's value).
int SetMemfdNoexecInChild();

// Moves the four fds the sandbox keeps to kCodeFd, kSyncFd, kStdoutFd and
// kStderrFd (through a high range first, so no dup3 clobbers another
// source), points 0, 1 and 2 at /dev/null and closes every other fd.
int ArrangeFds(int code_fd, int sync_fd, int stdout_fd, int stderr_fd);

// The worker's stdio: the capture pipes onto 1 and 2.
int WorkerStdio();

// Decimal text of v, NUL-terminated, without snprintf (not async-signal-safe).
void FormatDecimal(char* out, size_t cap, unsigned v);

// Execs `path` (kiln-sandbox-init) as `kiln-sandbox-init WORKER_PID` with an
// empty environment, the setup channel (kSyncFd) kept open across the exec.
// Returns only when the exec failed: -1 with errno, kSyncFd close-on-exec
// again. Call it as pid 1, once the worker is forked, with SIGCHLD blocked.
int ExecSandboxInit(const char* path, pid_t worker);

// The loop of every sandbox's pid 1 once it has forked the worker (that of
// kiln-sandbox-init, sandbox_init.cc, which both a cold and a pooled pid 1
// exec): reaps every orphan, reports the worker's wait status and exits,
// which makes the kernel SIGKILL everything left in the namespace. A dead
// supervisor is noticed by its end of the setup channel (kSyncFd) hanging up
// (a pooled pid 1's parent is the zygote's pid 1, not the supervisor; a cold
// one also has PR_SET_PDEATHSIG): then it exits, and the namespace dies with
// it. Precondition: SIGCHLD blocked (it is read through a signalfd).
[[noreturn]] void RunPooledInit(pid_t worker);

}  // namespace kiln::child
