// Resource limits: always set (core dumps off, open files, file size, cpu time
// per process as a backstop), and, when the cgroup layer is missing and the
// policy accepts best effort, the fallback for memory (RLIMIT_DATA) and
// processes (RLIMIT_NPROC).
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <cstdint>

namespace kiln::isolation {

struct RlimitEntry {
  int resource;
  rlim_t soft;
  rlim_t hard;
};

inline constexpr size_t kMaxRlimits = 12;

struct RlimitPlan {
  RlimitEntry entries[kMaxRlimits];
  size_t count = 0;
  void Add(int resource, rlim_t soft, rlim_t hard) {
    if (count < kMaxRlimits) entries[count++] = {resource, soft, hard};
  }
};

struct RlimitInputs {
  uint64_t open_files;
  uint64_t file_size;  // the workspace cap: no single file can be larger
  double cpu_seconds;
  bool cgroup_fallback;  // true: also RLIMIT_DATA and RLIMIT_NPROC
  uint64_t memory_bytes;
  uint64_t pids;
};

// Supervisor side: the plan.
RlimitPlan BuildRlimitPlan(const RlimitInputs& in);

// Child side: setrlimit each entry. -1 with errno (and *failed = resource).
int ApplyRlimitsInChild(const RlimitPlan& plan, int* failed);

}  // namespace kiln::isolation
