// seccomp-bpf: the last layer of the child's setup (docs/setup-sequence.md).
//
// The filter is compiled in the supervisor, before clone, by libseccomp; the
// child only installs the finished program (it may not allocate). Every program
// starts with libseccomp's architecture check: a foreign ABI (i386 through
// int 0x80, x32 through __X32_SYSCALL_BIT) kills the process (SIGSYS, reported
// as status policy_violation). Native calls are an allow-list (ADR 0003): the
// calls Debian's python3, its scientific stack, the runtime and the common
// binaries in /usr make, measured by tools/seccomp/measure.py; every other call
// answers ENOSYS, so that libc and CPython fall back or raise an OSError the
// agent can read, and the calls that are a known way out answer EPERM. The
// lists are in seccomp.cc and docs/threat-model.md.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace kiln::isolation {

struct SeccompOptions {
  // Network is always off in this version; when a profile allows egress
  // (through a host-side proxy), AF_INET/AF_INET6 sockets become allowed.
  bool allow_inet_sockets = false;
  // memfd_create answered EPERM instead of allowed: the gVisor backend's
  // filter (docs/adr/0021), where no vm.memfd_noexec keeps code written to a
  // memfd from running (natively the sysctl does, and memfds stay allowed).
  bool refuse_memfd = false;
  // The architecture to build for (SCMP_ARCH_*, which are AUDIT_ARCH_*
  // values); 0 is the native one, the only one a sandbox ever installs. Tests
  // build the others' programs for their golden files.
  uint32_t arch = 0;
};

using BpfProgram = std::vector<sock_filter>;

// Supervisor side. Builds the filter for the native architecture, then checks
// libseccomp's output with EvaluateSeccomp (read allowed, mount EPERM, an
// unlisted call ENOSYS, foreign arch and x32 killed). Errors: kInternal (step kPlan) when
// libseccomp fails (names the rule; sys_errno is its -rc) or the self-check does not hold.
Result<BpfProgram> CompileSeccompFilter(const SeccompOptions& options);

// The names on the allow-list, as written (some do not exist on every
// architecture): for the tests that check the measured set against it.
std::vector<std::string> SeccompAllowedCallNames();

// Child side, async-signal-safe: installs `program` with seccomp(2). Requires
// no_new_privs (or CAP_SYS_ADMIN). Returns 0 or -1 with errno (EINVAL without
// calling the kernel when `length` is 0 or above BPF_MAXINSNS).
int ApplySeccompInChild(const sock_filter* program, size_t length);

// Pure: runs classic BPF `program` over `data` as the kernel would and returns
// the SECCOMP_RET_* action word (with its data bits). Used by the filter's
// self-check, the unit tests and their golden decision tables. A program that
// seccomp(2) would refuse (bad opcode, jump or load out of range, no final RET,
// scratch word read before written, ...) yields SECCOMP_RET_KILL_PROCESS; a
// division by zero ends the run with 0 (SECCOMP_RET_KILL_THREAD), as in the
// kernel.
uint32_t EvaluateSeccomp(const BpfProgram& program, const seccomp_data& data);

}  // namespace kiln::isolation
