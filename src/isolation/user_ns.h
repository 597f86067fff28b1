// User namespace: the sandbox runs as a non-root uid inside (1000, "sandbox")
// that maps to an unprivileged uid outside. As root, kiln gives each concurrent
// sandbox its own outer uid from a reserved range (UidSlot), so two sandboxes
// never share a host identity; as an unprivileged user the only possible map is
// the caller's own uid (a degraded layer that `kiln doctor` reports).
#pragma once

#include <sys/types.h>

#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace kiln::isolation {

inline constexpr uid_t kInsideUid = 1000;
inline constexpr gid_t kInsideGid = 1000;
// Outer ids for root mode: [kSlotUidBase, kSlotUidBase + kSlotCount). Far above
// Debian's subuid allocations (100000 + 65536 n) and below 2^31.
inline constexpr uid_t kSlotUidBase = 1879048192;  // 0x70000000
inline constexpr unsigned kSlotCount = 65536;

// A host uid/gid reserved for one sandbox while this object lives.
class UidSlot final {
 public:
  // Root: locks a free slot file under `lock_dir` (flock, so a crashed kiln
  // frees its slots) and returns base + slot. Non-root: the caller's own ids.
  static Result<UidSlot> Acquire(const std::string& lock_dir);
  uid_t outer_uid() const { return uid_; }
  gid_t outer_gid() const { return gid_; }
  bool privileged() const { return privileged_; }

 private:
  UidSlot() = default;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  bool privileged_ = false;
  UniqueFd lock_;
};

// Supervisor side, after clone and before the child's first step: writes
// uid_map, setgroups ("deny" only when unprivileged, which the kernel demands;
// as root the child drops its supplementary groups itself) and gid_map.
Status WriteIdMapsFromParent(pid_t child, const UidSlot& slot);

// Child side, right after the maps exist: drop supplementary groups (root mode),
// then setresgid/setresuid to the inside ids. The outer root is unmapped, so
// the kernel's setuid fixup keeps the namespace's capabilities for the setup
// steps that follow. -1 with errno on failure.
int SetInsideIdsInChild(bool drop_groups);

}  // namespace kiln::isolation
