// What the host under the tests gives, probed by the tests themselves and not
// through kiln: a test that depends on a host feature skips (with the reason)
// only when this independent probe agrees that the feature is missing, so a
// kiln bug cannot turn its own tests into skips, and a host that lacks a
// feature cannot fail them. Each fact is probed once per process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::testing {

// The interpreter the profiles run (kiln.toml: interpreter = "/usr/bin/python3"),
// used bare, outside any sandbox, for the host probes below.
inline constexpr const char* kHostPython = "/usr/bin/python3";

// Whether `int 0x80` from 64-bit code runs an i386 system call on this host
// (CONFIG_IA32_EMULATION, and not ia32_emulation=false on the kernel command
// line). Probed by running tests/probes/int80.py in a bare kHostPython: kOn
// when it returned getpid's value, kOff when it died of SIGSEGV after
// "before" and before "after" (the CPU faults before any system call),
// kUnknown for anything else.
enum class Ia32Emulation { kOn, kOff, kUnknown };
struct Ia32Fact {
  Ia32Emulation state = Ia32Emulation::kUnknown;
  std::string detail;  // one line: what the bare probe did
};
const Ia32Fact& HostIa32();

// A yes/no fact and why.
struct HostFact {
  bool present = false;
  std::string detail;
};

// A forked child of this process can unshare(CLONE_NEWUSER).
const HostFact& HostUserNamespaces();

// The Landlock ABI version (landlock_create_ruleset(NULL, 0, VERSION)); 0
// when the kernel has no Landlock (detail: the errno).
struct LandlockFact {
  int abi = 0;
  std::string detail;
};
const LandlockFact& HostLandlock();

bool HostIsRoot();

// This process may make cgroups limiting memory, pids and cpu: its own
// cgroup v2 directory lists the three in cgroup.controllers and is writable
// by us, or each of the three is mounted as a cgroup v1 hierarchy in which
// our own cgroup's directory is writable by us. Read from /proc/self/mountinfo,
// /proc/self/cgroup and access(2).
const HostFact& HostCgroupControllers();

// kiln can cap a sandbox's block I/O here: the cgroup hierarchy it limits with
// offers io (v2, in our cgroup.controllers) or blkio (v1, our directory
// writable), and /usr sits on a block device with a request queue
// (/sys/dev/block/MAJ:MIN, a partition's disk). Read from /proc and /sys.
const HostFact& HostIoThrottle();

// Where cgroup hierarchies (v1 and v2) are mounted, from /proc/self/mountinfo.
std::vector<std::string> HostCgroupMountPoints();

// gVisor runs here as kiln's gVisor backend needs it (docs/adr/0021): we are
// root, cgroups are present (HostCgroupControllers), and `runsc
// --network=none do /usr/bin/python3 -c ...` (the first runsc on PATH, or
// /usr/bin, /usr/sbin) printed what the program printed. detail: what failed.
const HostFact& HostGvisor();

// MemAvailable of /proc/meminfo, in bytes; nullopt when it cannot be read.
std::optional<uint64_t> HostMemAvailable();

// The modules of `modules` that kHostPython cannot import (one probe per
// module, cached).
std::vector<std::string> MissingPythonModules(const std::vector<std::string>& modules);
// "kHostPython cannot import a, b (install python3-...)" or nullopt.
std::optional<std::string> PythonModulesMissingReason(const std::vector<std::string>& modules);

}  // namespace kiln::testing

// GTEST_SKIP()s the current test (from its body) when kHostPython lacks one
// of the modules.
#define KILN_REQUIRE_PYTHON_MODULES(...)                                                 \
  do {                                                                                   \
    if (auto kiln_missing_ = ::kiln::testing::PythonModulesMissingReason({__VA_ARGS__})) \
      GTEST_SKIP() << *kiln_missing_;                                                    \
  } while (0)
