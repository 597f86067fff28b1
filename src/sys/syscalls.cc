#include "sys/syscalls.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace kiln::sys {

pid_t Clone3(clone_args* args) {
  return static_cast<pid_t>(syscall(SYS_clone3, args, sizeof(clone_args)));
}

uint64_t PointerToU64(const void* p) { return reinterpret_cast<uintptr_t>(p); }

int PidfdOpen(pid_t pid, unsigned flags) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, flags));
}

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

int PivotRoot(const char* new_root, const char* put_old) {
  return static_cast<int>(syscall(SYS_pivot_root, new_root, put_old));
}

int CloseRange(unsigned first, unsigned last, unsigned flags) {
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

int RawSetresuid(uid_t id) { return static_cast<int>(syscall(SYS_setresuid, id, id, id)); }

int RawSetresgid(gid_t id) { return static_cast<int>(syscall(SYS_setresgid, id, id, id)); }

int Openat2(int dirfd, const char* path, const open_how* how) {
  long r;
  do {
    r = syscall(SYS_openat2, dirfd, path, how, sizeof(open_how));
  } while (r < 0 && errno == EINTR);
  return static_cast<int>(r);
}

int OpenTree(int dirfd, const char* path, unsigned flags) {
  return static_cast<int>(syscall(SYS_open_tree, dirfd, path, flags));
}

int MoveMountFromFd(int from_fd, const char* to_path) {
  return static_cast<int>(
      syscall(SYS_move_mount, from_fd, "", AT_FDCWD, to_path, MOVE_MOUNT_F_EMPTY_PATH));
}

int MakeTmpfs(uint64_t size_bytes, unsigned mode, uid_t uid, gid_t gid, unsigned attr) {
  const int fs = static_cast<int>(syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC));
  if (fs < 0) return -1;
  char size[32], octal[16];
  std::snprintf(size, sizeof size, "%llu", static_cast<unsigned long long>(size_bytes));
  std::snprintf(octal, sizeof octal, "%o", mode & 07777u);
  int mnt = -1;
  if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", "tmpfs", 0) == 0 &&
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", size, 0) == 0 &&
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", octal, 0) == 0 &&
      syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0) {
    mnt = static_cast<int>(syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attr));
  }
  const int saved = errno;
  ::close(fs);
  if (mnt >= 0 && ::fchownat(mnt, "", uid, gid, AT_EMPTY_PATH) != 0) {
    const int e = errno;
    ::close(mnt);
    errno = e;
    return -1;
  }
  if (mnt < 0) errno = saved;
  return mnt;
}

int LandlockAbiVersion() {
  return static_cast<int>(
      syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION));
}

int LandlockCreateRuleset(const LandlockRulesetAttr* attr, size_t size, uint32_t flags) {
  return static_cast<int>(syscall(SYS_landlock_create_ruleset, attr, size, flags));
}

int LandlockAddPathRule(int ruleset_fd, const LandlockPathBeneathAttr* attr) {
  return static_cast<int>(
      syscall(SYS_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, attr, 0));
}

int LandlockRestrictSelf(int ruleset_fd, uint32_t flags) {
  return static_cast<int>(syscall(SYS_landlock_restrict_self, ruleset_fd, flags));
}

int SeccompSetModeFilter(unsigned flags, const sock_fprog* prog) {
  return static_cast<int>(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, prog));
}

int CapsetClearAll() {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[2] = {};
  return static_cast<int>(syscall(SYS_capset, &header, data));
}

int Capset(uint64_t effective, uint64_t permitted, uint64_t inheritable) {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[2] = {};
  data[0].effective = static_cast<uint32_t>(effective);
  data[1].effective = static_cast<uint32_t>(effective >> 32);
  data[0].permitted = static_cast<uint32_t>(permitted);
  data[1].permitted = static_cast<uint32_t>(permitted >> 32);
  data[0].inheritable = static_cast<uint32_t>(inheritable);
  data[1].inheritable = static_cast<uint32_t>(inheritable >> 32);
  return static_cast<int>(syscall(SYS_capset, &header, data));
}

int WriteAll(int fd, const void* buf, size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace kiln::sys
