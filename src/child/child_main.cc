// The child side of the sandbox. Restricted dialect (P4): after clone there is
// no heap allocation, no mutex, no exception, no std::string, no logger; only
// async-signal-safe calls and the *InChild functions of src/isolation/, which
// follow the same rules. A failing step sends one SyncMessage{kFailure, step,
// errno} and _exits (P5).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "child/child_plan.h"
#include "child/sync_message.h"
#include "isolation/caps.h"
#include "isolation/landlock.h"
#include "isolation/mount_ns.h"
#include "isolation/net_ns.h"
#include "isolation/rlimits.h"
#include "isolation/seccomp.h"
#include "isolation/user_ns.h"
#include "sys/syscalls.h"

namespace kiln::child {
namespace {

int g_sync_fd = -1;

void Send(const SyncMessage& m) {
  // MSG_NOSIGNAL: a dead supervisor must not kill us with SIGPIPE before we
  // notice it through the failed send (we die with it via PDEATHSIG anyway).
  while (::send(g_sync_fd, &m, sizeof m, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void Fail(SetupStep step, int err, int detail = -1) {
  SyncMessage m{};
  m.tag = SyncTag::kFailure;
  m.step = static_cast<uint8_t>(step);
  m.err = err;
  m.detail = detail;
  Send(m);
  ::_exit(127);
}

#define KILN_CHILD_STEP(step, expr) \
  do {                              \
    if ((expr) != 0) Fail(step, errno); \
  } while (0)

int WaitForMaps() {
  SyncMessage m{};
  ssize_t n;
  do {
    n = ::recv(g_sync_fd, &m, sizeof m, 0);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof m) || m.tag != SyncTag::kMapsWritten) {
    errno = n == 0 ? EPIPE : EPROTO;
    return -1;
  }
  return 0;
}

int SendWorkspaceFd() {
  int fd = ::open(isolation::kWorkspacePath, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  SyncMessage m{};
  m.tag = SyncTag::kWorkspaceFd;
  iovec iov{&m, sizeof m};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  __builtin_memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  do {
    n = ::sendmsg(g_sync_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  int e = errno;
  ::close(fd);
  errno = e;
  return n == static_cast<ssize_t>(sizeof m) ? 0 : -1;
}

// Moves the four fds the sandbox keeps to their fixed numbers (through a high
// range first, so no dup3 clobbers another source), points 0, 1 and 2 at
// /dev/null (pid 1 must not hold the caller's terminal), and closes the rest.
int ArrangeFds(const ChildPlan& plan) {
  const int sources[4] = {plan.code_fd, plan.sync_fd, plan.stdout_fd, plan.stderr_fd};
  const int targets[4] = {kCodeFd, kSyncFd, kStdoutFd, kStderrFd};
  int high[4];
  for (int i = 0; i < 4; ++i) {
    high[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, 64);
    if (high[i] < 0) return -1;
  }
  for (int i = 0; i < 4; ++i) {
    if (::dup3(high[i], targets[i], O_CLOEXEC) < 0) return -1;
  }
  g_sync_fd = kSyncFd;
  if (sys::CloseRange(kStderrFd + 1, UINT_MAX, 0) != 0) return -1;
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return -1;
  for (int fd = 0; fd <= 2; ++fd) {
    if (::dup2(null_fd, fd) < 0) return -1;
  }
  return null_fd > 2 ? ::close(null_fd) : 0;
}

[[noreturn]] void RunWorker(const ChildPlan& plan) {
  // Tell the supervisor who we are: with SO_PASSCRED on its end, the kernel
  // attaches our pid as the supervisor sees it, so it can move exactly this
  // process into the v1 cgroup while the interpreter starts (the launcher runs
  // no user code before the supervisor sends it, after that move).
  SyncMessage m{};
  m.tag = SyncTag::kWorkerStarted;
  Send(m);
  KILN_CHILD_STEP(SetupStep::kStdio, ::dup2(kStdoutFd, 1) < 0 ? -1 : 0);
  KILN_CHILD_STEP(SetupStep::kStdio, ::dup2(kStderrFd, 2) < 0 ? -1 : 0);
  KILN_CHILD_STEP(SetupStep::kStdio, ::fcntl(kCodeFd, F_SETFD, 0));  // keep fd 3 across exec
  KILN_CHILD_STEP(SetupStep::kCloseFds, sys::CloseRange(kStdoutFd, UINT_MAX, 0));
  KILN_CHILD_STEP(SetupStep::kExec, ::chdir(plan.cwd));
  ::execve(plan.exec_path, plan.argv, plan.envp);
  Fail(SetupStep::kExec, errno);
}

// pid 1 of the sandbox: reap every orphan, report the worker's status, and
// exit, which makes the kernel SIGKILL everything left in the namespace
// (double-forked daemons included).
[[noreturn]] void RunInit(pid_t worker) {
  ::close(kCodeFd);
  ::close(kStdoutFd);
  ::close(kStderrFd);
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      ::_exit(126);  // ECHILD: the worker is gone and was not seen; cannot happen
    }
    if (pid == worker) {
      SyncMessage m{};
      m.tag = SyncTag::kWorkerExited;
      m.status = status;
      Send(m);
      ::_exit(0);
    }
  }
}

}  // namespace

void RunChild(const ChildPlan& plan) {
  g_sync_fd = plan.sync_fd;
  // 0. A clean signal state: the supervisor (or the server's spawner) may
  //    ignore or block signals for its own reasons; ignored dispositions and
  //    the mask survive execve, and the program must start with neither.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);  // EINVAL for the few that cannot change: fine
  }
  // 1. Die with the supervisor: a sandbox must never outlive the process that
  //    enforces its limits.
  KILN_CHILD_STEP(SetupStep::kDeathSignal, ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0));
  // 2. Until the supervisor has written our uid/gid maps we are "nobody" and
  //    cannot create a file; EOF here means the supervisor died.
  KILN_CHILD_STEP(SetupStep::kWaitParent, WaitForMaps());
  //    pid 1 never execs, so its memory is a copy of the supervisor's (its
  //    environment included): nothing in the sandbox may read it through
  //    /proc/1/{environ,mem}. Not before the maps exist: a non-dumpable
  //    child's /proc files belong to root, and an unprivileged supervisor
  //    could not write the maps. (The worker's execve makes it dumpable.)
  KILN_CHILD_STEP(SetupStep::kWaitParent, ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0));
  // 3. Detach copies of the bind sources that may sit anywhere on the host
  //    (kiln's runtime directory), while we still have the supervisor's host
  //    identity and can reach them.
  size_t failed = 0;
  if (isolation::PrepareMountSourcesInChild(plan.mount_ops, plan.mount_count, &failed) != 0) {
    Fail(SetupStep::kMountBinds, errno, static_cast<int>(failed));
  }
  // 4. Become the inside uid/gid now, so every file of the new tree is ours.
  KILN_CHILD_STEP(SetupStep::kSetIds, isolation::SetInsideIdsInChild(plan.drop_groups));
  //    Changing credentials clears the parent-death signal (prctl(2)): arm it
  //    again, then make sure the supervisor did not die in between (its end of
  //    the setup channel would have hung up).
  KILN_CHILD_STEP(SetupStep::kSetIds, ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0));
  {
    pollfd pfd{g_sync_fd, POLLRDHUP, 0};
    if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP)) != 0) ::_exit(127);
  }
  // 5. The new root: private propagation, tmpfs root, ro binds, /proc, /dev,
  //    size-capped tmpfs, staged files (each op carries its own SetupStep).
  if (isolation::ApplyMountOpsInChild(plan.mount_ops, plan.mount_count, &failed) != 0) {
    const SetupStep step =
        failed < plan.mount_count ? plan.mount_ops[failed].step : SetupStep::kMountPrivate;
    Fail(step, errno, failed < plan.mount_count ? static_cast<int>(failed) : -1);
  }
  // 6. Enter it and drop every path to the host's tree.
  KILN_CHILD_STEP(SetupStep::kPivotRoot, isolation::PivotRootInChild(plan.new_root));
  // 7. The root itself is read-only from here on (only the tmpfs mounts write).
  KILN_CHILD_STEP(SetupStep::kRemountRootRo, isolation::RemountRootReadOnlyInChild());
  // 8. Own hostname, and a loopback that leads nowhere.
  KILN_CHILD_STEP(SetupStep::kHostname, isolation::SetHostnameInChild(plan.hostname));
  KILN_CHILD_STEP(SetupStep::kLoopback, isolation::BringUpLoopbackInChild());
  // 9. Give the supervisor a handle on the workspace: files in and out go
  //    through it with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), never
  //    through a path the sandbox could redirect.
  KILN_CHILD_STEP(SetupStep::kWorkspaceFd, SendWorkspaceFd());
  // 10. Keep only the fds the plan lists.
  KILN_CHILD_STEP(SetupStep::kCloseFds, ArrangeFds(plan));
  // 11. No capability survives, in any set, for us or anything we exec.
  KILN_CHILD_STEP(SetupStep::kDropCaps, isolation::DropAllCapabilitiesInChild(plan.last_cap));
  // 12. Per-process limits (and the rlimit fallback when there is no cgroup).
  int failed_rlimit = -1;
  if (isolation::ApplyRlimitsInChild(plan.rlimits, &failed_rlimit) != 0) {
    Fail(SetupStep::kRlimits, errno, failed_rlimit);
  }
  // 13. No exec can grant privileges again (setuid bits, file caps); also what
  //     lets an unprivileged process install Landlock and seccomp.
  KILN_CHILD_STEP(SetupStep::kNoNewPrivs, ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
  // 14. Landlock: writes only beneath the writable mounts; TCP and, on ABI >= 6,
  //     signals and abstract sockets scoped to the sandbox.
  if (plan.landlock.abi > 0) {
    KILN_CHILD_STEP(SetupStep::kLandlock, isolation::ApplyLandlockInChild(plan.landlock));
  }
  // 15. seccomp last, so its filter need not allow any setup call.
  KILN_CHILD_STEP(SetupStep::kSeccomp,
                  isolation::ApplySeccompInChild(plan.seccomp, plan.seccomp_length));
  // 16. The worker runs the program; we stay pid 1.
  pid_t worker = ::fork();
  if (worker < 0) Fail(SetupStep::kForkWorker, errno);
  if (worker == 0) RunWorker(plan);
  RunInit(worker);
}

}  // namespace kiln::child
