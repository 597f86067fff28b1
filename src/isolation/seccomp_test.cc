// Unit tests (label "unit", no privileges): the real filter compiled by
// libseccomp, run through EvaluateSeccomp. The evaluator is tested first on
// hand-written programs, so that a broken evaluator cannot make the filter
// tests pass vacuously. Syscall numbers come from <sys/syscall.h>, not from
// libseccomp, so the tests also cross-check libseccomp's tables.
#include "isolation/seccomp.h"

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/personality.h>
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::isolation {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
constexpr uint32_t kForeignArch = AUDIT_ARCH_I386;
#elif defined(__aarch64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
constexpr uint32_t kForeignArch = AUDIT_ARCH_ARM;
#else
#error "add this architecture's AUDIT_ARCH values"
#endif

constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kKillProcess = SECCOMP_RET_KILL_PROCESS;
constexpr uint32_t Errno(int err) { return SECCOMP_RET_ERRNO | static_cast<uint32_t>(err); }

seccomp_data Call(int nr, std::array<uint64_t, 6> args = {}, uint32_t arch = kNativeArch) {
  seccomp_data data{};
  data.nr = nr;
  data.arch = arch;
  data.instruction_pointer = 0x7f0000001000;
  for (size_t i = 0; i < args.size(); ++i) data.args[i] = args[i];
  return data;
}

sock_filter Stmt(uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  return sock_filter{code, jt, jf, k};
}

const BpfProgram& DefaultFilter() {
  static const BpfProgram* const program = [] {
    Result<BpfProgram> r = CompileSeccompFilter(SeccompOptions{});
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return new BpfProgram(r.ok() ? std::move(r).value() : BpfProgram{});
  }();
  return *program;
}

const BpfProgram& InetFilter() {
  static const BpfProgram* const program = [] {
    SeccompOptions options;
    options.allow_inet_sockets = true;
    Result<BpfProgram> r = CompileSeccompFilter(options);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return new BpfProgram(r.ok() ? std::move(r).value() : BpfProgram{});
  }();
  return *program;
}

uint32_t Eval(int nr, std::array<uint64_t, 6> args = {}) {
  return EvaluateSeccomp(DefaultFilter(), Call(nr, args));
}

// ---------------------------------------------------------------------------
// The evaluator on hand-written programs.

TEST(SeccompEvaluator, ReturnsConstantAction) {
  EXPECT_EQ(EvaluateSeccomp({Stmt(BPF_RET | BPF_K, kAllow)}, Call(SYS_read)), kAllow);
  EXPECT_EQ(EvaluateSeccomp({Stmt(BPF_RET | BPF_K, Errno(EACCES))}, Call(SYS_read)), Errno(EACCES));
}

// arch check, then nr 42 -> EPERM, anything else -> allow.
BpfProgram TinyFilter() {
  return {
      Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, kNativeArch, 1, 0),
      Stmt(BPF_RET | BPF_K, kKillProcess),
      Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, 42, 0, 1),
      Stmt(BPF_RET | BPF_K, Errno(EPERM)),
      Stmt(BPF_RET | BPF_K, kAllow),
  };
}

TEST(SeccompEvaluator, BranchesOnArchAndNr) {
  const BpfProgram program = TinyFilter();
  EXPECT_EQ(EvaluateSeccomp(program, Call(42)), Errno(EPERM));
  EXPECT_EQ(EvaluateSeccomp(program, Call(43)), kAllow);
  EXPECT_EQ(EvaluateSeccomp(program, Call(42, {}, kForeignArch)), kKillProcess);
}

