// A pooled sandbox's own setup, run in a fork of its profile's zygote
// (src/zygote, docs/adr/0011-zygote.md). The zygote already sits in the base
// jail (read-only root, binds, pivot_root, its own user/pid/mount/net/ipc/uts
// namespaces); what is per sandbox happens here, in the kernel's order, one
// step per line (docs/setup-sequence.md, "Pooled sandbox"). Restricted dialect
// (P4): the zygote's libkiln_zygote.so builds the plan at start-up; after the
// fork nothing allocates.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>

#include "isolation/landlock.h"
#include "isolation/mount_ns.h"
#include "isolation/rlimits.h"

namespace kiln::child {

struct ZygoteChildPlan {
  // The fds the pool sent with the fork request, at the numbers the zygote
  // received them.
  int sync_fd = -1;    // SOCK_SEQPACKET to the pool, then the supervisor
  int code_fd = -1;    // the runtime channel (SOCK_STREAM)
  int stdout_fd = -1;  // write ends of the capture pipes
  int stderr_fd = -1;
  // The child's ids in the zygote's user namespace (one of the zygote's
  // mapped range, so each sibling has its own host uid). Inside its own user
  // namespace the child is kInsideUid/kInsideGid, like a cold sandbox.
  uid_t uid = 0;
  gid_t gid = 0;
  const isolation::MountOp* mount_ops = nullptr;  // BuildPrivateMountPlan
  size_t mount_count = 0;
  const char* hostname = "kiln";
  int last_cap = 40;
  isolation::RlimitPlan rlimits;
  isolation::LandlockPlan landlock;
  const sock_filter* seccomp = nullptr;
  size_t seccomp_length = 0;
  const char* cwd = "/workspace";
  // The small init pid 1 execs once the worker exists (sandbox_init.cc),
  // inside the jail (kZygoteLibPath).
  const char* init_path = "/opt/kiln/lib/kiln-sandbox-init";
};

// Runs in the zygote's fork (os.fork(): the zygote's pid namespace). Creates
// the sandbox's namespaces, forks its pid 1 (which sets the rest up, waits
// until the pool has put it into its cgroup, drops everything and forks the
// worker) and _exits. Returns 0 only in the worker, with fd 3 the runtime
// channel, 1 and 2 the capture pipes, every other fd closed, cwd /workspace:
// the zygote's interpreter then reseeds and runs the runtime. A failing step
// sends SyncMessage{kFailure, step, errno} on the setup channel and _exits.
int RunZygoteChild(const ZygoteChildPlan& plan);

// The same, run in the zygote itself instead of in its fork: the child's first
// process is a clone(CLONE_VM | CLONE_VFORK) of the zygote on a stack of its
// own, so the sandbox's only copy of the zygote's memory is its worker's
// (pid 1 forks it from the zygote's own pages, then execs its init). The
// zygote sleeps until that first process has exited, i.e. until pid 1 has
// exec'd (or a step failed). Returns the first process's pid (> 0) in the
// zygote, -errno if the clone failed, and 0 in the worker. The caller does
// what os.fork() does around fork(2) (PyOS_BeforeFork, PyOS_AfterFork_*),
// and must be single-threaded: the first process and pid 1 run on the
// zygote's memory with its thread's TLS.
int SpawnZygoteChild(const ZygoteChildPlan& plan);

}  // namespace kiln::child
