// HostContext: the facts about this host and installation that every sandbox
// of this process shares, computed once (cgroup hierarchy, Landlock ABI,
// compiled seccomp filter, where the runtime and the font cache live).
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "isolation/cgroup.h"
#include "isolation/landlock.h"
#include "isolation/mount_ns.h"
#include "isolation/seccomp.h"
#include "policy/policy.h"

namespace kiln::supervisor {

struct HostContext {
  std::unique_ptr<isolation::CgroupManager> cgroups;
  std::optional<isolation::LandlockPlan> landlock;  // nullopt: unavailable
  std::string landlock_error;                       // why, when unavailable
  isolation::BpfProgram seccomp;
  int last_cap = 40;
  std::string runtime_dir;  // host directory holding kiln_runtime/
  // Host directory holding kiln-sandbox-init (and libkiln_zygote.so), bound
  // read-only at /opt/kiln/lib in every sandbox: a cold sandbox's pid 1 execs
  // the init once it has forked the worker (docs/setup-sequence.md, C22).
  std::string libexec_dir;
  std::string cache_dir;      // font cache etc.
  std::string slot_lock_dir;  // uid slot locks (root mode)
  // cgroup v1: cgroup.procs of our own cgroup in one hierarchy, for the
  // attach warm-up (StartCgroupWarmUp). Empty otherwise.
  std::string warm_up_procs;
};

// Builds the context. Fails only when a piece kiln cannot work without is
// missing (the runtime directory, kiln-sandbox-init, a seccomp filter).
Result<HostContext> LoadHostContext();

// cgroup v1 only: the first attach after a quiet period waits for an RCU grace
// period (cgroup_threadgroup_rwsem), 5-20 ms; one within ~50 ms of another is
// fast. This forks a helper that re-attaches itself to its own cgroup, so the
// slow wait overlaps the sandbox's setup and the worker's attach is fast.
// Call it after creating the sandbox's cgroup: the waiting attach holds
// cgroup_mutex, which mkdir needs too. Returns the helper's pid to reap with
// FinishCgroupWarmUp (0: nothing started). Single-threaded callers only.
pid_t StartCgroupWarmUp(const HostContext& host);
// The same before any HostContext exists, for `kiln run`'s first
// millisecond: finds our own v1 pids cgroup itself (0 on v2 or unprivileged).
pid_t StartEarlyCgroupWarmUp();
pid_t StartCgroupWarmUpAt(const std::string& procs_file);
void FinishCgroupWarmUp(pid_t helper);

// The interpreter's environment in a sandbox, "NAME=value" each: a fixed set
// (PATH, HOME=/tmp, LANG, matplotlib's backend and config dir, BLAS threads
// = ceil(cpus)), then `extra` (names validated by the caller) replacing or
// adding. Shared by the cold path and the zygotes.
std::vector<std::string> SandboxEnvironment(
    double cpus, const std::vector<std::pair<std::string, std::string>>& extra);

// The block devices a sandbox with this mount plan can read from: those behind
// the sources of its read-only binds (kBindRo, kOpenTree: /usr, /etc files,
// the runtime, a profile's mounts), whole disks with a request queue
// (isolation::ScanIoDevices). What has no such device (tmpfs, overlayfs,
// virtiofs...) is logged once per process, as the reason it is not throttled.
std::vector<isolation::BlockDevice> SandboxIoDevices(const isolation::MountPlan& mounts);
// The cgroup limits of a sandbox: the policy's memory, pids, cpus and I/O
// caps, the latter on `io_devices`.
isolation::CgroupLimits SandboxCgroupLimits(const policy::Limits& limits,
                                            std::vector<isolation::BlockDevice> io_devices);

// The pre-built matplotlib font cache files (host.cache_dir/matplotlib/
// fontlist-*.json), opened for a mount plan to copy into a sandbox's
// /tmp/matplotlib: appended to `staged`; the fds returned must outlive the
// copy. None when there is no cache (imports then rebuild it, slowly).
std::vector<UniqueFd> OpenFontCache(const HostContext& host,
                                    std::vector<isolation::MountLayout::Staged>* staged);

// The runtime directory: $KILN_RUNTIME_DIR, else next to the binary
// (<exe>/../runtime for a build tree, <exe>/../share/kiln/runtime installed).
Result<std::string> FindRuntimeDir();
// The directory of kiln-sandbox-init: that of $KILN_ZYGOTE_LIB when set (the
// zygote's library lives beside it), else libexec/kiln beside the binary, else
// <exe>/../libexec/kiln, else the one this build made.
Result<std::string> FindLibexecDir();
// $KILN_CACHE_DIR, else /var/cache/kiln (root) or $XDG_CACHE_HOME/kiln.
std::string DefaultCacheDir();

}  // namespace kiln::supervisor
