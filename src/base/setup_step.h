// SetupStep names every step of the sandbox's setup sequence (docs/setup-sequence.md).
// The child reports the step that failed, the supervisor logs it, and bench/ times it:
// a new step appears in all three at once. It lives in base/ because kiln::Error carries it.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

enum class SetupStep : uint8_t {
  kNone = 0,
  // Supervisor side, before and around clone3.
  kPlan,          // building the ChildPlan (paths, BPF, fds)
  kCgroupCreate,  // creating the sandbox's cgroup and writing its limits
  kClone,         // clone3 with the namespace flags
  kUserMaps,      // writing uid_map, setgroups, gid_map
  kCgroupAttach,  // moving the child into its cgroup (v1) / CLONE_INTO_CGROUP (v2)
  kStartProgram,  // sending the program to the runtime
  // Child side, in the order RunChild() runs them.
  kDeathSignal,    // PR_SET_PDEATHSIG
  kWaitParent,     // waiting for the supervisor's "maps written" byte
  kSetIds,         // setgroups, setresgid, setresuid to the inside uid
  kMountPrivate,   // MS_REC|MS_PRIVATE on /
  kMountRoot,      // tmpfs new root
  kMountBinds,     // read-only binds of /usr and friends, /etc files, /dev nodes
  kMountProc,      // fresh /proc and its masks
  kMountTmpfs,     // /tmp, /dev/shm, workspace
  kStageFiles,     // copying --file inputs and the font cache into the new tree
  kPivotRoot,      // pivot_root and detach the old root
  kRemountRootRo,  // the root tmpfs becomes read-only
  kHostname,       // sethostname / setdomainname
  kLoopback,       // bringing lo up in the empty net namespace
  kWorkspaceFd,    // handing the supervisor an O_PATH fd of the workspace
  kDropCaps,       // bounding, ambient, inheritable, permitted, effective
  kRlimits,        // setrlimit for each limit in the plan
  kNoNewPrivs,     // PR_SET_NO_NEW_PRIVS
  kLandlock,       // ruleset, rules, restrict_self
  kSeccomp,        // the BPF filter, last
  kForkWorker,     // pid 1 forks the process that runs the program
  kStdio,          // stdin /dev/null, stdout/stderr pipes
  kCloseFds,       // close_range of every fd the plan does not list
  kExec,           // execve of the interpreter
  // A pooled sandbox, forked from its profile's zygote (src/zygote, ADR 0011).
  kZygote,           // the zygote: start, preload, answer a fork request
  kChildUserNs,      // the child's own user namespace and its one-uid maps
  kChildNamespaces,  // unshare of the mount, pid, net, ipc, uts namespaces
  kWaitAttach,       // waiting for the pool to put pid 1 into its cgroup
  kVerify,           // the pool's check of the child from outside (/proc)
  kCount,
};

std::string_view ToString(SetupStep step);

}  // namespace kiln
