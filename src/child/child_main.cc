// The child side of the sandbox. Restricted dialect (P4): after clone there is
// no heap allocation, no mutex, no exception, no std::string, no logger; only
// async-signal-safe calls and the *InChild functions of src/isolation/, which
// follow the same rules. A failing step sends one SyncMessage{kFailure, step,
// errno} and _exits (P5).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "child/child_plan.h"
#include "child/child_steps.h"
#include "child/closing_steps.h"
#include "child/sync_message.h"
#include "isolation/mount_ns.h"
#include "isolation/net_ns.h"
#include "isolation/user_ns.h"
#include "sys/syscalls.h"

namespace kiln::child {
namespace {

[[noreturn]] void RunWorker(const ChildPlan& plan) {
  // pid 1 blocked SIGCHLD for its init (C21); a blocked signal survives
  // execve, and the program starts with none.
  sigset_t none;
  sigemptyset(&none);
  KILN_CHILD_STEP(SetupStep::kForkWorker, ::sigprocmask(SIG_SETMASK, &none, nullptr));
  // Tell the supervisor who we are: with SO_PASSCRED on its end, the kernel
  // attaches our pid as the supervisor sees it, so it can move exactly this
  // process into the v1 cgroup while the interpreter starts (the launcher runs
  // no user code before the supervisor sends it, after that move).
  SyncMessage m{};
  m.tag = SyncTag::kWorkerStarted;
  Send(m);
  KILN_CHILD_STEP(SetupStep::kStdio, WorkerStdio());
  KILN_CHILD_STEP(SetupStep::kStdio, ::fcntl(kCodeFd, F_SETFD, 0));  // keep fd 3 across exec
  KILN_CHILD_STEP(SetupStep::kCloseFds, sys::CloseRange(kStdoutFd, UINT_MAX, 0));
  KILN_CHILD_STEP(SetupStep::kExec, ::chdir(plan.cwd));
  ::execve(plan.exec_path, plan.argv, plan.envp);
  Fail(SetupStep::kExec, errno);
}

// pid 1 of a zygote's jail: reaps every orphan and reports the zygote's exit,
// then stays while pooled sandboxes it adopted still run (they are reparented
// to it), and exits when none is left, which makes the kernel SIGKILL
// everything left in the namespace. (A sandbox's pid 1 execs
// kiln-sandbox-init instead: C22.)
[[noreturn]] void RunZygoteInit(pid_t zygote) {
  ::close(kCodeFd);
  ::close(kStdoutFd);
  ::close(kStderrFd);
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      // ECHILD: the zygote is gone, and every sandbox too.
      ::_exit(zygote == 0 ? 0 : 126);
    }
    if (pid == zygote) {
      SyncMessage m{};
      m.tag = SyncTag::kWorkerExited;
      m.status = status;
      Send(m);
      zygote = 0;
    }
  }
}

}  // namespace

