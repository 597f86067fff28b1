// The fixed-size records on the sandbox's setup channel (a SOCK_SEQPACKET
// socketpair), in both directions. Fixed size so the child can send them with
// no allocation and the supervisor can refuse anything else (P5, P19).
#pragma once

#include <cstdint>

namespace kiln::child {

enum class SyncTag : char {
  kMapsWritten = 'M',    // supervisor -> pid 1: uid/gid maps exist, go on
  kWorkspaceFd = 'D',    // pid 1 -> supervisor: O_PATH fd of /workspace (SCM_RIGHTS)
  kWorkerStarted = 'W',  // worker -> supervisor, just before execve (SCM_CREDENTIALS
                         // gives its pid in the supervisor's namespace)
  kWorkerExited = 'X',   // pid 1 -> supervisor: the worker's wait status
  kFailure = 'F',        // either -> supervisor: a setup step failed
  // A pooled sandbox (src/zygote), and a cold one on cgroup v1: its pid 1 asks
  // the pool (the supervisor) to move it into its cgroup (SCM_CREDENTIALS
  // gives the pid) and waits for kAttached before it drops anything or forks
  // the worker, which then says kWorkerStarted.
  kAttachMe = 'A',  // pid 1 -> pool / supervisor
  kAttached = 'G',  // pool / supervisor -> pid 1: in its cgroup, go on
};

struct SyncMessage {
  SyncTag tag;
  uint8_t step;  // kiln::SetupStep, for kFailure
  uint16_t reserved;
  int32_t err;     // errno, for kFailure
  int32_t detail;  // kFailure: index of the failing mount op / rlimit, or -1
  int32_t status;  // kWorkerExited: wait status
};
static_assert(sizeof(SyncMessage) == 16);

}  // namespace kiln::child
