// Escape tier: system calls the seccomp filter denies (src/isolation/seccomp.cc,
// kDeniedCalls: SCMP_ACT_ERRNO(EPERM)), calls off its allow-list (ENOSYS), and
// the foreign ABIs it kills (SCMP_FLTATR_ACT_BADARCH = KILL_PROCESS).
//
// EPERM alone does not prove that seccomp answered: the dropped capabilities
// give EPERM for most of these too. So each case also makes the call with
// arguments for which the kernel itself would answer differently (success,
// EFAULT or EINVAL), as bubblewrap's try-syscall.c does: only the filter,
// which looks at the syscall number before any argument, says EPERM to both.
// x86_64 syscall numbers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "testlib/host_facts.h"
#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

struct DeniedCall {
  const char* name;      // test name
  const char* code;      // Python lines printing "<label>: <ERRNO>"
  const char* expected;  // exact stdout
};

class DeniedSyscallEscape : public SandboxTest, public ::testing::WithParamInterface<DeniedCall> {};

TEST_P(DeniedSyscallEscape, IsEPERMFromSeccomp) {
  const DeniedCall& c = GetParam();
  const JsonRun r = RunProbe(c.code);
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  // The same on the gVisor backend: kiln's filter is installed there too
  // (the Sentry applies it before its own code sees the call).
  EXPECT_EQ(r.out(), c.expected) << r.Describe();
}

