// Restricted dialect (P4): see zygote_child.h. No allocation, no locks, no
// exceptions, no logger; a failing step sends one SyncMessage and _exits.
#include "child/zygote_child.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "child/child_plan.h"
#include "child/child_steps.h"
#include "child/closing_steps.h"
#include "child/sync_message.h"
#include "isolation/net_ns.h"
#include "isolation/user_ns.h"
#include "sys/syscalls.h"

namespace kiln::child {
namespace {

// The sandbox's pid 1 shares the memory of the process that creates it
// (clone(CLONE_VM) on this stack) instead of copying it: a copy of the
// zygote's page tables per sandbox, made and torn down, costs as much CPU as
// the rest of the refill. The worker, forked by pid 1, returns into the
// interpreter through g_resume, set on the stack of the zygote's thread
// (SpawnZygoteChild) or of the zygote's fork (RunZygoteChild).
alignas(64) char g_init_stack[256 * 1024];
// SpawnZygoteChild: the child's first process runs here, in the zygote's own
// memory, while the zygote sleeps (CLONE_VFORK).
alignas(64) char g_first_stack[64 * 1024];
void* g_resume[5];
const ZygoteChildPlan* g_plan = nullptr;
// Set while pid 1 runs in the zygote's own memory (SpawnZygoteChild): it must
// exec its init or die, never stay in that memory (the zygote sleeps until it
// has done one or the other).
bool g_in_zygote_memory = false;

// "INSIDE OUTSIDE 1\n" without snprintf (not async-signal-safe).
size_t FormatMapLine(char* out, size_t cap, unsigned inside, unsigned outside) {
  size_t n = 0;
  auto put_number = [&](unsigned v) {
    char digits[12];
    size_t d = 0;
    do {
      digits[d++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0 && d < sizeof digits);
    while (d > 0 && n < cap) out[n++] = digits[--d];
  };
  put_number(inside);
  if (n < cap) out[n++] = ' ';
  put_number(outside);
  for (const char* s = " 1\n"; *s != '\0' && n < cap; ++s) out[n++] = *s;
  return n;
}

int WriteSelfFile(const char* path, const char* data, size_t len) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t w = ::write(fd, data, len);
  const int e = errno;
  ::close(fd);
  errno = e;
  return w == static_cast<ssize_t>(len) ? 0 : -1;
}

// Our own user namespace, owned by our uid: the kernel lets its owner map
// exactly its own uid and gid (user_namespaces(7)), so no privileged helper
// has to write the maps. Inside, we are kInsideUid/kInsideGid, like a cold
// sandbox; outside, the uid the zygote gave us.
int EnterOwnUserNamespace(const ZygoteChildPlan& plan) {
  if (::unshare(CLONE_NEWUSER) != 0) return -1;
  char line[40];
  size_t n = FormatMapLine(line, sizeof line, isolation::kInsideUid, plan.uid);
  if (WriteSelfFile("/proc/self/uid_map", line, n) != 0) return -1;
  // The owner may map its gid only once setgroups(2) is denied in it.
  if (WriteSelfFile("/proc/self/setgroups", "deny", 4) != 0) return -1;
  n = FormatMapLine(line, sizeof line, isolation::kInsideGid, plan.gid);
  return WriteSelfFile("/proc/self/gid_map", line, n);
}

// Returns into the zygote's interpreter, as the worker.
void RunWorker(const ZygoteChildPlan& plan) {
  // pid 1 blocked SIGCHLD for its signalfd; the program starts with no mask.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The worker is the program: dumpable like a cold sandbox's worker after
  // its execve (its own children may read its /proc entries). Its memory is a
  // copy of the zygote's, which holds no secret.
  KILN_CHILD_STEP(SetupStep::kForkWorker, ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
  // Every layer is in place: the pool reads our pid (SCM_CREDENTIALS) and
  // checks from outside that it holds (/proc/PID/status, cgroup, ns).
  SyncMessage m{};
  m.tag = SyncTag::kWorkerStarted;
  Send(m);
  KILN_CHILD_STEP(SetupStep::kStdio, WorkerStdio());
  // No execve follows, so close-on-exec closes nothing: the setup channel and
  // the pipes' spare copies go now. fd 3 (the runtime channel) stays.
  KILN_CHILD_STEP(SetupStep::kCloseFds, sys::CloseRange(kSyncFd, UINT_MAX, 0));
  KILN_CHILD_STEP(SetupStep::kExec, ::chdir(plan.cwd));
}

// pid 1 of the sandbox's pid namespace, in its own user, mount, net, ipc and
// uts namespaces, still with every capability of its user namespace. Returns
// only in the worker it forks; pid 1 itself never returns.
void RunSandboxInit(const ZygoteChildPlan& plan) {
  // Our memory is a copy of the zygote's (which holds no secret); like a
  // cold sandbox's pid 1, nothing in the sandbox may read it, and
  // hidepid=ptraceable hides us from the program.
  KILN_CHILD_STEP(SetupStep::kDeathSignal, ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0));
  // 5. Ask the pool to put us into our cgroup now: on cgroup v1 the move may
  //    wait for an RCU grace period, which overlaps the mounts below.
  {
    SyncMessage m{};
    m.tag = SyncTag::kAttachMe;
    Send(m);
  }
  // 6. Our own /proc (masked), /dev/shm, /tmp, /workspace and the font cache,
  //    over the zygote's (docs/threat-model.md: what lies beneath).
  ApplyMountOpsOrFail(plan.mount_ops, plan.mount_count);
  // 7. Own hostname, and a loopback that leads nowhere.
  KILN_CHILD_STEP(SetupStep::kHostname, isolation::SetHostnameInChild(plan.hostname));
  KILN_CHILD_STEP(SetupStep::kLoopback, isolation::BringUpLoopbackInChild());
  // 8. The supervisor's handle on the workspace (files in and out).
  KILN_CHILD_STEP(SetupStep::kWorkspaceFd, SendWorkspaceFd());
  // 9. No line of the program may run outside the cgroup: wait until the pool
  //    has moved us (the worker, forked below, inherits it). EOF: the pool
  //    gave up on us.
  KILN_CHILD_STEP(SetupStep::kWaitAttach, WaitForRecord(SyncTag::kAttached));
  // 10. A cgroup namespace rooted at our own cgroup: /proc/self/cgroup shows
  //     "/", not the host's hierarchy.
  KILN_CHILD_STEP(SetupStep::kChildNamespaces, ::unshare(CLONE_NEWCGROUP));
  // 11. Keep only the four fds of the sandbox.
  KILN_CHILD_STEP(SetupStep::kCloseFds,
                  ArrangeFds(plan.code_fd, plan.sync_fd, plan.stdout_fd, plan.stderr_fd));
  // 12-16. As a cold sandbox (C16-C20, closing_steps.h): no capability,
  //     rlimits, no_new_privs, Landlock (its own domain: signals and abstract
  //     sockets scoped to this sandbox, not its siblings), seccomp last.
  ClosingPlan closing;
  closing.last_cap = plan.last_cap;
  closing.rlimits = &plan.rlimits;
  closing.landlock = &plan.landlock;
  closing.seccomp = plan.seccomp;
  closing.seccomp_length = plan.seccomp_length;
  ApplyClosingRestrictions(closing);
  // 17. The worker runs the program; we stay pid 1. SIGCHLD is blocked
  //     before the fork (pid 1 reads it through a signalfd, so that one
  //     poll(2) also watches the setup channel; the worker unblocks it).
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  KILN_CHILD_STEP(SetupStep::kForkWorker, ::sigprocmask(SIG_BLOCK, &chld, nullptr));
  const pid_t worker = ::fork();
  if (worker < 0) Fail(SetupStep::kForkWorker, errno);
  if (worker == 0) {
    RunWorker(plan);
    return;  // into the zygote's interpreter, as the worker
  }
  // 18. Leave the zygote's memory: exec the small init (its memory is a few
  //     pages, so its exit costs nothing when the sandbox ends; the fork that
  //     made us, which waits for this exec, tears the big copy down now, on
  //     the refill path). It keeps every layer (seccomp, Landlock, no_new_privs
  //     and the ids survive execve) and the setup channel (fd 4). If the exec
  //     fails we stay, as the same init in this memory.
  if (ExecSandboxInit(plan.init_path, worker) != 0 && g_in_zygote_memory) {
    // The zygote sleeps until we exec or exit, and the worker dies with us.
    Fail(SetupStep::kExec, errno);
  }
  RunPooledInit(worker);
}

}  // namespace

// clone(2)'s entry for pid 1, on g_init_stack.
int SandboxInitEntry(void*) {
  RunSandboxInit(*g_plan);  // returns only in the worker
  // The worker: a copy of this memory, where the frame of RunZygoteChild or
  // SpawnZygoteChild that set g_resume (and its callers: the interpreter) is
  // intact.
  __builtin_longjmp(g_resume, 1);
}

namespace {

// Steps 0-4, in the child's first process: the zygote's fork
// (RunZygoteChild) or its CLONE_VM child (SpawnZygoteChild). _exits.
[[noreturn]] void RunFirstProcess(const ZygoteChildPlan& plan) {
  SetSyncFd(plan.sync_fd);
  // 0. The zygote ignores SIGCHLD (its forks are reaped by the kernel); the
  //    program starts with default dispositions and no mask.
  ResetSignals();
  // 1. Our own uid in the zygote's user namespace: each sibling has its own,
  //    mapped to its own host uid. The zygote keeps CAP_SETUID/CAP_SETGID for
  //    this alone (its namespace's root is unmapped, so the kernel's setuid
  //    fixup leaves them). A change of ids also makes us non-dumpable, which
  //    would make /proc/self/uid_map root's: dumpable again for step 2.
  //    Raw system calls: glibc's wrappers would signal the threads of the
  //    process whose memory we may share (the zygote has none; be sure).
  KILN_CHILD_STEP(SetupStep::kSetIds, sys::RawSetresgid(plan.gid));
  KILN_CHILD_STEP(SetupStep::kSetIds, sys::RawSetresuid(plan.uid));
  KILN_CHILD_STEP(SetupStep::kSetIds, ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
  // 2. Our own user namespace, uid/gid 1000 inside, our uid outside; every
  //    namespace below is owned by it, so the program's siblings and the
  //    zygote are beyond any capability it could hold.
  KILN_CHILD_STEP(SetupStep::kChildUserNs, EnterOwnUserNamespace(plan));
  // 3. The sandbox's own mount, pid, net, ipc and uts namespaces (the cgroup
  //    namespace waits for the cgroup: step 10).
  KILN_CHILD_STEP(SetupStep::kChildNamespaces, ::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
                                                         CLONE_NEWIPC | CLONE_NEWUTS));
  // 4. pid 1 of the new pid namespace, sharing our memory; we are done and
  //    leave it the memory (our exit tears nothing down). Our parent (the
  //    zygote) does not wait for us: it ignores SIGCHLD. pid 1 is reparented
  //    to the zygote's pid 1, which reaps it in the end.
  //    CLONE_VFORK: we sleep until it has exec'd its init (step 18), so that
  //    nothing runs in this memory beside it.
  const pid_t init = ::clone(SandboxInitEntry, g_init_stack + sizeof g_init_stack,
                             CLONE_VM | CLONE_VFORK | SIGCHLD, nullptr);
  if (init < 0) Fail(SetupStep::kForkWorker, errno);
  ::_exit(0);
}

int FirstProcessEntry(void*) { RunFirstProcess(*g_plan); }

}  // namespace

int RunZygoteChild(const ZygoteChildPlan& plan) {
  g_plan = &plan;
  g_in_zygote_memory = false;
  if (__builtin_setjmp(g_resume) != 0) return 0;  // the worker, back on this stack
  RunFirstProcess(plan);
}

int SpawnZygoteChild(const ZygoteChildPlan& plan) {
  g_plan = &plan;
  g_in_zygote_memory = true;
  if (__builtin_setjmp(g_resume) != 0) return 0;  // the worker, back on this stack
  // The first process shares our memory and we sleep until it exits, which
  // it does once pid 1 has exec'd its init (or failed): the worker, forked by
  // pid 1 from this very memory, is the sandbox's only copy of the zygote.
  const pid_t first = ::clone(FirstProcessEntry, g_first_stack + sizeof g_first_stack,
                              CLONE_VM | CLONE_VFORK | SIGCHLD, nullptr);
  g_in_zygote_memory = false;
  return first < 0 ? -errno : first;
}

}  // namespace kiln::child
