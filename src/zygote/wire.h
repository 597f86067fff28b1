// The records between the pool (kiln, src/zygote/zygote.cc) and a zygote's
// libkiln_zygote.so (zygote_lib.cc) on the zygote's control socket (a
// SOCK_SEQPACKET socketpair, fd 3 of the zygote). Both ends are built from
// this header in one build, so they are plain structs, fixed size, checked by
// size and magic; anything else ends the zygote (the pool restarts it).
//
//   pool -> zygote   ZygoteConfig, then the seccomp program (sock_filter[])
//   zygote -> pool   ZygoteReady, once the preload list is imported
//   pool -> zygote   ForkRequest (SCM_RIGHTS: sync, runtime, stdout, stderr,
//                    and the child's /dev/shm, /tmp and /workspace: detached
//                    tmpfs mounts made by the pool)
//
// The zygote is trusted code (it runs no program), but it is the parent of
// every sandbox of its profile: the pool checks each child from outside
// before handing it out (pool.cc, Verify), so a zygote that misbehaves can
// only waste children, never hand out one that lacks a layer.
#pragma once

#include <cstdint>

#include "isolation/landlock.h"
#include "isolation/rlimits.h"

namespace kiln::zygote {

inline constexpr uint32_t kWireMagic = 0x6b7a7931;  // "kzy1"

struct ZygoteConfig {
  uint32_t magic = kWireMagic;
  uint32_t seccomp_length = 0;  // instructions in the next record
  uint64_t workspace_bytes = 0;
  uint64_t tmp_bytes = 0;
  uint64_t shm_bytes = 0;
  uint32_t first_child_id = 0;  // child `slot` gets uid/gid first_child_id + slot
  uint32_t max_slots = 0;       // in the zygote's user namespace
  int32_t last_cap = 40;
  uint32_t reserved = 0;
  isolation::RlimitPlan rlimits;
  isolation::LandlockPlan landlock;
  char hostname[64] = "kiln";
};

struct ZygoteReady {
  uint32_t magic = kWireMagic;
  int32_t preload_failures = 0;  // imports that failed (named on the zygote's stderr)
  // 1: each child's first process shares the zygote's memory
  // (kiln_zygote_spawn); 0: the zygote has threads and forks as os.fork().
  uint32_t spawn = 0;
};

inline constexpr int kForkRequestFds = 7;

struct ForkRequest {
  uint32_t magic = kWireMagic;
  uint32_t slot = 0;
};

}  // namespace kiln::zygote