INSTANTIATE_TEST_SUITE_P(
    Calls, DeniedSyscallEscape,
    ::testing::Values(
        // The kernel: EPERM without CAP_SYS_ADMIN; with a NULL target, EFAULT
        // (the path is copied before the capability check).
        DeniedCall{"mount", R"PY(
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
ctypes.set_errno(0)
rc = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
print("mount tmpfs on /tmp:", "OK" if rc == 0 else errname(ctypes.get_errno()))
report_syscall("mount NULL target", 165, 0, 0, 0, 0, 0)
)PY",
                   "mount tmpfs on /tmp: EPERM\nmount NULL target: EPERM\n"},
        // The kernel: a nested user namespace could well be allowed; and
        // unshare(0) always succeeds.
        DeniedCall{"unshare", R"PY(
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
ctypes.set_errno(0)
rc = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
print("unshare(NEWUSER|NEWNS):", "OK" if rc == 0 else errname(ctypes.get_errno()))
ctypes.set_errno(0)
rc = libc.unshare(0)
print("unshare(0):", "OK" if rc == 0 else errname(ctypes.get_errno()))
)PY",
                   "unshare(NEWUSER|NEWNS): EPERM\nunshare(0): EPERM\n"},
        // The kernel: setns on our own net namespace needs CAP_SYS_ADMIN
        // (EPERM); on fd 0 (/dev/null, not a namespace) it is EINVAL.
        DeniedCall{"setns", R"PY(
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
ctypes.set_errno(0)
rc = libc.setns(fd, 0x40000000)
print("setns(own netns):", "OK" if rc == 0 else errname(ctypes.get_errno()))
ctypes.set_errno(0)
rc = libc.setns(0, 0)
print("setns(/dev/null):", "OK" if rc == 0 else errname(ctypes.get_errno()))
)PY",
                   "setns(own netns): EPERM\nsetns(/dev/null): EPERM\n"},
        // glibc has no pivot_root wrapper. The kernel: EPERM without
        // CAP_SYS_ADMIN; NULL paths, EFAULT.
        DeniedCall{"pivot_root", R"PY(
report_syscall("pivot_root(/tmp, /tmp)", 155, cstr("/tmp"), cstr("/tmp"))
report_syscall("pivot_root(NULL, NULL)", 155, 0, 0)
)PY",
                   "pivot_root(/tmp, /tmp): EPERM\npivot_root(NULL, NULL): EPERM\n"},
        // The kernel: attaching to init (non-dumpable) is EPERM too, but
        // PTRACE_TRACEME would succeed (our parent is init, same uid).
        DeniedCall{"ptrace", R"PY(
PTRACE_TRACEME, PTRACE_ATTACH = 0, 16
ctypes.set_errno(0)
rc = libc.ptrace(PTRACE_ATTACH, 1, 0, 0)
print("ptrace(ATTACH, 1):", "OK" if rc == 0 else errname(ctypes.get_errno()))
ctypes.set_errno(0)
rc = libc.ptrace(PTRACE_TRACEME, 0, 0, 0)
print("ptrace(TRACEME):", "OK" if rc == 0 else errname(ctypes.get_errno()))
)PY",
                   "ptrace(ATTACH, 1): EPERM\nptrace(TRACEME): EPERM\n"},
        // The kernel: KEYCTL_GET_KEYRING_ID of the session keyring, creating
        // it, succeeds for anyone.
        DeniedCall{"keyctl", R"PY(
KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, -3
report_syscall("keyctl(GET_KEYRING_ID, session)", 250, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1)
)PY",
                   "keyctl(GET_KEYRING_ID, session): EPERM\n"},
        // The kernel: adding a "user" key to the process keyring succeeds.
        DeniedCall{"add_key", R"PY(
KEY_SPEC_PROCESS_KEYRING = -2
report_syscall("add_key(user)", 248, cstr("user"), cstr("kiln"), cstr("x"), 1, KEY_SPEC_PROCESS_KEYRING)
)PY",
                   "add_key(user): EPERM\n"},
        DeniedCall{"request_key", R"PY(
report_syscall("request_key(user)", 249, cstr("user"), cstr("kiln"), 0, 0)
)PY",
                   "request_key(user): EPERM\n"},
        // The kernel: with kernel.unprivileged_bpf_disabled set, EPERM as
        // well; with a NULL attr and size 0 otherwise EINVAL. The filter
        // answers first either way.
        DeniedCall{"bpf", R"PY(
BPF_MAP_CREATE = 0
report_syscall("bpf(MAP_CREATE)", 321, BPF_MAP_CREATE, zeroed(128), 72)
report_syscall("bpf(NULL)", 321, 0, 0, 0)
)PY",
                   "bpf(MAP_CREATE): EPERM\nbpf(NULL): EPERM\n"},
        // The kernel: a NULL attr is EFAULT.
        DeniedCall{"perf_event_open", R"PY(
report_syscall("perf_event_open(NULL)", 298, 0, 0, -1, -1, 0)
)PY",
                   "perf_event_open(NULL): EPERM\n"},
        // The kernel: UFFD_USER_MODE_ONLY is allowed to anyone (Linux >= 5.11).
        DeniedCall{"userfaultfd", R"PY(
UFFD_USER_MODE_ONLY = 1
report_syscall("userfaultfd(USER_MODE_ONLY)", 323, UFFD_USER_MODE_ONLY | os.O_CLOEXEC)
)PY",
                   "userfaultfd(USER_MODE_ONLY): EPERM\n"},
        // The kernel: io_uring_setup with zeroed params succeeds (unless
        // kernel.io_uring_disabled); the other two io_uring calls are denied
        // too, so an fd passed in could not be used either.
        DeniedCall{"io_uring", R"PY(
report_syscall("io_uring_setup(4)", 425, 4, zeroed(120))
report_syscall("io_uring_enter", 426, 0, 0, 0, 0, 0, 0)
report_syscall("io_uring_register", 427, 0, 0, 0, 0)
)PY",
                   "io_uring_setup(4): EPERM\nio_uring_enter: EPERM\nio_uring_register: EPERM\n"},
        // The "shocker" escape: open a file by handle, skipping path checks.
        // The kernel: EFAULT for a NULL handle, EPERM without
        // CAP_DAC_READ_SEARCH.
        DeniedCall{"open_by_handle_at", R"PY(
report_syscall("open_by_handle_at(NULL)", 304, -100, 0, 0)
report_syscall("name_to_handle_at(/usr)", 303, -100, cstr("/usr"), zeroed(136), zeroed(4), 0)
)PY",
                   "open_by_handle_at(NULL): EPERM\nname_to_handle_at(/usr): EPERM\n"},
        // The kernel: reading an LDT (func 0) succeeds for anyone.
        DeniedCall{"modify_ldt", R"PY(
report_syscall("modify_ldt(read)", 154, 0, zeroed(64), 64)
)PY",
                   "modify_ldt(read): EPERM\n"},
        // The kernel: reading our own memory with process_vm_readv succeeds.
        DeniedCall{"process_vm_readv", R"PY(
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
src = ctypes.create_string_buffer(b"kiln", 8)
dst = ctypes.create_string_buffer(8)
local, remote = iovec(ctypes.addressof(dst), 4), iovec(ctypes.addressof(src), 4)
report_syscall("process_vm_readv(self)", 310, os.getpid(), ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
)PY",
                   "process_vm_readv(self): EPERM\n"}),
    [](const ::testing::TestParamInfo<DeniedCall>& param_info) {
      return std::string(param_info.param.name);
    });

class SeccompEscape : public SandboxTest {};