void RunChild(const ChildPlan& plan) {
  SetSyncFd(plan.sync_fd);
  // C0. A clean signal state: the supervisor (or the server's spawner) may
  //     ignore or block signals for its own reasons; ignored dispositions and
  //     the mask survive execve, and the program must start with neither.
  ResetSignals();
  // C1. Die with the supervisor: a sandbox must never outlive the process that
  //     enforces its limits.
  KILN_CHILD_STEP(SetupStep::kDeathSignal, ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0));
  // C2. Until the supervisor has written our uid/gid maps we are "nobody" and
  //     cannot create a file; EOF here means the supervisor died.
  KILN_CHILD_STEP(SetupStep::kWaitParent, WaitForRecord(SyncTag::kMapsWritten));
  //     Until C22 our memory is a copy of the supervisor's (its environment
  //     included): nothing in the sandbox may read it through
  //     /proc/1/{environ,mem}. Not before the maps exist: a non-dumpable
  //     child's /proc files belong to root, and an unprivileged supervisor
  //     could not write the maps. (The worker's execve makes it dumpable;
  //     the init's exec too, which makes itself non-dumpable again.)
  KILN_CHILD_STEP(SetupStep::kWaitParent, ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0));
  //     Executable memfds off for our pid namespace (and, for a zygote's pid
  //     1, every sandbox's below it), while our euid is still the host's.
  (void)SetMemfdNoexecInChild();
  //     cgroup v1: ask to be moved into our cgroup now; the move (which may
  //     wait for an RCU grace period) overlaps the mounts below (C14b).
  if (plan.enter_cgroup) {
    SyncMessage m{};
    m.tag = SyncTag::kAttachMe;
    Send(m);
  }
  // C3. Detach copies of the bind sources that may sit anywhere on the host
  //     (the policy's extra read-only paths), while we still have the
  //     supervisor's host identity and can reach them.
  size_t failed = 0;
  if (isolation::PrepareMountSourcesInChild(plan.mount_ops, plan.mount_count, &failed) != 0) {
    Fail(SetupStep::kMountBinds, errno, static_cast<int>(failed));
  }
  // C4. Become the inside uid/gid now, so every file of the new tree is ours.
  KILN_CHILD_STEP(SetupStep::kSetIds, isolation::SetInsideIdsInChild(plan.drop_groups));
  //     Changing credentials clears the parent-death signal (prctl(2)): arm it
  //     again, then make sure the supervisor did not die in between (its end of
  //     the setup channel would have hung up).
  KILN_CHILD_STEP(SetupStep::kSetIds, ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0));
  {
    pollfd pfd{SyncFd(), POLLRDHUP, 0};
    if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP)) != 0) ::_exit(127);
  }
  // C5-C10. The new root: private propagation, tmpfs root, ro binds, /proc, /dev,
  //         size-capped tmpfs, staged files (each op carries its own SetupStep).
  ApplyMountOpsOrFail(plan.mount_ops, plan.mount_count);
  // C11. Enter it and drop every path to the host's tree.
  KILN_CHILD_STEP(SetupStep::kPivotRoot, isolation::PivotRootInChild(plan.new_root));
  // C12. The root itself is read-only from here on (only the tmpfs mounts write).
  KILN_CHILD_STEP(SetupStep::kRemountRootRo, isolation::RemountRootReadOnlyInChild());
  // C13. Own hostname, and a loopback that leads nowhere.
  KILN_CHILD_STEP(SetupStep::kHostname, isolation::SetHostnameInChild(plan.hostname));
  KILN_CHILD_STEP(SetupStep::kLoopback, isolation::BringUpLoopbackInChild());
  // C14. Give the supervisor a handle on the workspace: files in and out go
  //      through it with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), never
  //      through a path the sandbox could redirect.
  KILN_CHILD_STEP(SetupStep::kWorkspaceFd, SendWorkspaceFd());
  // C14b. cgroup v1: no line of the program may run outside the cgroup, so
  //       wait until the supervisor has moved us (the worker inherits it),
  //       then root a cgroup namespace at it (ours from clone is rooted at
  //       the supervisor's cgroup): /proc/self/cgroup then shows "/" only.
  if (plan.enter_cgroup) {
    KILN_CHILD_STEP(SetupStep::kWaitAttach, WaitForRecord(SyncTag::kAttached));
    KILN_CHILD_STEP(SetupStep::kChildNamespaces, ::unshare(CLONE_NEWCGROUP));
  }
  // C15. Keep only the fds the plan lists.
  KILN_CHILD_STEP(SetupStep::kCloseFds,
                  ArrangeFds(plan.code_fd, plan.sync_fd, plan.stdout_fd, plan.stderr_fd));
  // C16-C20. No capability survives, in any set, for us or anything we exec;
  //          rlimits (and the rlimit fallback when there is no cgroup);
  //          no_new_privs; Landlock; seccomp last, so its filter need not
  //          allow any setup call (closing_steps.h). A zygote keeps
  //          CAP_SETUID and CAP_SETGID of its own user namespace, ambient so
  //          that they survive the exec of its interpreter: it gives each
  //          child its own uid; every other step happens in the child's own
  //          user namespace (zygote_child.cc). Nor does it install seccomp:
  //          its children unshare and mount, then install it themselves (and
  //          Landlock, whose plan a zygote's ChildPlan leaves at ABI 0).
  ClosingPlan closing;
  closing.last_cap = plan.last_cap;
  closing.keep_setid_caps = plan.zygote;
  closing.rlimits = &plan.rlimits;
  closing.landlock = &plan.landlock;
  closing.install_seccomp = !plan.zygote;
  closing.seccomp = plan.seccomp;
  closing.seccomp_length = plan.seccomp_length;
  ApplyClosingRestrictions(closing);
  // C21. The worker runs the program; we stay pid 1. SIGCHLD is blocked
  //      before the fork: the init of C22 reads it through a signalfd, so
  //      that one poll(2) also watches the setup channel (the worker
  //      unblocks it).
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  KILN_CHILD_STEP(SetupStep::kForkWorker, ::sigprocmask(SIG_BLOCK, &chld, nullptr));
  const pid_t worker = ::fork();
  if (worker < 0) Fail(SetupStep::kForkWorker, errno);
  if (worker == 0) RunWorker(plan);
  if (plan.zygote) RunZygoteInit(worker);
  // C22. Leave the supervisor's memory: exec the small init, so that pid 1
  //      holds nothing of the supervisor's (its heap, its mappings, whatever
  //      it inherited from the server) but a few pages of its own. Every
  //      layer survives execve (ids, no capability, rlimits, no_new_privs,
  //      Landlock, seccomp, the parent-death signal) and so does the setup
  //      channel; it is non-dumpable again at once. It reaps, reports `X` and
  //      exits as this process would have. Fail closed: if the exec fails,
  //      the sandbox ends here (our exit kills the worker).
  (void)ExecSandboxInit(plan.init_path, worker);
  Fail(SetupStep::kForkWorker, errno, kDetailExecInit);
}

}  // namespace kiln::child
