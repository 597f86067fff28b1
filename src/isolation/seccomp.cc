// seccomp-bpf: compiled by libseccomp in the supervisor, installed by the child,
// and evaluated in user space by EvaluateSeccomp (unit tests, `kiln doctor`).
//
// What libseccomp 2.5.4 emits for this filter on x86_64 (checked with the
// evaluator, and re-checked by VerifyProgram on every compile):
//   - arch != AUDIT_ARCH_X86_64                 -> SCMP_FLTATR_ACT_BADARCH
//   - nr >= 0x40000000 (x32), except nr == -1   -> SCMP_FLTATR_ACT_BADARCH
//     (nr -1 passes because ptrace tracers use it to skip a call; the kernel
//     answers it with ENOSYS)
//   - one JEQ chain per syscall; a 64-bit argument is compared as its high and
//     low words, each loaded with BPF_LD|BPF_W|BPF_ABS.
// Opcodes seen: LD W ABS, JEQ/JGT/JGE K, ALU AND K, RET K. The evaluator covers
// every opcode seccomp accepts, not just these.
#include "isolation/seccomp.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "sys/kernel_defs.h"
#include "sys/syscalls.h"

// clone(2) takes its flags in arg0 on every architecture kiln builds for; s390
// (CLONE_BACKWARDS2) takes them in arg1, and the clone rules below would
// silently match the stack pointer instead.
#if defined(__s390__) || defined(__s390x__) || defined(__CRIS__)
#error "clone() flags are not arg0 on this architecture; fix the clone rules"
#endif

