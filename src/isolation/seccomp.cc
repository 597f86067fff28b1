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
#include <string>
#include <string_view>

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

// Denied with EPERM, so Python raises PermissionError the agent can read.
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

Status AddDeniedCalls(scmp_filter_ctx ctx) {
  for (const char* name : kDeniedCalls) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr < 0) nr = HeaderSyscallNumber(name);
    if (nr < 0) continue;  // not a call of this architecture
    KILN_TRY(AddRule(ctx, SCMP_ACT_ERRNO(EPERM), nr, name));
  }
  return OkStatus();
}

Status AddCloneRules(scmp_filter_ctx ctx) {
  for (const auto& f : kCloneNamespaceFlags) {
    // One MASKED_EQ rule per flag: a rule ANDs its conditions, so a single rule
    // could only match when every flag is set at once.
    KILN_TRY(AddRule(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), std::string("clone ") + f.name,
                     {Arg(0, SCMP_CMP_MASKED_EQ, f.flag, f.flag)}));
  }
  // clone3 passes its flags behind a pointer, which seccomp cannot read. ENOSYS
  // rather than EPERM because glibc (2.34+) and CPython then fall back to
  // clone(2), where the rules above can see the flags.
  return AddRule(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), "clone3");
}

Status AddIoctlRules(scmp_filter_ctx ctx) {
  // The kernel takes the request as an unsigned int, so junk in the upper 32
  // bits still reaches TIOCSTI: compare the low word only.
  constexpr struct {
    uint64_t request;
    const char* name;
  } kDeniedRequests[] = {
      {TIOCSTI, "ioctl TIOCSTI"},      // pushes input into a terminal (CVE-2017-5226 in bwrap)
      {TIOCLINUX, "ioctl TIOCLINUX"},  // TIOCL_PASTESEL pastes into a console's input
  };
  for (const auto& r : kDeniedRequests) {
    KILN_TRY(AddRule(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), r.name,
                     {Arg(1, SCMP_CMP_MASKED_EQ, 0xffffffffULL, r.request)}));
  }
  return OkStatus();
}

// socket(2)/socketpair(2): only the allowed domains pass. libseccomp 2.5 takes
// one comparison per argument per rule, so "not in {a, b, c}" becomes: below
// the smallest, above the largest, and each value in a gap, one rule each. The
// comparisons are 64-bit: a domain with junk in its upper word is denied even
// though the kernel would truncate it to an int (fail closed).
Status AddSocketRules(scmp_filter_ctx ctx, const SeccompOptions& options) {
  // AF_VSOCK, AF_NETLINK, AF_PACKET and the rest are always denied; a network
  // namespace does not isolate AF_VSOCK (it reaches the hypervisor).
  constexpr uint64_t kUnixOnly[] = {AF_UNIX};
  constexpr uint64_t kUnixAndInet[] = {AF_UNIX, AF_INET, AF_INET6};
  const uint64_t* allowed = options.allow_inet_sockets ? kUnixAndInet : kUnixOnly;
  const size_t count = options.allow_inet_sockets ? std::size(kUnixAndInet) : std::size(kUnixOnly);

  constexpr uint32_t kAction = SCMP_ACT_ERRNO(EAFNOSUPPORT);
  const struct {
    int nr;
    const char* name;
  } kCalls[] = {{SCMP_SYS(socket), "socket"}, {SCMP_SYS(socketpair), "socketpair"}};
  for (const auto& call : kCalls) {
    const std::string what = std::string(call.name) + " domain";
    if (allowed[0] > 0) {
      KILN_TRY(AddRule(ctx, kAction, call.nr, what + " below allowed",
                       {Arg(0, SCMP_CMP_LT, allowed[0])}));
    }
    for (size_t i = 0; i + 1 < count; ++i) {
      for (uint64_t domain = allowed[i] + 1; domain < allowed[i + 1]; ++domain) {
        KILN_TRY(AddRule(ctx, kAction, call.nr, what + " " + std::to_string(domain),
                         {Arg(0, SCMP_CMP_EQ, domain)}));
      }
    }
    KILN_TRY(AddRule(ctx, kAction, call.nr, what + " above allowed",
                     {Arg(0, SCMP_CMP_GT, allowed[count - 1])}));
  }
  return OkStatus();
}

