// Unit tests (label "unit", no privileges): the real filter compiled by
// libseccomp, run through EvaluateSeccomp. The evaluator is tested first on
// hand-written programs, so that a broken evaluator cannot make the filter
// tests pass vacuously. Syscall numbers come from <sys/syscall.h>, not from
// libseccomp, so the tests also cross-check libseccomp's tables.
#include "isolation/seccomp.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/personality.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
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
}

// The gVisor backend's filter (docs/adr/0021): memfd_create refused with
// EPERM (no vm.memfd_noexec there), everything else as in the default one.
TEST(SeccompFilter, RefuseMemfdAnswersMemfdCreateWithEperm) {
  EXPECT_EQ(Eval(SYS_memfd_create, {0, 0, 0, 0, 0, 0}), kAllow);
  SeccompOptions options;
  options.refuse_memfd = true;
  Result<BpfProgram> r = CompileSeccompFilter(options);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  for (uint64_t flags : {0ULL, 1ULL, 8ULL, 0x10ULL}) {
    SCOPED_TRACE(flags);
    EXPECT_EQ(EvaluateSeccomp(*r, Call(SYS_memfd_create, {0, flags, 0, 0, 0, 0})), Errno(EPERM));
  }
  for (int nr : {SYS_read, SYS_openat, SYS_mmap, SYS_execve, SYS_pidfd_open}) {
    SCOPED_TRACE(nr);
    EXPECT_EQ(EvaluateSeccomp(*r, Call(nr, {3, 0, 0, 0, 0, 0})), kAllow);
  }
  EXPECT_EQ(EvaluateSeccomp(*r, Call(SYS_mount)), Errno(EPERM));
}

// The allow-list's default (ADR 0003): ENOSYS, so that libc falls back.
TEST(SeccompFilter, CallsOffTheAllowListGetEnosys) {
  // Numbers past any table, and calls the old deny list let through.
  // (uretprobe's row holds for the program; the kernel itself lets uretprobe
  // bypass seccomp since Linux 6.13 and kills any caller outside a uprobe
  // trampoline with SIGILL: docs/threat-model.md.)
  for (int nr : {1000, 0x3fff}) EXPECT_EQ(Eval(nr), Errno(ENOSYS)) << nr;
#if defined(__x86_64__)
  const struct {
    int nr;
    const char* name;
  } calls[] = {
      {447, "memfd_secret"},
      {237, "mbind"},
      {238, "set_mempolicy"},
      {239, "get_mempolicy"},
      {279, "move_pages"},
      {256, "migrate_pages"},
      {450, "set_mempolicy_home_node"},
      {335, "uretprobe"},
      {451, "cachestat"},
      {453, "map_shadow_stack"},
      {457, "statmount"},
      {458, "listmount"},
      {459, "lsm_get_self_attr"},
      {460, "lsm_set_self_attr"},
      {461, "lsm_list_modules"},
      {462, "mseal"},
      {468, "file_getattr"},
      {206, "io_setup"},
      {209, "io_submit"},
      {278, "vmsplice"},
      {216, "remap_file_pages"},
      {162, "sync"},
      {205, "set_thread_area"},
      {136, "ustat"},
      {139, "sysfs"},
      {301, "fanotify_mark"},
  };
  for (const auto& c : calls) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(Eval(c.nr), Errno(ENOSYS));
    EXPECT_EQ(Eval(c.nr, {1, 2, 3, 4, 5, 6}), Errno(ENOSYS));
  }
#endif
}

