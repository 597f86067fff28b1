// The thin layer that makes raw system calls (P13): only src/sys/ may call
// syscall(2) or reinterpret_cast kernel structures; ci/check-rules enforces it.
//
// Every function here is async-signal-safe and allocation-free, so both sides
// of the fork may use them: they return the raw result (-1 with errno set on
// failure) and retry on EINTR where the call may be interrupted. The supervisor
// wraps failures into kiln::Error at its call sites.
#pragma once

#include <linux/openat2.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "sys/kernel_defs.h"

struct clone_args;
struct sock_fprog;

namespace kiln::sys {

// clone3(2) without a new stack: behaves like fork() in the child (returns 0)
// and returns the child's pid in the parent. The caller must be able to fork
// safely (single-threaded, or the child restricts itself to async-signal-safe
// calls). `args` is filled by the caller.
pid_t Clone3(clone_args* args);
// The u64 form of a pointer that clone_args and similar kernel ABIs take.
uint64_t PointerToU64(const void* p);

int PidfdOpen(pid_t pid, unsigned flags);
int PidfdSendSignal(int pidfd, int sig);
int PivotRoot(const char* new_root, const char* put_old);
int CloseRange(unsigned first, unsigned last, unsigned flags);
int Openat2(int dirfd, const char* path, const open_how* how);
// open_tree(2) (Linux 5.2) and move_mount(2): a detached copy of a mount tree
// that can be attached elsewhere later, even after its source path is covered.
int OpenTree(int dirfd, const char* path, unsigned flags);
int MoveMountFromFd(int from_fd, const char* to_path);
// A new tmpfs as a detached mount (fsopen, fsconfig, fsmount: Linux 5.2),
// with `attr` MOUNT_ATTR_* flags, its root chowned to uid:gid. The
// superblock's owner is the caller's fsuid (what /proc/PID/mountinfo prints
// as `uid=` unless it is the host's root): a host-root caller makes a tmpfs
// that names no one. The fd is close-on-exec; attach it with MoveMountFromFd.
// -1 with errno.
int MakeTmpfs(uint64_t size_bytes, unsigned mode, uid_t uid, gid_t gid, unsigned attr);

// Landlock. LandlockAbiVersion() returns the ABI the kernel reports, or -1
// with errno (ENOSYS: not built; EOPNOTSUPP: disabled at boot).
int LandlockAbiVersion();
int LandlockCreateRuleset(const LandlockRulesetAttr* attr, size_t size, uint32_t flags);
int LandlockAddPathRule(int ruleset_fd, const LandlockPathBeneathAttr* attr);
int LandlockRestrictSelf(int ruleset_fd, uint32_t flags);

// seccomp(SECCOMP_SET_MODE_FILTER, flags, prog).
int SeccompSetModeFilter(unsigned flags, const sock_fprog* prog);

// capset(2) with every set empty (version 3 header, both 32-bit words).
int CapsetClearAll();
// capset(2) of the calling thread with these 64-bit sets.
int Capset(uint64_t effective, uint64_t permitted, uint64_t inheritable);

// setresuid(2)/setresgid(2) of the calling thread alone, all three ids to
// `id`. glibc's wrappers apply a change of ids to every thread of the process
// (signalling them), which a process that shares another's memory
// (clone(CLONE_VM)) must not attempt.
int RawSetresuid(uid_t id);
int RawSetresgid(gid_t id);

// Write all of `len` bytes, retrying on EINTR and short writes. 0 or -1/errno.
int WriteAll(int fd, const void* buf, size_t len);

}  // namespace kiln::sys
