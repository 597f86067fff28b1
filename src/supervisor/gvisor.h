// The gVisor backend (docs/adr/0021): the same runtime and protocol, run
// under gVisor's `runsc` instead of kiln's own jail.
//
// The program's system calls are answered by the Sentry (gVisor's kernel in
// user space, itself under a seccomp filter) rather than by the host's
// kernel. kiln builds the sandbox's root exactly as for the native jail (the
// same isolation::BuildMountPlan: /usr and the allowed /etc files bound
// read-only, the runtime copied, size-capped tmpfs for /workspace, /tmp and
// /dev/shm made by the host's root) in a mount namespace of a helper process
// of its own, and hands it to `runsc run` as an OCI bundle: the root
// read-only, the three tmpfs bound read-write, no network (--network=none),
// the runtime channel on the program's fd 0. runsc and everything it starts
// (its gofer and the Sentry) run in the sandbox's cgroup, so memory (no
// swap), pids and cpu are limited as for the native jail; the supervisor's
// own limits (wall clock, cpu time, output caps) are the shared ones.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "isolation/cgroup.h"
#include "policy/policy.h"
#include "supervisor/host.h"
#include "supervisor/jail.h"

namespace kiln::supervisor {

// The platform runsc runs the Sentry on. ptrace works on every host; kvm
// needs /dev/kvm and, on a nested virtual machine like this project's,
// hung at start, so it is not used.
inline constexpr const char* kGvisorPlatform = "ptrace";
// What the Sentry, the gofer and runsc itself use beyond the program's own
// memory and tasks; added to the policy's limits in the sandbox's cgroup,
// which holds all of them (measured: docs/adr/0021).
inline constexpr uint64_t kGvisorMemoryOverhead = 32ULL << 20;
// The program's own tasks are limited inside, by the Sentry (RLIMIT_NPROC =
// the policy's pids); the host's pids cgroup is the backstop for all of
// gVisor's host tasks, which with the ptrace platform include stub processes
// for each of the program's address spaces: kGvisorPidsPerTask per task.
inline constexpr uint64_t kGvisorPidsOverhead = 192;
inline constexpr uint64_t kGvisorPidsPerTask = 8;

// Whether this host can run the gVisor backend: runsc found ($KILN_RUNSC, an
// absolute path, or the first on PATH, /usr/bin, /usr/sbin) and its version, kiln root (runsc's
// rootful mode: its gofer and the helper's mount namespace), cgroups present. `missing` says why
// not.
struct GvisorHost {
  std::string runsc;  // absolute path; empty when not found
  std::string version;
  std::optional<std::string> missing;
  // "KILN_SECCOMP_BPF=<hex>": kiln's seccomp filter (the native jail's, but
  // memfd_create refused: SeccompOptions::refuse_memfd) for the launcher to
  // install (launch.py --seccomp-from-env); empty when the host has none
  // compiled (then nothing is launched).
  std::string seccomp_env;
};
// Probed once per process and kept: the spawner probes at start when a
// profile asks for gVisor, so that its supervisors (its forks) inherit the
// answer instead of running runsc --version on every launch.
const GvisorHost& ProbeGvisorHost(const HostContext& host);

// The OCI runtime spec of one sandbox (pure; unit-tested).
struct GvisorSpecInputs {
  std::vector<std::string> argv, env;
  uid_t uid = 1000;
  gid_t gid = 1000;
  std::string hostname = "kiln";
  std::string root;  // the staging root (host path in the helper's namespace)
  // Host paths (in the helper's namespace) bound read-write at /workspace,
  // /tmp and /dev/shm.
  std::string workspace, tmp, shm;
  uint64_t open_files = 1024;
  // RLIMIT_NPROC: the Sentry counts the program's tasks (processes and
  // threads), which are not host tasks one for one; 0: none.
  uint64_t tasks = 0;
  uint64_t file_size = 0;
  double cpu_seconds = 30;
};
nlohmann::json GvisorSpec(const GvisorSpecInputs& in);

// A launched gVisor sandbox: runsc started in the cgroup, the runtime's
// channel and capture pipes (parent ends, non-blocking), the workspace.
// A launched gVisor sandbox: runsc started by a keeper process (the helper
// that built its root, then forked runsc and waits for it) which reports
// runsc's wait status on `ctl` and ends runsc when `ctl`'s last holder is gone.
struct GvisorLaunch {
  std::unique_ptr<isolation::Cgroup> cgroup;
  std::string cgroup_name;
  UniqueFd runtime, out, err, workspace;
  UniqueFd ctl;           // the keeper's control socket
  UniqueFd keeper_pidfd;  // readable once the keeper (so runsc) has ended
  pid_t keeper_pid = 0;   // the caller's child
  pid_t runsc_pid = 0;    // the keeper's child
  UniqueFd log;           // runsc's own log (a memfd), for a failed start
  uid_t uid = 0;
  gid_t gid = 0;
  // When the spec was built, the cgroup made, the helper forked (and in the
  // cgroup), the root built by the helper (it then starts runsc): phases_ms.
  std::chrono::steady_clock::time_point t_planned, t_cgroup, t_cloned, t_root;
};

struct GvisorLaunchOptions {
  std::vector<std::pair<std::string, std::string>> env;
  double rlimit_cpu_s = 30;
  int nice = 0;  // of runsc and all it starts (a pool's refill: above 0)
  // The preloads imported before the runtime's hello (a pool's sandbox,
  // started ahead of its job), not at the first execute.
  bool preload_before_hello = false;
};

// Builds the root, starts runsc; returns once runsc is starting (the
// runtime's hello on `runtime` says it is ready). Not thread-safe (forks).
Result<GvisorLaunch> LaunchGvisor(const HostContext& host, const policy::SandboxPolicy& policy,
                                  const GvisorLaunchOptions& options);

// The Jail of a sandbox the caller launched (it reaps the keeper).
std::unique_ptr<Jail> GvisorJailOf(GvisorLaunch& launch);
// The Jail of a pooled sandbox launched elsewhere (the pool process reaps its
// keeper): its control socket and the keeper's pidfd.
std::unique_ptr<Jail> AdoptGvisorJail(UniqueFd ctl, UniqueFd keeper_pidfd);

}  // namespace kiln::supervisor