TEST_F(SeccompEscape, TiocstiOnStdinIsEPERM) {
  // TIOCSTI pushes bytes into a terminal's input queue: typed commands in the
  // caller's shell. Layer: seccomp's ioctl rule. fd 0 is /dev/null inside,
  // where the kernel itself would answer ENOTTY, so EPERM is the filter.
  const JsonRun r = RunProbe(R"PY(
import fcntl, termios
attempt("ioctl(0, TIOCSTI)", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "ioctl(0, TIOCSTI): EPERM\n") << r.Describe();
}

TEST_F(SeccompEscape, X32SystemCallKillsTheProcess) {
  // Layer: seccomp's BADARCH action. An x32 number (0x40000000 | 39, x32
  // getpid) would bypass every x86_64 rule; the filter kills the process
  // with SIGSYS, so nothing after the call runs.
  const JsonRun r = RunProbe(R"PY(
print("before", flush=True)
ret, err = sys_call(0x40000000 | 39)
print("after", ret, err, flush=True)
)PY");
  EXPECT_EQ(r.status(), "policy_violation") << r.Describe();
  EXPECT_EQ(r.j["signal"], 31) << r.Describe();
  EXPECT_EQ(r.j["signal_name"], "SIGSYS") << r.Describe();
  EXPECT_TRUE(r.j["exit_code"].is_null()) << r.Describe();
  EXPECT_EQ(r.out(), "before\n") << r.Describe();
}

TEST_F(SeccompEscape, Int80SystemCallKillsTheProcess) {
  // The property: no i386 system call executes. Where the host runs i386
  // calls (IA32 emulation on), the layer is seccomp's BADARCH action: `int
  // 0x80` from 64-bit code reaches the filter with seccomp_data.arch ==
  // AUDIT_ARCH_I386 and the process is killed with SIGSYS. Where IA32
  // emulation is off (ia32_emulation=false, or a kernel built without it),
  // the CPU's fault comes first and no system call is made at all: SIGSEGV.
  // Which of the two is decided by running the same probe in a bare Python
  // outside the sandbox; anything but a clear "off" expects SIGSYS.
  const Ia32Fact& host = HostIa32();
  const bool off = host.state == Ia32Emulation::kOff;
  const std::string expecting = off ? "expecting SIGSEGV" : "expecting SIGSYS from seccomp";
  RecordProperty("host_ia32_emulation", off                                ? "off"
                                        : host.state == Ia32Emulation::kOn ? "on"
                                                                           : "unknown");
  std::cout << "host: " << host.detail << "; " << expecting << std::endl;
  const JsonRun r = RunProbe(ReadProbe("int80.py"));
  if (TestBackend() == "gvisor") {
    // The Sentry (ptrace platform) takes `int 0x80` as a 64-bit call: i386
    // getpid's number 20 is writev, EBADF (-9) for its arguments. No i386
    // call runs, and the host's kernel is not asked (docs/threat-model.md).
    EXPECT_EQ(r.status(), "ok") << r.Describe();
    EXPECT_EQ(r.out(), "before\nafter -9\n") << r.Describe();
    return;
  }
  if (off) {
    EXPECT_EQ(r.status(), "signaled") << host.detail << "\n" << r.Describe();
    EXPECT_EQ(r.j["signal"], 11) << r.Describe();
    EXPECT_EQ(r.j["signal_name"], "SIGSEGV") << r.Describe();
  } else {
    EXPECT_EQ(r.status(), "policy_violation") << host.detail << "\n" << r.Describe();
    EXPECT_EQ(r.j["signal"], 31) << r.Describe();
    EXPECT_EQ(r.j["signal_name"], "SIGSYS") << r.Describe();
  }
  EXPECT_TRUE(r.j["exit_code"].is_null()) << r.Describe();
  EXPECT_EQ(r.out(), "before\n") << r.Describe();
}

TEST_F(SeccompEscape, X32CallInPlainModeExitsWith128PlusSIGSYS) {
  const ProcessResult p = RunKiln({"run", "-c", WithPrelude("sys_call(0x40000000 | 39)\n")});
  EXPECT_EQ(p.exit_code, 128 + 31) << p.err;
  EXPECT_NE(p.err.find("policy_violation"), std::string::npos) << p.err;
}

// The allow-list (ADR 0003): a call it does not name answers ENOSYS, so libc
// falls back and nothing new in the kernel is reachable by default. Each call
// here was reachable under the old deny list; the arguments make the kernel
// itself answer something else (EINVAL, EFAULT, EBADF or success, harmless
// each), which the test shows by running the same probe in a bare Python on
// the host first: there, anything but ENOSYS; in the sandbox, ENOSYS. Where
// the host's kernel predates a call, its own answer is ENOSYS too, and the
// test says so (the call is unreachable either way). x86_64 numbers.
// Not here: uretprobe (Linux >= 6.11), which the kernel passes through seccomp
// unfiltered (Linux 6.13, backported) and answers with SIGILL to any caller
// outside a uretprobe trampoline: no filter can refuse it, and a sandbox that
// calls it dies of SIGILL (seen on this project's hosts).
struct UnlistedCall {
  const char* label;
  const char* call;  // Python: report_syscall(label, nr, args...)
  bool host_safe;    // false: not run outside the sandbox
};

const UnlistedCall kUnlistedCalls[] = {
    // Fragments the host's direct map; EINVAL for unknown flags.
    {"memfd_secret", "report_syscall('memfd_secret', 447, 0x40000000)", true},
    // NUMA placement is the host's: invalid modes, EINVAL.
    {"mbind", "report_syscall('mbind', 237, 0, 0, 99, 0, 0, 0)", true},
    {"set_mempolicy", "report_syscall('set_mempolicy', 238, 99, 0, 0)", true},
    {"get_mempolicy", "report_syscall('get_mempolicy', 239, 0, 0, 0, 0, 0xff)", true},
    // No pages, no nodes: the kernel answers 0 or EINVAL.
    {"move_pages", "report_syscall('move_pages', 279, 0, 0, 0, 0, 0, 0)", true},
    {"migrate_pages", "report_syscall('migrate_pages', 256, 0, 0, 0, 0)", true},
    // Newer than the deny list: NULL buffers, EFAULT or EINVAL.
    {"statmount", "report_syscall('statmount', 457, 0, 0, 0, 0)", true},
    {"listmount", "report_syscall('listmount', 458, 0, 0, 0, 0)", true},
    {"lsm_list_modules", "report_syscall('lsm_list_modules', 461, 0, 0, 0)", true},
    {"mseal", "report_syscall('mseal', 462, 1, 4096, 0)", true},
    {"cachestat", "report_syscall('cachestat', 451, -1, 0, 0, 0)", true},
    // Linux AIO and vmsplice: EINVAL/EFAULT and EBADF.
    {"io_setup", "report_syscall('io_setup', 206, 0, 0)", true},
    {"vmsplice", "report_syscall('vmsplice', 278, -1, 0, 0, 0)", true},
};

TEST_F(SeccompEscape, CallsOffTheAllowListAnswerEnosys) {
  std::string sandbox_code;
  std::string host_code;
  std::string expected;
  for (const UnlistedCall& c : kUnlistedCalls) {
    sandbox_code += std::string(c.call) + "\n";
    if (c.host_safe) host_code += std::string(c.call) + "\n";
    expected += std::string(c.label) + ": ENOSYS\n";
  }
  const ProcessResult host = RunProcess({kHostPython, "-I", "-c", WithPrelude(host_code)});
  ASSERT_EQ(host.exit_code, 0) << host.err;
  for (const std::string& line : Lines(host.out)) {
    if (line.ends_with(": ENOSYS")) {
      std::cout << "host kernel has no " << line.substr(0, line.find(':'))
                << " (its own answer is ENOSYS)" << std::endl;
    } else {
      std::cout << "host kernel answers " << line << std::endl;
    }
  }
  const JsonRun r = RunProbe(sandbox_code);
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), expected) << r.Describe();
}