// Every name on the allow-list is a system call of some architecture libseccomp
// knows: a misspelt name would be skipped silently, as a call the native
// architecture does not have.
TEST(SeccompFilter, AllowListNamesAreSystemCalls) {
  for (const std::string& name : SeccompAllowedCallNames()) {
    bool known = false;
    for (uint32_t arch : {uint32_t{SCMP_ARCH_X86_64}, uint32_t{SCMP_ARCH_X86},
                          uint32_t{SCMP_ARCH_AARCH64}, uint32_t{SCMP_ARCH_ARM}}) {
      known = known || seccomp_syscall_resolve_name_arch(arch, name.c_str()) >= 0;
    }
    EXPECT_TRUE(known) << name;
  }
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

// The allow rules cover every request but the two denied ones: a sweep of
// the neighbourhood (the two differ only in bits 1-3), of every single bit,
// and of pseudo-random requests with and without junk in the upper word.
TEST(SeccompFilter, IoctlAllowsEveryOtherRequest) {
  auto expected = [](uint64_t request) {
    const uint32_t low = static_cast<uint32_t>(request);
    return low == TIOCSTI || low == TIOCLINUX ? Errno(EPERM) : kAllow;
  };
  std::vector<uint64_t> requests;
  for (uint64_t r = 0x5400; r < 0x5500; ++r) requests.push_back(r);
  for (unsigned bit = 0; bit < 64; ++bit) {
    requests.push_back(uint64_t{1} << bit);
    requests.push_back(TIOCSTI ^ (uint64_t{1} << bit));
    requests.push_back(TIOCLINUX ^ (uint64_t{1} << bit));
  }
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 5000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    requests.push_back(x);
    requests.push_back(x & 0xffffffffULL);
  }
  for (uint64_t r : requests) {
    ASSERT_EQ(Eval(SYS_ioctl, {3, r}), expected(r)) << std::hex << r;
  }
}

// POSIX_FADV_DONTNEED would evict the host's shared page cache: answered with
// success (SECCOMP_RET_ERRNO with errno 0), not carried out; other advice
// passes. The kernel reads the advice as an int: junk above it changes nothing.
TEST(SeccompFilter, FadviseDontneedIsANoOp) {
#if defined(SYS_fadvise64)
  EXPECT_EQ(Eval(SYS_fadvise64, {3, 0, 0, POSIX_FADV_DONTNEED}), Errno(0));
  EXPECT_EQ(Eval(SYS_fadvise64, {3, 0, 0, POSIX_FADV_DONTNEED | (7ULL << 32)}), Errno(0));
  for (uint64_t advice : {POSIX_FADV_NORMAL, POSIX_FADV_RANDOM, POSIX_FADV_SEQUENTIAL,
                          POSIX_FADV_WILLNEED, POSIX_FADV_NOREUSE}) {
    EXPECT_EQ(Eval(SYS_fadvise64, {3, 0, 0, advice}), kAllow) << advice;
  }
  for (unsigned bit = 0; bit < 32; ++bit) {
    const uint64_t advice = POSIX_FADV_DONTNEED ^ (uint64_t{1} << bit);
    EXPECT_EQ(Eval(SYS_fadvise64, {3, 0, 0, advice}), kAllow) << advice;
  }
#else
  GTEST_SKIP() << "no fadvise64 on this architecture";
#endif
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

// ---------------------------------------------------------------------------
// The measured set and the golden decision tables (src/isolation/testdata/).

std::string TestData(const std::string& name) {
  return std::string(KILN_ISOLATION_TESTDATA) + "/" + name;
}

std::string ArchName(uint32_t arch) {
  switch (arch) {
    case SCMP_ARCH_X86_64: return "x86_64";
    case SCMP_ARCH_AARCH64: return "aarch64";
    default: return "arch-" + std::to_string(arch);
  }
}

// Arguments that make each argument-filtered call pass: what libc and CPython
// send for fork, a thread, a Unix socket, a terminal query, the persona query.
std::array<uint64_t, 6> TypicalArgs(const std::string& name) {
  if (name == "clone") return {CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD};
  if (name == "socket" || name == "socketpair") return {AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC};
  if (name == "ioctl") return {0, TCGETS};
  if (name == "personality") return {0xffffffff};
  return {};
}

// Every call the workloads made under the filter (tools/seccomp/measure.py)
// is allowed, with the arguments a program typically gives it. A call that
// should stay refused does not belong in the measured file: the measurement
// marks refusals, and whoever regenerates the file decides.
TEST(SeccompMeasured, EveryMeasuredCallIsAllowed) {
  const uint32_t native = seccomp_arch_native();
  const std::string path = TestData("seccomp_measured_" + ArchName(native) + ".txt");
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "no measured set for " << ArchName(native) << " (" << path << ")";
  size_t count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(0, line.find_first_of(" \t"));
    // Calls answered on purpose with something else than ALLOW.
    if (name == "clone3") {
      EXPECT_EQ(Eval(SYS_clone3), Errno(ENOSYS)) << "clone3 must fall back to clone";
      continue;
    }
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    ASSERT_GE(nr, 0) << "measured call '" << name << "' unknown to libseccomp";
    EXPECT_EQ(Eval(nr, TypicalArgs(name)), kAllow) << name;
    ++count;
  }
  EXPECT_GT(count, 50u) << path << " looks truncated";
}