namespace kiln::isolation {
namespace {

static_assert(sizeof(seccomp_data) == 64, "seccomp_data layout changed");
constexpr uint32_t kSeccompDataSize = sizeof(seccomp_data);

// The allow-list (ADR 0003). Every call not named here, and not given an
// answer of its own below, gets ENOSYS: libc and CPython treat it as "this
// kernel does not have it" and fall back where a fallback exists (statx to
// fstatat, clone3 to clone, faccessat2 to faccessat, ...). The list is the set
// the workloads in tools/seccomp/workloads/ make under the filter (measured
// by tools/seccomp/measure.py; src/isolation/testdata/seccomp_measured_*.txt,
// which a unit test checks against this list), plus the POSIX and Linux basics
// of the same families that the standard library exposes, reviewed against
// Docker's default profile and gVisor's host surface. Left out on purpose
// (ENOSYS): Linux AIO (io_setup and friends), vmsplice, remap_file_pages,
// sync (it flushes every filesystem of the host), get/set_mempolicy, mbind,
// move_pages, migrate_pages, set_mempolicy_home_node (NUMA placement is the
// host's), memfd_secret (it fragments the host's direct map), fanotify_mark,
// set_thread_area and get_thread_area, the obsolete calls (uselib, ustat,
// sysfs, ...), and everything newer than this list: statmount, listmount,
// lsm_*, mseal, cachestat, map_shadow_stack, file_getattr, ... (uretprobe
// bypasses seccomp by the kernel's design and SIGILLs a caller outside a
// uprobe trampoline).
// Names that do not exist on an architecture are skipped.
// clang-format off
constexpr const char* kAllowedCalls[] = {
    // Files and directories.
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range", "lseek", "dup",
    "dup2", "dup3", "fcntl", "flock", "fsync", "fdatasync", "syncfs", "sync_file_range",
    "fallocate", "ftruncate", "truncate", "readahead", "sendfile", "copy_file_range",
    "splice", "tee", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access",
    "faccessat", "faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir",
    "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat", "unlink", "unlinkat",
    "symlink", "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "chown",
    "fchown", "lchown", "fchownat", "umask", "mknod", "mknodat", "utime", "utimes", "utimensat",
    "futimesat", "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "memfd_create",
    // Memory.
    "brk", "mmap", "munmap", "mremap", "mprotect", "msync", "madvise", "mincore", "mlock", "mlock2",
    "munlock", "mlockall", "munlockall", "membarrier", "pkey_alloc", "pkey_free", "pkey_mprotect",
    // Processes and threads (clone is filtered below; clone3 answers ENOSYS).
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tkill",
    "tgkill", "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
    "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "futex", "futex_waitv",
    "arch_prctl", "prctl", "pidfd_open", "pidfd_send_signal", "getrlimit", "setrlimit", "prlimit64",
    "getrusage", "times", "getpriority", "setpriority", "ioprio_get", "ioprio_set", "sched_yield",
    "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
    "sched_getscheduler", "sched_setscheduler", "sched_getattr", "sched_setattr",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getcpu", "capget",
    "capset", "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    // Credentials: the sandbox's user namespace maps one uid and one gid, and
    // no capability is left, so these can only re-set what the process has.
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
    // Signals.
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
    "signalfd4", "pause", "alarm", "restart_syscall",
    // Time (the clock is read, never set).
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
    "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    // Waiting on fds.
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "pipe", "pipe2",
    // Sockets: socket and socketpair are filtered by domain below; the network
    // namespace has only a loopback that leads nowhere.
    "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername", "getsockopt",
    "setsockopt", "shutdown", "sendto", "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
    // System V and POSIX IPC, private to the sandbox's IPC namespace.
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget",
    "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
    // Identity of the machine (the sandbox's own UTS namespace; sysinfo shows
    // the host's memory and load: docs/threat-model.md, known limits).
    "uname", "sysinfo", "getrandom",
    // 32-bit ABIs' names for the same calls, for builds whose native ABI has them.
    "_llseek", "fcntl64", "fstat64", "fstatat64", "lstat64", "stat64", "statfs64", "fstatfs64",
    "ftruncate64", "truncate64", "mmap2", "sendfile64", "ugetrlimit", "sigreturn", "sigprocmask",
    "_newselect", "clock_gettime64", "clock_getres_time64", "clock_nanosleep_time64",
    "futex_time64", "ppoll_time64", "pselect6_time64", "recvmmsg_time64", "rt_sigtimedwait_time64",
    "semtimedop_time64", "timer_gettime64", "timer_settime64", "timerfd_gettime64",
    "timerfd_settime64", "utimensat_time64", "mq_timedsend_time64", "mq_timedreceive_time64",
    "sched_rr_get_interval_time64", "getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32",
    "getresgid32", "getgroups32", "setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32",
    "setresgid32", "setgroups32", "setfsuid32", "setfsgid32", "chown32", "fchown32", "lchown32",
};
// clang-format on

// The calls the rules below filter by argument: never on the allow-list too
// (an unconditional rule would make libseccomp drop the conditional ones).
constexpr std::string_view kArgumentFiltered[] = {"clone",      "clone3",      "ioctl",    "socket",
                                                  "socketpair", "personality", "fadvise64"};

// Not merely left out but answered EPERM, so that Python raises a
// PermissionError the agent can read: the calls a sandboxed program has no
// business making, each a known way out or a known kernel attack surface.
// Names that do not exist on the native architecture are skipped (libseccomp
// resolves them to a negative pseudo-number); the i386-only ones are here for
// builds whose native ABI has them. "Added" marks calls beyond the design's
// original list (docs/threat-model.md mirrors the whole list).
constexpr const char* kDeniedCalls[] = {
    // The filesystem tree is final once mount_ns has run; a change after that
    // could uncover the host (old mount API and the fd-based new one). Added:
    // umount (the older name on some ABIs) and open_tree_attr (Linux 6.15,
    // open_tree plus mount_setattr in one call).
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "open_tree_attr",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    // A nested user namespace hands back every capability we dropped, and it is
    // the entry point of most unprivileged kernel exploits (CVE-2022-0185 went
    // through unshare + fsconfig).
    "unshare",
    "setns",
    // Reaching into another process: memory, fds, or comparing kernel objects.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    // Large kernel attack surface no Python program needs. Added: modify_ldt,
    // x86 LDT editing, used only by 16-bit code and Wine (CVE-2015-5157,
    // CVE-2017-17053).
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "modify_ldt",
    // Whole-machine administration. These need capabilities the child no longer
    // has; denying them keeps a bug in those capability checks out of reach.
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "nfsservctl",
    "_sysctl",
    "lookup_dcookie",
    "uselib",
    "vhangup",
    "sethostname",
    "setdomainname",
    // The clock is the host's. Added: stime, settimeofday's older twin on
    // i386 and other ABIs.
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    // Port I/O. Added: vm86 and vm86old (virtual-8086 mode, i386 only).
    "iopl",
    "ioperm",
    "vm86",
    "vm86old",
    // File handles open by inode number and skip path-based checks: the
    // "shocker" container escape used open_by_handle_at.
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
};

// The namespace flags clone(2) may not carry. CLONE_NEWTIME is absent on
// purpose: its bit (0x80) lies in clone(2)'s CSIGNAL byte, so only clone3 and
// unshare can request it, and both are denied outright.
constexpr struct {
  uint64_t flag;
  const char* name;
} kCloneNamespaceFlags[] = {
    {CLONE_NEWNS, "CLONE_NEWNS"},         {CLONE_NEWUTS, "CLONE_NEWUTS"},
    {CLONE_NEWIPC, "CLONE_NEWIPC"},       {CLONE_NEWUSER, "CLONE_NEWUSER"},
    {CLONE_NEWPID, "CLONE_NEWPID"},       {CLONE_NEWNET, "CLONE_NEWNET"},
    {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
};

using Context = std::unique_ptr<void, decltype(&seccomp_release)>;

Error LibseccompError(std::string what, int rc) {
  return Error{Code::kInternal, -rc, SetupStep::kPlan, "libseccomp: " + std::move(what)};
}

// SCMP_A0() and friends are C compound literals, which ISO C++ does not have.
scmp_arg_cmp Arg(unsigned arg, scmp_compare op, uint64_t datum_a, uint64_t datum_b = 0) {
  return scmp_arg_cmp{arg, op, datum_a, datum_b};
}

// _exact: fail rather than let libseccomp rewrite the rule (it would, for a
// multiplexed call such as socketcall on a non-native ABI).
Status AddRule(scmp_filter_ctx ctx, uint32_t action, int nr, std::string_view what,
               std::initializer_list<scmp_arg_cmp> args = {}) {
  int rc = seccomp_rule_add_exact_array(ctx, action, nr, static_cast<unsigned>(args.size()),
                                        args.begin());
  if (rc < 0) return LibseccompError("rule " + std::string(what), rc);
  return OkStatus();
}

Status SetAttr(scmp_filter_ctx ctx, scmp_filter_attr attr, uint32_t value, std::string_view what) {
  int rc = seccomp_attr_set(ctx, attr, value);
  if (rc < 0) return LibseccompError("seccomp_attr_set(" + std::string(what) + ")", rc);
  return OkStatus();
}

// Calls newer than libseccomp 2.5.4's syscall table: it cannot resolve them by
// name, but the kernel has them. sys/kernel_defs.h is where their numbers
// belong; until it has one, the call is skipped like any unknown name.
int HeaderSyscallNumber([[maybe_unused]] std::string_view name) {
#ifdef SYS_open_tree_attr
  if (name == "open_tree_attr") return SYS_open_tree_attr;
#endif
  return -1;
}

// The architecture a filter is built for, and its system call numbers. A
// rule names its call by the native number, which libseccomp translates by
// name for the filter's architecture (that is how one host builds the
// golden programs of another).
class Target {
 public:
  explicit Target(uint32_t arch) : arch_(arch == 0 ? seccomp_arch_native() : arch) {}
  uint32_t arch() const { return arch_; }
  bool native() const { return arch_ == seccomp_arch_native(); }

  // The number to give libseccomp for `name`, or nullopt when the target has
  // no such call. Natively, the call's number (or sys/kernel_defs.h's for one
  // newer than libseccomp). For another architecture, the host's number, or
  // libseccomp's negative pseudo-number for a call the host lacks (open on an
  // aarch64 host): libseccomp translates either by name.
  std::optional<int> Nr(const char* name) const {
    if (native()) {
      int nr = seccomp_syscall_resolve_name(name);
      if (nr < 0) nr = HeaderSyscallNumber(name);
      if (nr < 0) return std::nullopt;
      return nr;
    }
    if (seccomp_syscall_resolve_name_arch(arch_, name) < 0) return std::nullopt;
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return std::nullopt;
    return nr;
  }

  // Nr, for the calls the rules below cannot do without.
  Result<int> Required(const char* name) const {
    std::optional<int> nr = Nr(name);
    if (!nr) {
      return MakeError(Code::kInternal,
                       std::string("libseccomp: no system call '") + name + "' on the target",
                       SetupStep::kPlan);
    }
    return *nr;
  }

 private:
  uint32_t arch_;
};

Status AddAllowedCalls(scmp_filter_ctx ctx, const Target& target, const SeccompOptions& options) {
  for (const char* name : kAllowedCalls) {
    if (options.refuse_memfd && std::string_view(name) == "memfd_create") continue;
    for (std::string_view filtered : kArgumentFiltered) {
      if (name == filtered) {
        return MakeError(Code::kInternal,
                         "seccomp: " + std::string(name) + " is on the allow-list and filtered",
                         SetupStep::kPlan);
      }
    }
    std::optional<int> nr = target.Nr(name);
    if (!nr) continue;  // not a call of this architecture
    KILN_TRY(AddRule(ctx, SCMP_ACT_ALLOW, *nr, name));
  }
  return OkStatus();
}

Status AddDeniedCalls(scmp_filter_ctx ctx, const Target& target, const SeccompOptions& options) {
  std::vector<const char*> names(std::begin(kDeniedCalls), std::end(kDeniedCalls));
  if (options.refuse_memfd) names.push_back("memfd_create");
  for (const char* name : names) {
    std::optional<int> nr = target.Nr(name);
    if (!nr) continue;  // not a call of this architecture
    KILN_TRY(AddRule(ctx, SCMP_ACT_ERRNO(EPERM), *nr, name));
  }
  return OkStatus();
}

// libseccomp keeps one decision tree per call: it silently drops a
// conditional rule for a call that has an unconditional one, and the other way
// round. So every call below that is filtered by an argument is written as
// rules whose conditions do not overlap, each with its own action; whatever
// matches none of them gets the default (ENOSYS).

Status AddCloneRules(scmp_filter_ctx ctx, const Target& target) {
  KILN_ASSIGN_OR_RETURN(const int clone_nr, target.Required("clone"));
  uint64_t all_namespaces = 0;
  for (const auto& f : kCloneNamespaceFlags) {
    all_namespaces |= f.flag;
    // One MASKED_EQ rule per flag: a rule ANDs its conditions, so a single rule
    // could only match when every flag is set at once.
    KILN_TRY(AddRule(ctx, SCMP_ACT_ERRNO(EPERM), clone_nr, std::string("clone ") + f.name,
                     {Arg(0, SCMP_CMP_MASKED_EQ, f.flag, f.flag)}));
  }
  // Allowed: none of the flags. The kernel ignores clone(2)'s upper 32 bits,
  // and so does the mask.
  KILN_TRY(AddRule(ctx, SCMP_ACT_ALLOW, clone_nr, "clone without namespace flags",
                   {Arg(0, SCMP_CMP_MASKED_EQ, all_namespaces, 0)}));
  // clone3 passes its flags behind a pointer, which seccomp cannot read: it
  // gets the default, ENOSYS (libseccomp refuses a rule that repeats the
  // default action), and glibc (2.34+) and CPython fall back to clone(2),
  // where the rules above can see the flags.
  return OkStatus();
}

// One value of an argument's low word that gets its own action.
struct Refused {
  uint32_t value;
  uint32_t action;
  const char* name;
};

// Call `nr` is allowed unless the low word of argument `arg` is one of
// `refused` (each answered with its own action). Only the low word counts
// where the kernel reads the argument as an int (ioctl's request, fadvise's
// advice): junk in the upper word must not get past. libseccomp 2.5 has no
// "not equal" and takes one comparison per argument per rule, so "low word not
// in S" is written as a cover of its complement: for each bit on which every
// member of S agrees, the values whose bit differs (one rule each); the values
// that agree with S on all those bits differ only in the bits where S's members
// disagree, and are listed one by one, S left out.
Status AllowUnlessLowWordIn(scmp_filter_ctx ctx, int nr, unsigned arg,
                            std::initializer_list<Refused> refused, std::string_view what) {
  constexpr uint64_t kLowWord = 0xffffffffULL;
  const uint32_t first = refused.begin()->value;
  uint32_t agree = 0xffffffffu;  // bits on which every refused value agrees
  for (const Refused& r : refused) {
    KILN_TRY(AddRule(ctx, r.action, nr, r.name, {Arg(arg, SCMP_CMP_MASKED_EQ, kLowWord, r.value)}));
    agree &= ~(r.value ^ first);
  }
  const uint32_t common = first & agree;
  for (unsigned bit = 0; bit < 32; ++bit) {
    const uint32_t b = 1u << bit;
    if ((agree & b) == 0) continue;
    KILN_TRY(AddRule(ctx, SCMP_ACT_ALLOW, nr, std::string(what) + " bit " + std::to_string(bit),
                     {Arg(arg, SCMP_CMP_MASKED_EQ, b, (common & b) ^ b)}));
  }
  const uint32_t differ = ~agree;
  if (std::popcount(differ) > 6) {
    return MakeError(Code::kInternal,
                     std::string(what) + ": refused values differ in too many bits for the cover",
                     SetupStep::kPlan);
  }
  // Every subset of the differing bits (Knuth's subset walk), S left out.
  for (uint32_t sub = 0;; sub = (sub - differ) & differ) {
    const uint32_t value = common | sub;
    bool is_refused = false;
    for (const Refused& r : refused) is_refused = is_refused || r.value == value;
    if (!is_refused) {
      KILN_TRY(AddRule(ctx, SCMP_ACT_ALLOW, nr, std::string(what) + " " + std::to_string(value),
                       {Arg(arg, SCMP_CMP_MASKED_EQ, kLowWord, value)}));
    }
    if (sub == differ) break;
  }
  return OkStatus();
}

// ioctl(2): every request but TIOCSTI and TIOCLINUX (the kernel reads the
// request as an unsigned int).
Status AddIoctlRules(scmp_filter_ctx ctx, const Target& target) {
  KILN_ASSIGN_OR_RETURN(const int ioctl_nr, target.Required("ioctl"));
  return AllowUnlessLowWordIn(ctx, ioctl_nr, 1,
                              {
                                  // Pushes input into a terminal (CVE-2017-5226 in bubblewrap).
                                  {TIOCSTI, SCMP_ACT_ERRNO(EPERM), "ioctl TIOCSTI"},
                                  // TIOCL_PASTESEL pastes into a console's input.
                                  {TIOCLINUX, SCMP_ACT_ERRNO(EPERM), "ioctl TIOCLINUX"},
                              },
                              "ioctl request");
}

// fadvise64(fd, offset, len, advice): POSIX_FADV_DONTNEED drops the clean
// page cache of any file the caller can read, the host's libraries under /usr
// included, which the host and every other sandbox share: an eviction side
// channel and a way to slow them down. The advice is answered with success
// and not carried out (advice is a hint the kernel may ignore; gVisor ignores
// all of it); every other advice passes. Not on architectures whose call
// has another name or layout (fadvise64_64, arm_fadvise64_64): those have
// none on the allow-list.
Status AddFadviseRules(scmp_filter_ctx ctx, const Target& target) {
  const std::optional<int> nr = target.Nr("fadvise64");
  if (!nr) return OkStatus();
  return AllowUnlessLowWordIn(
      ctx, *nr, 3, {{POSIX_FADV_DONTNEED, SCMP_ACT_ERRNO(0), "fadvise64 DONTNEED ignored"}},
      "fadvise64 advice");
}

// socket(2)/socketpair(2): only the allowed domains pass. libseccomp 2.5 takes
// one comparison per argument per rule, so "not in {a, b, c}" becomes: below
// the smallest, above the largest, and each value in a gap, one rule each. The
// comparisons are 64-bit: a domain with junk in its upper word is denied even
// though the kernel would truncate it to an int (fail closed).
Status AddSocketRules(scmp_filter_ctx ctx, const Target& target, const SeccompOptions& options) {
  // AF_VSOCK, AF_NETLINK, AF_PACKET and the rest are always denied; a network
  // namespace does not isolate AF_VSOCK (it reaches the hypervisor).
  constexpr uint64_t kUnixOnly[] = {AF_UNIX};
  constexpr uint64_t kUnixAndInet[] = {AF_UNIX, AF_INET, AF_INET6};
  const uint64_t* allowed = options.allow_inet_sockets ? kUnixAndInet : kUnixOnly;
  const size_t count = options.allow_inet_sockets ? std::size(kUnixAndInet) : std::size(kUnixOnly);

  constexpr uint32_t kAction = SCMP_ACT_ERRNO(EAFNOSUPPORT);
  for (const char* name : {"socket", "socketpair"}) {
    KILN_ASSIGN_OR_RETURN(const int nr, target.Required(name));
    const std::string what = std::string(name) + " domain";
    for (size_t i = 0; i < count; ++i) {
      KILN_TRY(AddRule(ctx, SCMP_ACT_ALLOW, nr, what + " " + std::to_string(allowed[i]),
                       {Arg(0, SCMP_CMP_EQ, allowed[i])}));
    }
    if (allowed[0] > 0) {
      KILN_TRY(
          AddRule(ctx, kAction, nr, what + " below allowed", {Arg(0, SCMP_CMP_LT, allowed[0])}));
    }
    for (size_t i = 0; i + 1 < count; ++i) {
      for (uint64_t domain = allowed[i] + 1; domain < allowed[i + 1]; ++domain) {
        KILN_TRY(AddRule(ctx, kAction, nr, what + " " + std::to_string(domain),
                         {Arg(0, SCMP_CMP_EQ, domain)}));
      }
    }
    KILN_TRY(AddRule(ctx, kAction, nr, what + " above allowed",
                     {Arg(0, SCMP_CMP_GT, allowed[count - 1])}));
  }
  return OkStatus();
}

// personality(2): allow only 0 (PER_LINUX) and 0xffffffff (query); any other
// persona can turn off ASLR (ADDR_NO_RANDOMIZE), make data executable
// (READ_IMPLIES_EXEC) or fake an old kernel version (UNAME26, CVE-2012-0957).
//
// The two allowed values are one rule each. Everything else answers EPERM
// rather than the default ENOSYS, and "neither 0 nor 0xffffffff" has no single
// rule either: a 32-bit word that is neither all zeros nor all ones has,
// reading its bits as a ring, some set bit i whose neighbour i+1 is clear; so
// 32 MASKED_EQ rules (bit i set, bit i+1 clear) cover exactly those words. One
// more rule denies any value with upper bits set (fail closed: the kernel
// would truncate it to an unsigned int).
Status AddPersonalityRules(scmp_filter_ctx ctx, const Target& target) {
  KILN_ASSIGN_OR_RETURN(const int personality_nr, target.Required("personality"));
  for (uint64_t persona : {uint64_t{0}, uint64_t{0xffffffff}}) {
    KILN_TRY(AddRule(ctx, SCMP_ACT_ALLOW, personality_nr, "personality " + std::to_string(persona),
                     {Arg(0, SCMP_CMP_EQ, persona)}));
  }
  for (unsigned bit = 0; bit < 32; ++bit) {
    const uint64_t set = uint64_t{1} << bit;
    const uint64_t clear = uint64_t{1} << ((bit + 1) % 32);
    KILN_TRY(AddRule(ctx, SCMP_ACT_ERRNO(EPERM), personality_nr,
                     "personality bit " + std::to_string(bit),
                     {Arg(0, SCMP_CMP_MASKED_EQ, set | clear, set)}));
  }
  return AddRule(ctx, SCMP_ACT_ERRNO(EPERM), personality_nr, "personality upper bits",
                 {Arg(0, SCMP_CMP_GT, 0xffffffffULL)});
}

// libseccomp 2.5 can only export to an fd; a memfd keeps it off the disk.
Result<BpfProgram> ExportProgram(scmp_filter_ctx ctx) {
  UniqueFd fd(memfd_create("kiln-seccomp-bpf", MFD_CLOEXEC));
  if (!fd) return ErrnoError("memfd_create(kiln-seccomp-bpf)", errno, SetupStep::kPlan);
  int rc = seccomp_export_bpf(ctx, fd.get());
  if (rc < 0) return LibseccompError("seccomp_export_bpf", rc);

  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError("fstat(seccomp memfd)", errno, SetupStep::kPlan);
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0 || size % sizeof(sock_filter) != 0 || size / sizeof(sock_filter) > BPF_MAXINSNS) {
    return MakeError(Code::kInternal,
                     "libseccomp: exported program has " + std::to_string(size) +
                         " bytes, not 1.." + std::to_string(BPF_MAXINSNS) + " instructions",
                     SetupStep::kPlan);
  }
  BpfProgram program(size / sizeof(sock_filter));
  ssize_t n = ::pread(fd.get(), program.data(), size, 0);
  if (n < 0) return ErrnoError("pread(seccomp memfd)", errno, SetupStep::kPlan);
  if (static_cast<size_t>(n) != size) {
    return MakeError(Code::kInternal, "short read of the exported seccomp program",
                     SetupStep::kPlan);
  }
  return program;
}

// Cheap check after compiling (P11): the properties the rest of kiln relies on
// hold in libseccomp's actual output, not only in our reading of its docs. A
// program the kernel would reject fails here too: EvaluateSeccomp returns
// KILL_PROCESS for it, and `read` expects ALLOW.
Status VerifyProgram(const BpfProgram& program, uint32_t arch) {
  const uint32_t foreign = arch == AUDIT_ARCH_I386 ? AUDIT_ARCH_X86_64 : AUDIT_ARCH_I386;
  const int read_nr = seccomp_syscall_resolve_name_arch(arch, "read");
  const int mount_nr = seccomp_syscall_resolve_name_arch(arch, "mount");
  struct Expectation {
    const char* what;
    int nr;
    uint32_t arch;
    uint32_t action;
  };
  std::vector<Expectation> expectations = {
      {"read is allowed", read_nr, arch, SECCOMP_RET_ALLOW},
      {"mount is EPERM", mount_nr, arch, SECCOMP_RET_ERRNO | EPERM},
      {"an unlisted call is ENOSYS", 0x3fff, arch, SECCOMP_RET_ERRNO | ENOSYS},
      {"a foreign arch is killed", read_nr, foreign, SECCOMP_RET_KILL_PROCESS},
  };
  if (arch == AUDIT_ARCH_X86_64) {
    expectations.push_back(
        {"an x32 call is killed", 0x40000000 | read_nr, arch, SECCOMP_RET_KILL_PROCESS});
  }
  for (const Expectation& e : expectations) {
    seccomp_data data{};
    data.nr = e.nr;
    data.arch = e.arch;
    if (e.nr < 0 || EvaluateSeccomp(program, data) != e.action) {
      return MakeError(Code::kInternal, std::string("seccomp filter self-check failed: ") + e.what,
                       SetupStep::kPlan);
    }
  }
  return OkStatus();
}

// The opcodes the kernel accepts in a seccomp program: bpf_check_classic()'s
// table (net/core/filter.c) narrowed by seccomp_check_filter()
// (kernel/seccomp.c), which drops packet loads, BPF_MOD and BPF_MSH.
bool IsSeccompOpcode(uint16_t code) {
  switch (code) {
    case BPF_LD | BPF_W | BPF_ABS:
    case BPF_LD | BPF_W | BPF_LEN:
    case BPF_LDX | BPF_W | BPF_LEN:
    case BPF_RET | BPF_K:
    case BPF_RET | BPF_A:
    case BPF_ALU | BPF_ADD | BPF_K:
    case BPF_ALU | BPF_ADD | BPF_X:
    case BPF_ALU | BPF_SUB | BPF_K:
    case BPF_ALU | BPF_SUB | BPF_X:
    case BPF_ALU | BPF_MUL | BPF_K:
    case BPF_ALU | BPF_MUL | BPF_X:
    case BPF_ALU | BPF_DIV | BPF_K:
    case BPF_ALU | BPF_DIV | BPF_X:
    case BPF_ALU | BPF_AND | BPF_K:
    case BPF_ALU | BPF_AND | BPF_X:
    case BPF_ALU | BPF_OR | BPF_K:
    case BPF_ALU | BPF_OR | BPF_X:
    case BPF_ALU | BPF_XOR | BPF_K:
    case BPF_ALU | BPF_XOR | BPF_X:
    case BPF_ALU | BPF_LSH | BPF_K:
    case BPF_ALU | BPF_LSH | BPF_X:
    case BPF_ALU | BPF_RSH | BPF_K:
    case BPF_ALU | BPF_RSH | BPF_X:
    case BPF_ALU | BPF_NEG:
    case BPF_LD | BPF_IMM:
    case BPF_LDX | BPF_IMM:
    case BPF_MISC | BPF_TAX:
    case BPF_MISC | BPF_TXA:
    case BPF_LD | BPF_MEM:
    case BPF_LDX | BPF_MEM:
    case BPF_ST:
    case BPF_STX:
    case BPF_JMP | BPF_JA:
    case BPF_JMP | BPF_JEQ | BPF_K:
    case BPF_JMP | BPF_JEQ | BPF_X:
    case BPF_JMP | BPF_JGE | BPF_K:
    case BPF_JMP | BPF_JGE | BPF_X:
    case BPF_JMP | BPF_JGT | BPF_K:
    case BPF_JMP | BPF_JGT | BPF_X:
    case BPF_JMP | BPF_JSET | BPF_K:
    case BPF_JMP | BPF_JSET | BPF_X: return true;
    default: return false;
  }
}

bool IsConditionalJump(uint16_t code) {
  return BPF_CLASS(code) == BPF_JMP && BPF_OP(code) != BPF_JA;
}

// The checks seccomp(2) makes before accepting a program, in the kernel's
// order, so that the evaluator never runs what the kernel would refuse.
bool IsValidProgram(const BpfProgram& program) {
  const size_t len = program.size();
  if (len == 0 || len > BPF_MAXINSNS) return false;
  for (size_t pc = 0; pc < len; ++pc) {
    const sock_filter& insn = program[pc];
    if (!IsSeccompOpcode(insn.code)) return false;
    switch (insn.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        // seccomp_check_filter: aligned, inside struct seccomp_data.
        if (insn.k >= kSeccompDataSize || insn.k % 4 != 0) return false;
        break;
      case BPF_ALU | BPF_DIV | BPF_K:
        if (insn.k == 0) return false;
        break;
      case BPF_ALU | BPF_LSH | BPF_K:
      case BPF_ALU | BPF_RSH | BPF_K:
        if (insn.k >= 32) return false;
        break;
      case BPF_LD | BPF_MEM:
      case BPF_LDX | BPF_MEM:
      case BPF_ST:
      case BPF_STX:
        if (insn.k >= BPF_MEMWORDS) return false;
        break;
      case BPF_JMP | BPF_JA:
        if (insn.k >= len - pc - 1) return false;
        break;
      default:
        // Both targets must be in range, taken or not.
        if (IsConditionalJump(insn.code) && (pc + 1 + insn.jt >= len || pc + 1 + insn.jf >= len)) {
          return false;
        }
        break;
    }
  }
  const uint16_t last = program[len - 1].code;
  if (last != (BPF_RET | BPF_K) && last != (BPF_RET | BPF_A)) return false;

  // check_load_and_stores(): no path may read a scratch word before writing
  // it. Jumps only go forward, so one pass computes, for each instruction, the
  // words written on every path that reaches it.
  std::vector<uint16_t> valid_at(len, 0xffff);
  uint16_t valid = 0;
  for (size_t pc = 0; pc < len; ++pc) {
    const sock_filter& insn = program[pc];
    valid &= valid_at[pc];
    if (insn.code == BPF_ST || insn.code == BPF_STX) {
      valid = static_cast<uint16_t>(valid | (1u << insn.k));
    } else if (insn.code == (BPF_LD | BPF_MEM) || insn.code == (BPF_LDX | BPF_MEM)) {
      if ((valid & (1u << insn.k)) == 0) return false;
    } else if (insn.code == (BPF_JMP | BPF_JA)) {
      valid_at[pc + 1 + insn.k] &= valid;
      valid = 0xffff;
    } else if (IsConditionalJump(insn.code)) {
      valid_at[pc + 1 + insn.jt] &= valid;
      valid_at[pc + 1 + insn.jf] &= valid;
      valid = 0xffff;
    }
  }
  return true;
}

}  // namespace

Result<BpfProgram> CompileSeccompFilter(const SeccompOptions& options) {
  // Default: ENOSYS for every call the lists below do not name (ADR 0003).
  Context ctx(seccomp_init(SCMP_ACT_ERRNO(ENOSYS)), &seccomp_release);
  if (ctx == nullptr) return LibseccompError("seccomp_init", -ENOMEM);
  const Target target(options.arch);
  if (!target.native()) {
    // Another architecture's program (the golden tests): it replaces the
    // native one in the filter.
    int rc = seccomp_arch_add(ctx.get(), target.arch());
    if (rc < 0) return LibseccompError("seccomp_arch_add", rc);
    rc = seccomp_arch_remove(ctx.get(), SCMP_ARCH_NATIVE);
    if (rc < 0) return LibseccompError("seccomp_arch_remove", rc);
  }
  // i386 (int 0x80) and x32 calls would bypass every rule keyed on x86_64
  // numbers; libseccomp also sends x32 numbers to this action.
  KILN_TRY(SetAttr(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS, "ACT_BADARCH"));
  // The child sets no_new_privs itself, as its own setup step, before Landlock.
  KILN_TRY(SetAttr(ctx.get(), SCMP_FLTATR_CTL_NNP, 0, "CTL_NNP"));
  // The child is single-threaded when it installs the filter.
  KILN_TRY(SetAttr(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 0, "CTL_TSYNC"));

  KILN_TRY(AddAllowedCalls(ctx.get(), target, options));
  KILN_TRY(AddDeniedCalls(ctx.get(), target, options));
  KILN_TRY(AddCloneRules(ctx.get(), target));
  KILN_TRY(AddIoctlRules(ctx.get(), target));
  KILN_TRY(AddFadviseRules(ctx.get(), target));
  KILN_TRY(AddSocketRules(ctx.get(), target, options));
  KILN_TRY(AddPersonalityRules(ctx.get(), target));

  KILN_ASSIGN_OR_RETURN(BpfProgram program, ExportProgram(ctx.get()));
  KILN_TRY(VerifyProgram(program, target.arch()));
  return program;
}

std::vector<std::string> SeccompAllowedCallNames() {
  return std::vector<std::string>(std::begin(kAllowedCalls), std::end(kAllowedCalls));
}

uint32_t EvaluateSeccomp(const BpfProgram& program, const seccomp_data& data) {
  if (!IsValidProgram(program)) return SECCOMP_RET_KILL_PROCESS;

  // seccomp loads 32-bit words of seccomp_data in host byte order.
  const auto bytes = std::bit_cast<std::array<unsigned char, kSeccompDataSize>>(data);
  uint32_t a = 0;
  uint32_t x = 0;
  std::array<uint32_t, BPF_MEMWORDS> mem{};
  for (size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& insn = program[pc];
    const uint32_t k = insn.k;
    const uint32_t src = BPF_SRC(insn.code) == BPF_X ? x : k;
    switch (insn.code) {
      case BPF_LD | BPF_W | BPF_ABS: std::memcpy(&a, bytes.data() + k, sizeof(a)); break;
      case BPF_LD | BPF_W | BPF_LEN: a = kSeccompDataSize; break;
      case BPF_LDX | BPF_W | BPF_LEN: x = kSeccompDataSize; break;
      case BPF_LD | BPF_IMM: a = k; break;
      case BPF_LDX | BPF_IMM: x = k; break;
      case BPF_LD | BPF_MEM: a = mem[k]; break;
      case BPF_LDX | BPF_MEM: x = mem[k]; break;
      case BPF_ST: mem[k] = a; break;
      case BPF_STX: mem[k] = x; break;
      case BPF_MISC | BPF_TAX: x = a; break;
      case BPF_MISC | BPF_TXA: a = x; break;
      case BPF_ALU | BPF_ADD | BPF_K:
      case BPF_ALU | BPF_ADD | BPF_X: a += src; break;
      case BPF_ALU | BPF_SUB | BPF_K:
      case BPF_ALU | BPF_SUB | BPF_X: a -= src; break;
      case BPF_ALU | BPF_MUL | BPF_K:
      case BPF_ALU | BPF_MUL | BPF_X: a *= src; break;
      case BPF_ALU | BPF_DIV | BPF_K:
      case BPF_ALU | BPF_DIV | BPF_X:
        // Classic BPF ends the program with 0 on division by zero (the kernel
        // emits that check when it converts the program); for seccomp, 0 is
        // SECCOMP_RET_KILL_THREAD. K == 0 was rejected above.
        if (src == 0) return 0;
        a /= src;
        break;
      case BPF_ALU | BPF_AND | BPF_K:
      case BPF_ALU | BPF_AND | BPF_X: a &= src; break;
      case BPF_ALU | BPF_OR | BPF_K:
      case BPF_ALU | BPF_OR | BPF_X: a |= src; break;
      case BPF_ALU | BPF_XOR | BPF_K:
      case BPF_ALU | BPF_XOR | BPF_X: a ^= src; break;
      // The eBPF interpreter and JITs mask a 32-bit shift count to 5 bits.
      case BPF_ALU | BPF_LSH | BPF_K:
      case BPF_ALU | BPF_LSH | BPF_X: a <<= (src & 31); break;
      case BPF_ALU | BPF_RSH | BPF_K:
      case BPF_ALU | BPF_RSH | BPF_X: a >>= (src & 31); break;
      case BPF_ALU | BPF_NEG: a = 0u - a; break;
      case BPF_JMP | BPF_JA: pc += k; break;
      case BPF_JMP | BPF_JEQ | BPF_K:
      case BPF_JMP | BPF_JEQ | BPF_X: pc += (a == src) ? insn.jt : insn.jf; break;
      case BPF_JMP | BPF_JGT | BPF_K:
      case BPF_JMP | BPF_JGT | BPF_X: pc += (a > src) ? insn.jt : insn.jf; break;
      case BPF_JMP | BPF_JGE | BPF_K:
      case BPF_JMP | BPF_JGE | BPF_X: pc += (a >= src) ? insn.jt : insn.jf; break;
      case BPF_JMP | BPF_JSET | BPF_K:
      case BPF_JMP | BPF_JSET | BPF_X: pc += (a & src) != 0 ? insn.jt : insn.jf; break;
      case BPF_RET | BPF_K: return k;
      case BPF_RET | BPF_A: return a;
      default: return SECCOMP_RET_KILL_PROCESS;  // unreachable: validated above
    }
  }
  return SECCOMP_RET_KILL_PROCESS;  // unreachable: the last instruction is a RET
}

}  // namespace kiln::isolation
