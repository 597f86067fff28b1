#include "isolation/rlimits.h"

#include <cmath>

namespace kiln::isolation {

RlimitPlan BuildRlimitPlan(const RlimitInputs& in) {
  RlimitPlan p;
  p.Add(RLIMIT_CORE, 0, 0);
  p.Add(RLIMIT_NOFILE, in.open_files, in.open_files);
  p.Add(RLIMIT_FSIZE, in.file_size, in.file_size);
  // Per process: SIGXCPU at the soft limit, SIGKILL one second later. The
  // supervisor enforces the sandbox-wide total from the cgroup's accounting.
  const auto cpu = static_cast<rlim_t>(std::ceil(in.cpu_seconds));
  p.Add(RLIMIT_CPU, cpu, cpu + 1);
  p.Add(RLIMIT_MEMLOCK, 64 << 10, 64 << 10);
  p.Add(RLIMIT_MSGQUEUE, 0, 0);
  if (in.cgroup_fallback) {
    p.Add(RLIMIT_DATA, in.memory_bytes, in.memory_bytes);
    p.Add(RLIMIT_NPROC, in.pids, in.pids);
  } else {
    // The cgroup limits memory. A server's supervisor caps its own heap with
    // a soft RLIMIT_DATA, which the clone inherits: lifted here to the hard
    // limit (ApplyRlimitsInChild), so the sandbox gets what its policy says.
    p.Add(RLIMIT_DATA, RLIM_INFINITY, RLIM_INFINITY);
  }
  return p;
}

int ApplyRlimitsInChild(const RlimitPlan& plan, int* failed) {
  for (size_t i = 0; i < plan.count; ++i) {
    rlimit rl{plan.entries[i].soft, plan.entries[i].hard};
    if (rl.rlim_max == RLIM_INFINITY) {
      // "As high as allowed": up to the hard limit we have, which only an
      // unprivileged process's own setrlimit could not raise.
      rlimit now{};
      if (::getrlimit(plan.entries[i].resource, &now) == 0) {
        rl.rlim_max = now.rlim_max;
        if (rl.rlim_cur > now.rlim_max) rl.rlim_cur = now.rlim_max;
      }
    }
    if (::setrlimit(plan.entries[i].resource, &rl) != 0) {
      *failed = plan.entries[i].resource;
      return -1;
    }
  }
  return 0;
}

}  // namespace kiln::isolation
