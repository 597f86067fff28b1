#include "isolation/caps.h"

#include <linux/capability.h>
#include <sys/prctl.h>

#include <cerrno>
#include <fstream>

#include "sys/syscalls.h"

namespace kiln::isolation {

int DropAllCapabilitiesInChild(int last_cap) {
  for (int cap = 0; cap <= last_cap; ++cap) {
    // EINVAL: the kernel does not know this cap; fine, nothing to drop.
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return -1;
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return -1;
  // SECBIT_NOROOT|SECBIT_NOROOT_LOCKED|SECBIT_NO_SETUID_FIXUP... are not needed:
  // the sandbox uid is not root in its namespace and no_new_privs follows.
  return sys::CapsetClearAll();
}

int KeepOnlySetIdCapsInChild(int last_cap) {
  for (int cap = 0; cap <= last_cap; ++cap) {
    if (cap == CAP_SETUID || cap == CAP_SETGID) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return -1;
  }
  constexpr uint64_t kKeep = (1ULL << CAP_SETUID) | (1ULL << CAP_SETGID);
  if (sys::Capset(kKeep, kKeep, kKeep) != 0) return -1;
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return -1;
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETUID, 0, 0) != 0) return -1;
  return ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETGID, 0, 0);
}

int ReadLastCap() {
  std::ifstream in("/proc/sys/kernel/cap_last_cap");
  int v = CAP_LAST_CAP;
  if (in) in >> v;
  return v;
}

}  // namespace kiln::isolation