TEST(SeccompEvaluator, LoadsArgumentWordsInHostOrder) {
  const seccomp_data data = Call(0, {0, 0x11223344'55667788ULL});
  const uint32_t lo = offsetof(seccomp_data, args) + 8;
  EXPECT_EQ(EvaluateSeccomp({Stmt(BPF_LD | BPF_W | BPF_ABS, lo), Stmt(BPF_RET | BPF_A, 0)}, data),
            0x55667788u);
  EXPECT_EQ(
      EvaluateSeccomp({Stmt(BPF_LD | BPF_W | BPF_ABS, lo + 4), Stmt(BPF_RET | BPF_A, 0)}, data),
      0x11223344u);
  EXPECT_EQ(EvaluateSeccomp({Stmt(BPF_LD | BPF_W | BPF_ABS, 8), Stmt(BPF_RET | BPF_A, 0)}, data),
            0x00001000u);  // low word of instruction_pointer
  EXPECT_EQ(EvaluateSeccomp({Stmt(BPF_LD | BPF_W | BPF_LEN, 0), Stmt(BPF_RET | BPF_A, 0)}, data),
            64u);
}

TEST(SeccompEvaluator, AluWithConstants) {
  const BpfProgram program = {
      Stmt(BPF_LD | BPF_IMM, 6),
      Stmt(BPF_ALU | BPF_ADD | BPF_K, 4),     // 10
      Stmt(BPF_ALU | BPF_MUL | BPF_K, 3),     // 30
      Stmt(BPF_ALU | BPF_SUB | BPF_K, 2),     // 28
      Stmt(BPF_ALU | BPF_DIV | BPF_K, 7),     // 4
      Stmt(BPF_ALU | BPF_LSH | BPF_K, 4),     // 0x40
      Stmt(BPF_ALU | BPF_OR | BPF_K, 0x3),    // 0x43
      Stmt(BPF_ALU | BPF_XOR | BPF_K, 0xff),  // 0xbc
      Stmt(BPF_ALU | BPF_AND | BPF_K, 0xf0),  // 0xb0
      Stmt(BPF_ALU | BPF_RSH | BPF_K, 4),     // 0xb
      Stmt(BPF_ALU | BPF_NEG, 0),             // -11
      Stmt(BPF_RET | BPF_A, 0),
  };
  EXPECT_EQ(EvaluateSeccomp(program, Call(0)), 0xfffffff5u);
}

TEST(SeccompEvaluator, AluWithXAndScratchMemory) {
  const BpfProgram program = {
      Stmt(BPF_LDX | BPF_IMM, 5),
      Stmt(BPF_MISC | BPF_TXA, 0),  // A = 5
      Stmt(BPF_ST, 3),              // M[3] = 5
      Stmt(BPF_LD | BPF_IMM, 100),
      Stmt(BPF_ALU | BPF_SUB | BPF_X, 0),  // 95
      Stmt(BPF_ALU | BPF_DIV | BPF_X, 0),  // 19
      Stmt(BPF_MISC | BPF_TAX, 0),         // X = 19
      Stmt(BPF_LD | BPF_MEM, 3),           // A = 5
      Stmt(BPF_ALU | BPF_MUL | BPF_X, 0),  // 95
      Stmt(BPF_STX, 15),                   // M[15] = 19
      Stmt(BPF_LDX | BPF_MEM, 15),         // X = 19
      Stmt(BPF_ALU | BPF_ADD | BPF_X, 0),  // 114 = 0x72
      Stmt(BPF_LDX | BPF_IMM, 56),         // a shift count is taken mod 32: 24
      Stmt(BPF_ALU | BPF_LSH | BPF_X, 0),  // 0x72000000
      Stmt(BPF_LDX | BPF_IMM, 52),         // 20
      Stmt(BPF_ALU | BPF_RSH | BPF_X, 0),  // 0x720
      Stmt(BPF_LDX | BPF_IMM, 0xf0f),
      Stmt(BPF_ALU | BPF_AND | BPF_X, 0),  // 0x700
      Stmt(BPF_LDX | BPF_IMM, 0x11),
      Stmt(BPF_ALU | BPF_OR | BPF_X, 0),  // 0x711
      Stmt(BPF_LDX | BPF_IMM, 0x101),
      Stmt(BPF_ALU | BPF_XOR | BPF_X, 0),  // 0x610
      Stmt(BPF_RET | BPF_A, 0),
  };
  EXPECT_EQ(EvaluateSeccomp(program, Call(0)), 0x610u);
}

TEST(SeccompEvaluator, DivisionByZeroInXReturnsZeroLikeTheKernel) {
  const BpfProgram program = {
      Stmt(BPF_LD | BPF_IMM, 7),
      Stmt(BPF_LDX | BPF_IMM, 0),
      Stmt(BPF_ALU | BPF_DIV | BPF_X, 0),
      Stmt(BPF_RET | BPF_K, kAllow),
  };
  EXPECT_EQ(EvaluateSeccomp(program, Call(0)), 0u);  // SECCOMP_RET_KILL_THREAD
}

// Each jump kind, against K and X: returns 1 if taken, 2 if not.
uint32_t RunJump(uint16_t op, uint16_t src, uint32_t a, uint32_t operand) {
  const BpfProgram program = {
      Stmt(BPF_LD | BPF_IMM, a),
      Stmt(BPF_LDX | BPF_IMM, operand),
      Jump(BPF_JMP | op | src, src == BPF_K ? operand : 0xdead, 0, 1),
      Stmt(BPF_RET | BPF_K, 1),
      Stmt(BPF_RET | BPF_K, 2),
  };
  return EvaluateSeccomp(program, Call(0));
}

TEST(SeccompEvaluator, ConditionalJumpsWithKAndX) {
  for (uint16_t src : {uint16_t{BPF_K}, uint16_t{BPF_X}}) {
    SCOPED_TRACE(src == BPF_K ? "K" : "X");
    EXPECT_EQ(RunJump(BPF_JEQ, src, 7, 7), 1u);
    EXPECT_EQ(RunJump(BPF_JEQ, src, 7, 8), 2u);
    EXPECT_EQ(RunJump(BPF_JGT, src, 8, 7), 1u);
    EXPECT_EQ(RunJump(BPF_JGT, src, 7, 7), 2u);
    EXPECT_EQ(RunJump(BPF_JGE, src, 7, 7), 1u);
    EXPECT_EQ(RunJump(BPF_JGE, src, 6, 7), 2u);
    EXPECT_EQ(RunJump(BPF_JGT, src, 0x80000000u, 1), 1u);  // unsigned
    EXPECT_EQ(RunJump(BPF_JSET, src, 0b1010, 0b0010), 1u);
    EXPECT_EQ(RunJump(BPF_JSET, src, 0b1010, 0b0101), 2u);
  }
}

TEST(SeccompEvaluator, UnconditionalJumpSkips) {
  const BpfProgram program = {
      Stmt(BPF_JMP | BPF_JA, 1),
      Stmt(BPF_RET | BPF_K, kKillProcess),
      Stmt(BPF_RET | BPF_K, kAllow),
  };
  EXPECT_EQ(EvaluateSeccomp(program, Call(0)), kAllow);
}

// Each malformed program differs from a valid one that returns ALLOW by one
// instruction, so KILL_PROCESS can only come from the rejection.
TEST(SeccompEvaluator, RejectsMalformedPrograms) {
  const sock_filter ret_allow = Stmt(BPF_RET | BPF_K, kAllow);
  const sock_filter nop = Stmt(BPF_LD | BPF_IMM, 0);
  struct Case {
    const char* what;
    sock_filter insn;
  };
  const Case cases[] = {
      {"valid control", nop},
      {"conditional jump out of range (not taken)", Jump(BPF_JMP | BPF_JEQ | BPF_K, 12345, 5, 0)},
      {"JA out of range", Stmt(BPF_JMP | BPF_JA, 1)},
      {"JA far out of range", Stmt(BPF_JMP | BPF_JA, 0x10000000)},
      {"load past seccomp_data", Stmt(BPF_LD | BPF_W | BPF_ABS, 64)},
      {"unaligned load", Stmt(BPF_LD | BPF_W | BPF_ABS, 2)},
      {"half-word load", Stmt(BPF_LD | BPF_H | BPF_ABS, 0)},
      {"indirect load", Stmt(BPF_LD | BPF_W | BPF_IND, 0)},
      {"BPF_MOD (not allowed in seccomp)", Stmt(BPF_ALU | BPF_MOD | BPF_K, 3)},
      {"division by constant zero", Stmt(BPF_ALU | BPF_DIV | BPF_K, 0)},
      {"shift by 32", Stmt(BPF_ALU | BPF_LSH | BPF_K, 32)},
      {"scratch index 16", Stmt(BPF_ST, 16)},
      {"scratch read before write", Stmt(BPF_LD | BPF_MEM, 0)},
      {"unknown opcode", Stmt(0xff, 0)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const BpfProgram program = {c.insn, ret_allow};
    const uint32_t expected = &c == &cases[0] ? kAllow : kKillProcess;
    EXPECT_EQ(EvaluateSeccomp(program, Call(0)), expected);
  }

  EXPECT_EQ(EvaluateSeccomp({}, Call(0)), kKillProcess) << "empty";
  EXPECT_EQ(EvaluateSeccomp({nop}, Call(0)), kKillProcess) << "no final RET";
  EXPECT_EQ(EvaluateSeccomp({Stmt(BPF_RET | BPF_K, kAllow), nop}, Call(0)), kKillProcess)
      << "last instruction is not a RET even though it is never reached";
  EXPECT_EQ(EvaluateSeccomp(BpfProgram(BPF_MAXINSNS, ret_allow), Call(0)), kAllow);
  EXPECT_EQ(EvaluateSeccomp(BpfProgram(BPF_MAXINSNS + 1, ret_allow), Call(0)), kKillProcess)
      << "longer than BPF_MAXINSNS";
}

TEST(SeccompEvaluator, RejectsScratchReadUninitialisedOnOnePath) {
  // M[0] is written only when nr == 1; the join then reads it.
  const BpfProgram program = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, 0),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1),
      Stmt(BPF_ST, 0),
      Stmt(BPF_LD | BPF_MEM, 0),
      Stmt(BPF_RET | BPF_K, kAllow),
  };
  // Rejected for every input, including the one whose path writes M[0].
  EXPECT_EQ(EvaluateSeccomp(program, Call(1)), kKillProcess);
  EXPECT_EQ(EvaluateSeccomp(program, Call(2)), kKillProcess);

  // The same program with M[0] written before the branch is accepted.
  const BpfProgram both_paths = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, 0),
      Stmt(BPF_ST, 0),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1),
      Stmt(BPF_ST, 0),
      Stmt(BPF_LD | BPF_MEM, 0),
      Stmt(BPF_RET | BPF_K, kAllow),
  };
  EXPECT_EQ(EvaluateSeccomp(both_paths, Call(1)), kAllow);
  EXPECT_EQ(EvaluateSeccomp(both_paths, Call(2)), kAllow);
}

