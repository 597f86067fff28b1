// Landlock: an unprivileged LSM layer that holds even if the mount layout were
// bypassed. Writes are allowed only beneath /workspace, /tmp and /dev/shm
// (and to the five device nodes); everything else is read and execute only.
// ABI >= 4: TCP bind and connect are refused. ABI >= 6: signals and abstract
// unix sockets are scoped to the sandbox's own domain.
//
// The ABI is the highest the kernel reports (sys/kernel_defs.h defines the
// constants Debian's headers lack). The supervisor reads it before clone; the
// child builds the ruleset from fixed paths with no allocation.
#pragma once

#include <cstdint>

#include "base/result.h"

namespace kiln::isolation {

struct LandlockPlan {
  int abi = 0;  // 0 = not available (then the policy decides: refuse or go on)
  uint64_t handled_fs = 0;
  uint64_t handled_net = 0;
  uint64_t scoped = 0;
};

// Supervisor side: the kernel's ABI (or the errno why there is none) and the
// rights to handle at that ABI.
Result<LandlockPlan> PlanLandlock();

// Child side, after pivot_root: creates the ruleset, adds the rules, and
// restricts the calling process. -1 with errno on failure.
int ApplyLandlockInChild(const LandlockPlan& plan);

}  // namespace kiln::isolation
