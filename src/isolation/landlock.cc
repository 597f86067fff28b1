#include "isolation/landlock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "isolation/mount_ns.h"
#include "sys/kernel_defs.h"
#include "sys/syscalls.h"

namespace kiln::isolation {
namespace {

constexpr uint64_t kFsAbi1 =
    LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |
    LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
    LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
    LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
    LANDLOCK_ACCESS_FS_MAKE_SYM;

constexpr uint64_t kRead = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;

// The only trees whose files may be executed: the read-only system tree (and
// the top-level directories a non-merged-/usr host binds instead of links)
// and kiln's own (the pooled sandbox's pid 1 execs kiln-sandbox-init there).
// Nothing written in the sandbox is executable, whatever the mount flags: a
// copy in /tmp or /workspace, a memfd exec'd as /proc/self/fd/N (its file is
// beneath none of these).
constexpr const char* kExecutableTrees[] = {"/usr",   "/bin",   "/sbin",   "/lib",
                                            "/lib32", "/lib64", "/libx32", "/opt/kiln"};

int AddRule(int ruleset, const char* path, uint64_t access) {
  int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return -1;
  sys::LandlockPathBeneathAttr attr{access, fd};
  int rc = sys::LandlockAddPathRule(ruleset, &attr);
  int e = errno;
  ::close(fd);
  errno = e;
  return rc;
}

}  // namespace

Result<LandlockPlan> PlanLandlock() {
  const int abi = sys::LandlockAbiVersion();
  if (abi < 0) {
    return ErrnoError(errno == EOPNOTSUPP ? "Landlock is built but disabled at boot (lsm=)"
                                          : "Landlock is not supported by this kernel",
                      errno, SetupStep::kLandlock);
  }
  LandlockPlan plan;
  plan.abi = abi;
  plan.handled_fs = kFsAbi1;
  if (abi >= 2) plan.handled_fs |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) plan.handled_fs |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 4) plan.handled_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
  if (abi >= 5) plan.handled_fs |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  if (abi >= 6) plan.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
  return plan;
}

int ApplyLandlockInChild(const LandlockPlan& plan) {
  if (plan.abi <= 0) {
    errno = EOPNOTSUPP;
    return -1;
  }
  sys::LandlockRulesetAttr attr{plan.handled_fs, plan.handled_net, plan.scoped};
  const size_t size = plan.abi >= 6   ? sys::kLandlockAttrSizeV6
                      : plan.abi >= 4 ? sys::kLandlockAttrSizeV4
                                      : sys::kLandlockAttrSizeV1;
  int ruleset = sys::LandlockCreateRuleset(&attr, size, 0);
  if (ruleset < 0) return -1;
  // Writable trees get every right but making device nodes (which the missing
  // CAP_MKNOD and nodev refuse anyway).
  const uint64_t writable =
      plan.handled_fs & ~(LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK);
  // Device nodes: read, write (truncate for open(..., "w")), ioctl.
  const uint64_t device =
      plan.handled_fs & (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                         LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV);
  int rc = AddRule(ruleset, "/", kRead);
  for (const char* p : kExecutableTrees) {
    if (rc != 0) break;
    rc = AddRule(ruleset, p, kRead | LANDLOCK_ACCESS_FS_EXECUTE);
    if (rc != 0 && errno == ENOENT) rc = 0;  // this host has no such tree
  }
  for (const char* p : {kWorkspacePath, kTmpPath, kShmPath}) {
    if (rc == 0) rc = AddRule(ruleset, p, writable & ~LANDLOCK_ACCESS_FS_EXECUTE);
  }
  char path[32];
  for (const char* node : kDeviceNodes) {
    if (rc != 0) break;
    // "/dev/" + node without snprintf (not async-signal-safe).
    size_t n = 0;
    for (const char* s = "/dev/"; *s != '\0'; ++s) path[n++] = *s;
    for (const char* s = node; *s != '\0' && n < sizeof(path) - 1; ++s) path[n++] = *s;
    path[n] = '\0';
    rc = AddRule(ruleset, path, device);
  }
  if (rc == 0) rc = sys::LandlockRestrictSelf(ruleset, 0);
  int e = errno;
  ::close(ruleset);
  errno = e;
  return rc;
}

}  // namespace kiln::isolation
