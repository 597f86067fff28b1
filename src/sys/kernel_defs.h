// The one place that defines kernel constants newer than Debian 12's headers
// (P13). Debian's <linux/landlock.h> may stop at ABI 2; the kernels kiln runs on
// report up to ABI 7. Each block names the kernel version that added it.
#pragma once

#include <linux/landlock.h>
#include <linux/sched.h>
#include <sys/syscall.h>

#include <cstdint>

// --- Landlock (include/uapi/linux/landlock.h) ---
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE  // ABI 3, Linux 6.2
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV  // ABI 5, Linux 6.10
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP  // ABI 4, Linux 6.7
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET  // ABI 6, Linux 6.12
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif
#ifndef LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF  // ABI 7, Linux 6.15
#define LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF (1U << 0)
#define LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1)
#define LANDLOCK_RESTRICT_SELF_LOG_SUBDOMAINS_OFF (1U << 2)
#endif

namespace kiln::sys {

// Our own copy of struct landlock_ruleset_attr at its ABI 6 size: older headers
// lack handled_access_net and scoped. The kernel accepts a smaller size from an
// older ABI, so callers pass the size that matches the ABI they target.
struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI >= 4
  uint64_t scoped;              // ABI >= 6
};
inline constexpr size_t kLandlockAttrSizeV1 = sizeof(uint64_t);
inline constexpr size_t kLandlockAttrSizeV4 = 2 * sizeof(uint64_t);
inline constexpr size_t kLandlockAttrSizeV6 = 3 * sizeof(uint64_t);

struct LandlockPathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

}  // namespace kiln::sys

// --- clone3 (Linux 5.3), CLONE_INTO_CGROUP (5.7), close_range (5.9) ---
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_open_tree  // Linux 5.2
#define SYS_open_tree 428
#define SYS_move_mount 429
#endif
#ifndef SYS_fsopen  // Linux 5.2
#define SYS_fsopen 430
#define SYS_fsconfig 431
#define SYS_fsmount 432
#endif
#ifndef SYS_open_tree_attr  // Linux 6.15
#define SYS_open_tree_attr 467
#endif
#ifndef LANDLOCK_RULE_NET_PORT
#define LANDLOCK_RULE_NET_PORT 2
#endif