std::string ActionName(uint32_t action) {
  switch (action & SECCOMP_RET_ACTION_FULL) {
    case SECCOMP_RET_ALLOW: return "allow";
    case SECCOMP_RET_KILL_PROCESS: return "kill-process";
    case SECCOMP_RET_KILL_THREAD: return "kill-thread";
    case SECCOMP_RET_ERRNO: {
      if ((action & SECCOMP_RET_DATA) == 0) return "errno 0 (success, not carried out)";
      const char* e = strerrorname_np(static_cast<int>(action & SECCOMP_RET_DATA));
      return std::string("errno ") + (e != nullptr ? e : std::to_string(action & SECCOMP_RET_DATA));
    }
    default: return "action " + std::to_string(action);
  }
}

// What the filter built for `arch` answers: each number 0..511 with no
// arguments, then the argument-filtered calls with the arguments that decide.
std::string DecisionTable(uint32_t arch, const BpfProgram& program) {
  std::ostringstream out;
  out << "# The seccomp filter kiln installs, built for " << ArchName(arch) << " by libseccomp "
      << seccomp_version()->major << "." << seccomp_version()->minor
      << ": the answer to each system call.\n"
      << "# Regenerate: KILN_UPDATE_SECCOMP_GOLDEN=1 isolation_unit_test "
         "--gtest_filter='*SeccompGolden*'\n";
  auto eval = [&](int nr, std::array<uint64_t, 6> args) {
    seccomp_data data{};
    data.nr = nr;
    data.arch = arch;
    for (size_t i = 0; i < args.size(); ++i) data.args[i] = args[i];
    return ActionName(EvaluateSeccomp(program, data));
  };
  for (int nr = 0; nr < 512; ++nr) {
    char* name = seccomp_syscall_resolve_num_arch(arch, nr);
    out << nr << " " << (name != nullptr ? name : "-") << " " << eval(nr, {}) << "\n";
    std::free(name);
  }
  const struct {
    const char* call;
    const char* what;
    std::array<uint64_t, 6> args;
  } cases[] = {
      {"clone", "fork", {CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD}},
      {"clone",
       "thread",
       {CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
        CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID}},
      {"clone", "NEWUSER", {CLONE_NEWUSER}},
      {"clone", "NEWNS|SIGCHLD", {CLONE_NEWNS | SIGCHLD}},
      {"clone", "NEWNET upper junk", {CLONE_NEWNET | (0xabcdULL << 32)}},
      {"socket", "AF_UNIX", {AF_UNIX, SOCK_STREAM}},
      {"socket", "AF_INET", {AF_INET, SOCK_STREAM}},
      {"socket", "AF_INET6", {AF_INET6, SOCK_DGRAM}},
      {"socket", "AF_NETLINK", {AF_NETLINK, SOCK_RAW}},
      {"socket", "AF_VSOCK", {40, SOCK_STREAM}},
      {"socket", "AF_UNIX upper junk", {AF_UNIX | (1ULL << 32), SOCK_STREAM}},
      {"socketpair", "AF_UNIX", {AF_UNIX, SOCK_STREAM}},
      {"socketpair", "AF_INET", {AF_INET, SOCK_STREAM}},
      {"ioctl", "TCGETS", {0, TCGETS}},
      {"ioctl", "FIONREAD", {0, FIONREAD}},
      {"ioctl", "TIOCSTI", {0, TIOCSTI}},
      {"ioctl", "TIOCSTI upper junk", {0, TIOCSTI | (0xdeadbeefULL << 32)}},
      {"ioctl", "TIOCLINUX", {0, TIOCLINUX}},
      {"fadvise64", "NORMAL", {3, 0, 0, POSIX_FADV_NORMAL}},
      {"fadvise64", "DONTNEED", {3, 0, 0, POSIX_FADV_DONTNEED}},
      {"fadvise64", "DONTNEED upper junk", {3, 0, 0, POSIX_FADV_DONTNEED | (1ULL << 32)}},
      {"personality", "PER_LINUX", {0}},
      {"personality", "query", {0xffffffff}},
      {"personality", "ADDR_NO_RANDOMIZE", {ADDR_NO_RANDOMIZE}},
      {"personality", "UNAME26", {UNAME26}},
      {"personality", "upper bits", {0x1'00000000}},
  };
  for (const auto& c : cases) {
    const int nr = seccomp_syscall_resolve_name_arch(arch, c.call);
    out << c.call << "(" << c.what << ") " << (nr >= 0 ? eval(nr, c.args) : "no such call") << "\n";
  }
  seccomp_data foreign{};
  foreign.nr = 0;
  foreign.arch = arch == SCMP_ARCH_X86_64 ? SCMP_ARCH_X86 : SCMP_ARCH_ARM;
  out << "foreign architecture " << ActionName(EvaluateSeccomp(program, foreign)) << "\n";
  if (arch == SCMP_ARCH_X86_64) {
    out << "x32 read " << eval(0x40000000, {}) << "\n";
  }
  return out.str();
}

class SeccompGolden : public ::testing::TestWithParam<uint32_t> {};

// The filter's answers, per architecture, against the reviewed file: a change
// of the lists or of libseccomp's output shows up as a diff in review.
TEST_P(SeccompGolden, MatchesTheReviewedDecisionTable) {
  const uint32_t arch = GetParam();
  SeccompOptions options;
  options.arch = arch;
  Result<BpfProgram> program = CompileSeccompFilter(options);
  ASSERT_TRUE(program.ok()) << program.error().ToString();
  const std::string table = DecisionTable(arch, program.value());
  const std::string path = TestData("seccomp_golden_" + ArchName(arch) + ".txt");
  if (std::getenv("KILN_UPDATE_SECCOMP_GOLDEN") != nullptr) {
    std::ofstream(path) << table;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path;
  std::stringstream golden;
  golden << in.rdbuf();
  if (seccomp_version()->major != 2 || seccomp_version()->minor != 5) {
    GTEST_SKIP() << "the golden files come from libseccomp 2.5 (Debian 12)";
  }
  EXPECT_EQ(table, golden.str()) << "regenerate with KILN_UPDATE_SECCOMP_GOLDEN=1 and review";
}

INSTANTIATE_TEST_SUITE_P(Arch, SeccompGolden,
                         ::testing::Values(uint32_t{SCMP_ARCH_X86_64}, uint32_t{SCMP_ARCH_AARCH64}),
                         [](const ::testing::TestParamInfo<uint32_t>& param_info) {
                           return ArchName(param_info.param);
                         });

// The native program built through the cross-architecture path equals the
// one a sandbox installs.
TEST(SeccompGoldenNative, NativeArchOptionBuildsTheSameProgram) {
  SeccompOptions options;
  options.arch = seccomp_arch_native();
  Result<BpfProgram> program = CompileSeccompFilter(options);
  ASSERT_TRUE(program.ok()) << program.error().ToString();
  const BpfProgram& native = DefaultFilter();
  ASSERT_EQ(program.value().size(), native.size());
  EXPECT_EQ(std::memcmp(program.value().data(), native.data(), native.size() * sizeof(sock_filter)),
            0);
}

}  // namespace
}  // namespace kiln::isolation