// posix_fadvise(POSIX_FADV_DONTNEED) on a file the sandbox can only read (the
// host's /usr) would drop page cache the host and every other sandbox share:
// the filter answers it with success and does not carry it out. The host side
// (this test, root, the file's owner) caches the file, checks with mincore(2)
// that it is resident, lets the sandbox advise DONTNEED, and checks again.
// Without the rule the kernel drops the clean, unmapped pages at once.
TEST_F(SeccompEscape, FadviseDontneedLeavesTheSharedPageCacheAlone) {
  const char* const kFile = "/usr/share/common-licenses/GPL-3";
  const int fd = ::open(kFile, O_RDONLY | O_CLOEXEC);
  if (fd < 0) GTEST_SKIP() << kFile << " is not on this host";
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  const size_t size = static_cast<size_t>(st.st_size);
  std::string buf(size, '\0');
  ASSERT_EQ(::pread(fd, buf.data(), size, 0), static_cast<ssize_t>(size));
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto resident = [&] {
    const size_t pages = (size + 4095) / 4096;
    std::vector<unsigned char> vec(pages);
    EXPECT_EQ(::mincore(map, size, vec.data()), 0) << std::strerror(errno);
    size_t n = 0;
    for (unsigned char v : vec) n += v & 1;
    return n * 100 / pages;
  };
  // Our own mapping would keep the pages: only look through it, then unmap
  // before the sandbox advises.
  const size_t before = resident();
  ASSERT_EQ(::munmap(map, size), 0);
  ASSERT_EQ(before, 100u) << "the file should be cached after reading it";

  const JsonRun r = RunProbe(std::string(R"PY(
fd = os.open(")PY") + kFile + R"PY(", os.O_RDONLY)
attempt("fadvise DONTNEED", lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))
attempt("fadvise SEQUENTIAL", lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "fadvise DONTNEED: OK\nfadvise SEQUENTIAL: OK\n") << r.Describe();

  map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  EXPECT_EQ(resident(), 100u) << "the sandbox's DONTNEED evicted the host's page cache";
  ::munmap(map, size);
  ::close(fd);
}

}  // namespace
}  // namespace kiln::testing
