// Every layer of a sandbox, checked from outside through /proc (P11: verify
// after applying): both of its processes (pid 1 and the worker) have a
// seccomp filter, no_new_privs, no capability in any set, the sandbox's own
// host uid and gid, pids 1 and 2 of their own pid namespace, their own cgroup
// in every hierarchy with a limit controller, and seven namespaces none of
// which they share with the checker or the other processes named.
//
// Runs in the pool process (zygote::Pool::Verify, each pooled sandbox before
// it is handed out) and in the supervisor (`kiln run`, kiln-supervise: each
// cold sandbox once its worker has started, before any line of the program
// is sent). docs/threat-model.md, "Pooled sandboxes"; docs/setup-sequence.md
// (P3, S7).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace kiln::supervisor {

struct SandboxFacts {
  pid_t init_pid = 0;  // host pids
  pid_t worker_pid = 0;
  uid_t uid = 0;  // the sandbox's host ids: real, effective, saved and fs
  gid_t gid = 0;
  // The last component of its cgroup's path, in every hierarchy with a limit
  // controller (memory, pids, cpu; v2: the unified one). nullopt: the sandbox
  // has no cgroup (the rlimit fallback of an unprivileged host).
  std::optional<std::string> cgroup_name;
  bool cgroup_v2 = false;
  // Processes whose namespaces the sandbox must not share, beside the
  // checker's own (a zygote).
  std::vector<pid_t> not_shared_with;
  // Where procfs is mounted (tests: a fake tree).
  std::string proc = "/proc";
};

// kInternal naming the process and the layer that is missing.
Status VerifySandbox(const SandboxFacts& facts);

}  // namespace kiln::supervisor