// ---------------------------------------------------------------------------
// The real filter.

TEST(SeccompFilter, CompilesToAProgramTheKernelWouldAccept) {
  const BpfProgram& program = DefaultFilter();
  ASSERT_FALSE(program.empty());
  EXPECT_LE(program.size(), size_t{BPF_MAXINSNS});
  EXPECT_EQ(program.back().code, BPF_RET | BPF_K);
  EXPECT_NE(EvaluateSeccomp(program, Call(SYS_read)), kKillProcess);
}

TEST(SeccompFilter, AllowsEverydayCalls) {
  for (int nr : {SYS_read, SYS_write, SYS_openat, SYS_close, SYS_mmap, SYS_munmap, SYS_mprotect,
                 SYS_brk, SYS_futex, SYS_getrandom, SYS_execve, SYS_wait4, SYS_exit_group,
                 SYS_rt_sigaction, SYS_prlimit64, SYS_pidfd_open}) {
    SCOPED_TRACE(nr);
    EXPECT_EQ(Eval(nr, {3, 0, 0, 0, 0, 0}), kAllow);
  }
  // A syscall number past the table is left to the kernel (ENOSYS).
  EXPECT_EQ(Eval(1000), kAllow);
}

TEST(SeccompFilter, AllowsCloneWithoutNamespaceFlags) {
  // fork() as glibc does it, and a pthread_create().
  EXPECT_EQ(Eval(SYS_clone, {CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD}), kAllow);
  EXPECT_EQ(
      Eval(SYS_clone, {CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                       CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID}),
      kAllow);
  EXPECT_EQ(Eval(SYS_clone, {CLONE_VM | CLONE_VFORK | SIGCHLD}), kAllow);
}