// personality(2): allow only 0 (PER_LINUX) and 0xffffffff (query); any other
// persona can turn off ASLR (ADDR_NO_RANDOMIZE), make data executable
// (READ_IMPLIES_EXEC) or fake an old kernel version (UNAME26, CVE-2012-0957).
//
// With default-allow, "allow two values" must be written as deny rules, and
// libseccomp 2.5 allows one comparison per argument per rule, so no single rule
// can say 0 < x < 0xffffffff. A 32-bit word that is neither all zeros nor all
// ones has, reading its bits as a ring, some set bit i whose neighbour i+1 is
// clear; so 32 MASKED_EQ rules (bit i set, bit i+1 clear) cover exactly those
// words. One more rule denies any value with upper bits set (fail closed: the
// kernel would truncate it to an unsigned int).
Status AddPersonalityRules(scmp_filter_ctx ctx) {
  for (unsigned bit = 0; bit < 32; ++bit) {
    const uint64_t set = uint64_t{1} << bit;
    const uint64_t clear = uint64_t{1} << ((bit + 1) % 32);
    KILN_TRY(AddRule(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality),
                     "personality bit " + std::to_string(bit),
                     {Arg(0, SCMP_CMP_MASKED_EQ, set | clear, set)}));
  }
  return AddRule(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), "personality upper bits",
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
Status VerifyProgram(const BpfProgram& program) {
  const uint32_t native = seccomp_arch_native();
  const uint32_t foreign = native == AUDIT_ARCH_I386 ? AUDIT_ARCH_X86_64 : AUDIT_ARCH_I386;
  struct Expectation {
    const char* what;
    int nr;
    uint32_t arch;
    uint32_t action;
  };
  const Expectation expectations[] = {
    {"read is allowed", SYS_read, native, SECCOMP_RET_ALLOW},
    {"mount is EPERM", SYS_mount, native, SECCOMP_RET_ERRNO | EPERM},
    {"a foreign arch is killed", SYS_read, foreign, SECCOMP_RET_KILL_PROCESS},
#if defined(__x86_64__)
    {"an x32 call is killed", 0x40000000 | SYS_read, native, SECCOMP_RET_KILL_PROCESS},
#endif
  };
  for (const Expectation& e : expectations) {
    seccomp_data data{};
    data.nr = e.nr;
    data.arch = e.arch;
    if (EvaluateSeccomp(program, data) != e.action) {
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
  Context ctx(seccomp_init(SCMP_ACT_ALLOW), &seccomp_release);
  if (ctx == nullptr) return LibseccompError("seccomp_init", -ENOMEM);
  // i386 (int 0x80) and x32 calls would bypass every rule keyed on x86_64
  // numbers; libseccomp also sends x32 numbers to this action.
  KILN_TRY(SetAttr(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS, "ACT_BADARCH"));
  // The child sets no_new_privs itself, as its own setup step, before Landlock.
  KILN_TRY(SetAttr(ctx.get(), SCMP_FLTATR_CTL_NNP, 0, "CTL_NNP"));
  // The child is single-threaded when it installs the filter.
  KILN_TRY(SetAttr(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 0, "CTL_TSYNC"));

  KILN_TRY(AddDeniedCalls(ctx.get()));
  KILN_TRY(AddCloneRules(ctx.get()));
  KILN_TRY(AddIoctlRules(ctx.get()));
  KILN_TRY(AddSocketRules(ctx.get(), options));
  KILN_TRY(AddPersonalityRules(ctx.get()));

  KILN_ASSIGN_OR_RETURN(BpfProgram program, ExportProgram(ctx.get()));
  KILN_TRY(VerifyProgram(program));
  return program;
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
