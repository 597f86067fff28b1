// The child side of seccomp, apart from the compiler (seccomp.cc, libseccomp):
// the zygote's per-child library (src/zygote) links it without libseccomp.
#include <cerrno>

#include "isolation/seccomp.h"
#include "sys/syscalls.h"

namespace kiln::isolation {

int ApplySeccompInChild(const sock_filter* program, size_t length) {
  // sock_fprog.len is an unsigned short, and the kernel refuses more than
  // BPF_MAXINSNS anyway; refuse here rather than truncate.
  if (program == nullptr || length == 0 || length > BPF_MAXINSNS) {
    errno = EINVAL;
    return -1;
  }
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(length);
  // The kernel copies the program and never writes through this pointer.
  prog.filter = const_cast<sock_filter*>(program);
  // No flags: TSYNC is moot in a single-threaded child, and the kernel's
  // default speculation mitigations for seccomp tasks stay on.
  return sys::SeccompSetModeFilter(0, &prog);
}

}  // namespace kiln::isolation