TEST(SeccompFilter, DeniesCloneWithEachNamespaceFlag) {
  const struct {
    uint64_t flag;
    const char* name;
  } flags[] = {{CLONE_NEWNS, "NEWNS"},        {CLONE_NEWUTS, "NEWUTS"}, {CLONE_NEWIPC, "NEWIPC"},
               {CLONE_NEWUSER, "NEWUSER"},    {CLONE_NEWPID, "NEWPID"}, {CLONE_NEWNET, "NEWNET"},
               {CLONE_NEWCGROUP, "NEWCGROUP"}};
  for (const auto& f : flags) {
    SCOPED_TRACE(f.name);
    EXPECT_EQ(Eval(SYS_clone, {f.flag}), Errno(EPERM));
    EXPECT_EQ(Eval(SYS_clone, {f.flag | SIGCHLD | CLONE_CHILD_SETTID}), Errno(EPERM));
    // The kernel ignores the upper 32 bits of clone(2)'s flags; so must we.
    EXPECT_EQ(Eval(SYS_clone, {f.flag | (0xabcdULL << 32)}), Errno(EPERM));
  }
}

TEST(SeccompFilter, Clone3GetsEnosysSoGlibcFallsBackToClone) {
  EXPECT_EQ(Eval(SYS_clone3, {0, 88}), Errno(ENOSYS));
}

TEST(SeccompFilter, DeniesMountWithEperm) {
  EXPECT_EQ(Eval(SYS_mount), Errno(EPERM));
  EXPECT_EQ(Eval(SYS_mount, {0, 0, 0, MS_BIND | MS_REC}), Errno(EPERM));
}

struct DeniedCall {
  const char* name;
  int nr;
};

#define KILN_DENIED(name) \
  DeniedCall { #name, SYS_##name }

// Written independently of the list in seccomp.cc (what is denied, and why:
// docs/threat-model.md, the seccomp layer).
const DeniedCall kDeniedCalls[] = {
    KILN_DENIED(mount),
    KILN_DENIED(umount2),
    KILN_DENIED(pivot_root),
    KILN_DENIED(chroot),
    KILN_DENIED(move_mount),
    KILN_DENIED(open_tree),
    KILN_DENIED(fsopen),
    KILN_DENIED(fsconfig),
    KILN_DENIED(fsmount),
    KILN_DENIED(fspick),
    KILN_DENIED(mount_setattr),
    KILN_DENIED(unshare),
    KILN_DENIED(setns),
    KILN_DENIED(ptrace),
    KILN_DENIED(process_vm_readv),
    KILN_DENIED(process_vm_writev),
    KILN_DENIED(process_madvise),
    KILN_DENIED(pidfd_getfd),
    KILN_DENIED(kcmp),
    KILN_DENIED(bpf),
    KILN_DENIED(perf_event_open),
    KILN_DENIED(userfaultfd),
    KILN_DENIED(io_uring_setup),
    KILN_DENIED(io_uring_enter),
    KILN_DENIED(io_uring_register),
    KILN_DENIED(keyctl),
    KILN_DENIED(add_key),
    KILN_DENIED(request_key),
    KILN_DENIED(kexec_load),
    KILN_DENIED(kexec_file_load),
    KILN_DENIED(init_module),
    KILN_DENIED(finit_module),
    KILN_DENIED(delete_module),
    KILN_DENIED(reboot),
    KILN_DENIED(swapon),
    KILN_DENIED(swapoff),
    KILN_DENIED(acct),
    KILN_DENIED(settimeofday),
    KILN_DENIED(clock_settime),
    KILN_DENIED(clock_adjtime),
    KILN_DENIED(adjtimex),
    KILN_DENIED(syslog),
    KILN_DENIED(quotactl),
    KILN_DENIED(quotactl_fd),
    KILN_DENIED(nfsservctl),
    KILN_DENIED(lookup_dcookie),
    KILN_DENIED(open_by_handle_at),
    KILN_DENIED(name_to_handle_at),
    KILN_DENIED(fanotify_init),
    KILN_DENIED(vhangup),
    KILN_DENIED(sethostname),
    KILN_DENIED(setdomainname),
#if defined(__x86_64__)
    KILN_DENIED(iopl),
    KILN_DENIED(ioperm),
    KILN_DENIED(uselib),
    KILN_DENIED(_sysctl),
    KILN_DENIED(modify_ldt),
#endif
};

#undef KILN_DENIED

class SeccompDeniedCall : public ::testing::TestWithParam<DeniedCall> {};

TEST_P(SeccompDeniedCall, GetsEperm) {
  EXPECT_EQ(Eval(GetParam().nr), Errno(EPERM));
  EXPECT_EQ(Eval(GetParam().nr, {1, 2, 3, 4, 5, 6}), Errno(EPERM));
}

INSTANTIATE_TEST_SUITE_P(SeccompFilter, SeccompDeniedCall, ::testing::ValuesIn(kDeniedCalls),
                         [](const ::testing::TestParamInfo<DeniedCall>& param_info) {
                           return std::string(param_info.param.name);
                         });

TEST(SeccompFilter, PersonalityAllowsOnlyLinuxAndQuery) {
  EXPECT_EQ(Eval(SYS_personality, {0}), kAllow);
  EXPECT_EQ(Eval(SYS_personality, {0xffffffff}), kAllow);
  for (uint64_t persona : {uint64_t{1}, uint64_t{PER_LINUX32}, uint64_t{ADDR_NO_RANDOMIZE},
                           uint64_t{READ_IMPLIES_EXEC}, uint64_t{UNAME26}, uint64_t{MMAP_PAGE_ZERO},
                           uint64_t{PER_LINUX} | ADDR_NO_RANDOMIZE, uint64_t{0x80000000},
                           uint64_t{0x7fffffff}, uint64_t{0xfffffffe}, uint64_t{0x00ff00ff},
                           uint64_t{0x1'00000000}, uint64_t{0x1'ffffffff}, ~uint64_t{0}}) {
    SCOPED_TRACE(persona);
    EXPECT_EQ(Eval(SYS_personality, {persona}), Errno(EPERM));
  }
  // Every single-bit and every all-but-one-bit persona.
  for (unsigned bit = 0; bit < 32; ++bit) {
    SCOPED_TRACE(bit);
    EXPECT_EQ(Eval(SYS_personality, {uint64_t{1} << bit}), Errno(EPERM));
    EXPECT_EQ(Eval(SYS_personality, {0xffffffffULL & ~(uint64_t{1} << bit)}), Errno(EPERM));
  }
}

TEST(SeccompFilter, IoctlAllowsTerminalQueries) {
  EXPECT_EQ(Eval(SYS_ioctl, {0, TCGETS}), kAllow);
  EXPECT_EQ(Eval(SYS_ioctl, {1, TIOCGWINSZ}), kAllow);
  EXPECT_EQ(Eval(SYS_ioctl, {3, FIONREAD}), kAllow);
}

TEST(SeccompFilter, IoctlDeniesTiocstiAndTioclinux) {
  EXPECT_EQ(Eval(SYS_ioctl, {0, TIOCSTI}), Errno(EPERM));
  EXPECT_EQ(Eval(SYS_ioctl, {0, TIOCLINUX}), Errno(EPERM));
  // The kernel truncates the request to 32 bits (CVE-2017-5226's variants).
  EXPECT_EQ(Eval(SYS_ioctl, {0, TIOCSTI | (0xdeadbeefULL << 32)}), Errno(EPERM));
  EXPECT_EQ(Eval(SYS_ioctl, {0, TIOCLINUX | (1ULL << 32)}), Errno(EPERM));
}

TEST(SeccompFilter, SocketAllowsOnlyUnixByDefault) {
  for (int nr : {SYS_socket, SYS_socketpair}) {
    SCOPED_TRACE(nr);
    EXPECT_EQ(Eval(nr, {AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC}), kAllow);
    EXPECT_EQ(Eval(nr, {AF_UNIX, SOCK_DGRAM}), kAllow);
    for (uint64_t domain : {uint64_t{AF_UNSPEC}, uint64_t{AF_INET}, uint64_t{AF_INET6},
                            uint64_t{AF_NETLINK}, uint64_t{AF_PACKET}, uint64_t{40} /* AF_VSOCK */,
                            uint64_t{AF_ALG}, uint64_t{AF_BLUETOOTH}, uint64_t{255}, ~uint64_t{0},
                            uint64_t{AF_UNIX} | (uint64_t{1} << 32)}) {
      SCOPED_TRACE(domain);
      EXPECT_EQ(Eval(nr, {domain, SOCK_STREAM}), Errno(EAFNOSUPPORT));
    }
  }
}

TEST(SeccompFilter, AllowInetSocketsAddsOnlyInetAndInet6) {
  const BpfProgram& program = InetFilter();
  for (int nr : {SYS_socket, SYS_socketpair}) {
    SCOPED_TRACE(nr);
    for (uint64_t domain : {AF_UNIX, AF_INET, AF_INET6}) {
      SCOPED_TRACE(domain);
      EXPECT_EQ(EvaluateSeccomp(program, Call(nr, {domain, SOCK_STREAM})), kAllow);
    }
    // Everything else, including every domain between AF_INET and AF_INET6.
    for (uint64_t domain = 0; domain < 64; ++domain) {
      if (domain == AF_UNIX || domain == AF_INET || domain == AF_INET6) continue;
      SCOPED_TRACE(domain);
      EXPECT_EQ(EvaluateSeccomp(program, Call(nr, {domain, SOCK_STREAM})), Errno(EAFNOSUPPORT));
    }
    EXPECT_EQ(EvaluateSeccomp(program, Call(nr, {AF_INET | (1ULL << 32)})), Errno(EAFNOSUPPORT));
  }
  // The option changes sockets and nothing else.
  EXPECT_EQ(EvaluateSeccomp(program, Call(SYS_mount)), Errno(EPERM));
  EXPECT_EQ(EvaluateSeccomp(program, Call(SYS_clone, {CLONE_NEWUSER})), Errno(EPERM));
}

TEST(SeccompFilter, KillsForeignArchitecture) {
  // i386 numbers through int 0x80: 3 is read, 21 is mount.
  EXPECT_EQ(EvaluateSeccomp(DefaultFilter(), Call(3, {}, kForeignArch)), kKillProcess);
  EXPECT_EQ(EvaluateSeccomp(DefaultFilter(), Call(21, {}, kForeignArch)), kKillProcess);
  EXPECT_EQ(EvaluateSeccomp(DefaultFilter(), Call(SYS_read, {}, 0)), kKillProcess);
}

TEST(SeccompFilter, KillsX32Syscalls) {
#if defined(__x86_64__)
  constexpr int kX32Bit = 0x40000000;  // __X32_SYSCALL_BIT
  EXPECT_EQ(Eval(kX32Bit | SYS_read), kKillProcess);
  EXPECT_EQ(Eval(kX32Bit | SYS_mount), kKillProcess);
  EXPECT_EQ(Eval(kX32Bit | 512), kKillProcess);  // x32 rt_sigaction
  EXPECT_EQ(Eval(0x7fffffff), kKillProcess);
#else
  GTEST_SKIP() << "x32 is an x86_64 ABI";
#endif
}

TEST(SeccompFilter, OptionsProduceDifferentPrograms) {
  const BpfProgram& a = DefaultFilter();
  const BpfProgram& b = InetFilter();
  EXPECT_NE(a.size(), b.size());
}

TEST(SeccompApply, RejectsBadArgumentsWithoutCallingTheKernel) {
  errno = 0;
  EXPECT_EQ(ApplySeccompInChild(nullptr, 1), -1);
  EXPECT_EQ(errno, EINVAL);
  const sock_filter ret = Stmt(BPF_RET | BPF_K, kAllow);
  errno = 0;
  EXPECT_EQ(ApplySeccompInChild(&ret, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  // 65537 would become 1 in sock_fprog's unsigned short and install a
  // one-instruction filter; it must be refused before the kernel sees it.
  std::vector<sock_filter> too_long(65537, ret);
  errno = 0;
  EXPECT_EQ(ApplySeccompInChild(too_long.data(), too_long.size()), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace kiln::isolation
