#include "testlib/host_facts.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "testlib/kiln_runner.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

namespace kiln::testing {
namespace {

std::string Escaped(const std::string& s, size_t max = 200) {
  std::string out;
  for (char c : s.substr(0, max)) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out + (s.size() > max ? "..." : "");
}

Ia32Fact ProbeIa32() {
  Ia32Fact f;
  // The very probe the sandbox runs, prelude included, outside any sandbox.
  const ProcessResult r = RunProcess({kHostPython, "-I", "-c", WithPrelude(ReadProbe("int80.py"))});
  const std::string on = "before\nafter " + std::to_string(r.pid) + "\n";
  if (r.exit_code == 0 && r.out == on) {
    f.state = Ia32Emulation::kOn;
    f.detail = "IA32 emulation on: int 0x80 ran the i386 getpid in a bare " +
               std::string(kHostPython) + " (it returned the pid, " + std::to_string(r.pid) + ")";
  } else if (r.term_signal == SIGSEGV && r.out == "before\n") {
    f.state = Ia32Emulation::kOff;
    f.detail = "IA32 emulation off: int 0x80 faults before any system call";
  } else {
    f.state = Ia32Emulation::kUnknown;
    f.detail = "the bare int 0x80 probe neither returned getpid's value nor faulted (exit " +
               std::to_string(r.exit_code) + ", signal " + std::to_string(r.term_signal) +
               (r.timed_out ? ", timed out" : "") + ", stdout '" + Escaped(r.out) + "', stderr '" +
               Escaped(r.err) + "')";
  }
  return f;
}

HostFact ProbeUserNamespaces() {
  HostFact f;
  const pid_t pid = ::fork();
  if (pid < 0) {
    f.detail = std::string("fork: ") + std::strerror(errno);
    return f;
  }
  if (pid == 0) ::_exit(::unshare(CLONE_NEWUSER) == 0 ? 0 : (errno & 0x7f) | 0x80);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    f.present = true;
    f.detail = "a forked child could unshare(CLONE_NEWUSER)";
  } else if (WIFEXITED(status) && (WEXITSTATUS(status) & 0x80) != 0) {
    f.detail = std::string("unshare(CLONE_NEWUSER) in a forked child: ") +
               std::strerror(WEXITSTATUS(status) & 0x7f);
  } else {
    f.detail = "the unshare(CLONE_NEWUSER) probe child ended with status " + std::to_string(status);
  }
  return f;
}

LandlockFact ProbeLandlock() {
  LandlockFact f;
  errno = 0;
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, 1u /* _VERSION */);
  if (abi > 0) {
    f.abi = static_cast<int>(abi);
    f.detail = "Landlock ABI " + std::to_string(abi);
  } else {
    f.detail = std::string("landlock_create_ruleset(VERSION): ") + std::strerror(errno) +
               (errno == EOPNOTSUPP ? " (built, but not in the lsm= list)" : "");
  }
  return f;
}

struct CgroupMount {
  bool v2 = false;
  std::string root, mount_point;
  std::vector<std::string> controllers;  // v1 only
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

std::vector<CgroupMount> CgroupMounts() {
  std::vector<CgroupMount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mount-point options [optional...] - fstype source super-options
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string w;
    while (ls >> w) f.push_back(w);
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    const std::string& fstype = f[dash + 1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m;
    m.v2 = fstype == "cgroup2";
    m.root = f[3];
    m.mount_point = f[4];
    if (!m.v2 && dash + 3 < f.size()) m.controllers = Split(f[dash + 3], ',');
    out.push_back(m);
  }
  return out;
}

// Our cgroup's directory under a mount, for our path in that hierarchy.
std::string DirUnder(const CgroupMount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/" && rel.compare(0, m.root.size(), m.root) == 0) rel = rel.substr(m.root.size());
  if (rel == "/") rel.clear();
  return m.mount_point + rel;
}

bool Has(const std::vector<std::string>& v, const std::string& x) {
  for (const auto& e : v) {
    if (e == x) return true;
  }
  return false;
}

// Our own cgroups, from /proc/self/cgroup: controller ("" for v2) -> path.
std::map<std::string, std::string> OwnCgroups() {
  std::map<std::string, std::string> own;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controllers.empty()) own[""] = path;
    for (const auto& c : Split(controllers, ',')) own[c] = path;
  }
  return own;
}

HostFact ProbeCgroupControllers() {
  HostFact f;
  const std::vector<CgroupMount> mounts = CgroupMounts();
  std::map<std::string, std::string> own = OwnCgroups();
  const char* kNeeded[] = {"memory", "pids", "cpu"};
  std::string why;
  // v2: our own cgroup offers the three and is ours to write.
  for (const auto& m : mounts) {
    if (!m.v2 || own.count("") == 0) continue;
    const std::string dir = DirUnder(m, own[""]);
    const auto listed = ReadFile(dir + "/cgroup.controllers");
    const std::vector<std::string> have = Split(listed ? *listed : "", ' ');
    std::vector<std::string> trimmed;
    for (auto c : have) {
      while (!c.empty() && (c.back() == '\n' || c.back() == ' ')) c.pop_back();
      trimmed.push_back(c);
    }
    bool all = true;
    for (const char* c : kNeeded) all = all && Has(trimmed, c);
    if (!all) {
      why += "cgroup v2 at " + dir + " offers '" +
             (listed ? Escaped(*listed, 80) : "<unreadable>") + "', not memory, pids and cpu; ";
      continue;
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      why += "cgroup v2 at " + dir + " is not writable (" + std::strerror(errno) + "); ";
      continue;
    }
    f.present = true;
    f.detail = "cgroup v2 at " + dir + " offers memory, pids and cpu and is writable";
    return f;
  }
  // v1: each of the three mounted, our directory in it writable.
  std::string dirs;
  bool all = true;
  for (const char* c : kNeeded) {
    const CgroupMount* found = nullptr;
    for (const auto& m : mounts) {
      if (!m.v2 && Has(m.controllers, c)) found = &m;
    }
    if (found == nullptr || own.count(c) == 0) {
      why += std::string("cgroup v1 has no ") + c + " hierarchy of ours; ";
      all = false;
      continue;
    }
    const std::string dir = DirUnder(*found, own[c]);
    if (::access(dir.c_str(), W_OK) != 0) {
      why += "cgroup v1 " + dir + " is not writable (" + std::strerror(errno) + "); ";
      all = false;
      continue;
    }
    dirs += (dirs.empty() ? "" : ", ") + dir;
  }
  if (all) {
    f.present = true;
    f.detail = "cgroup v1 memory, pids and cpu writable at " + dirs;
    return f;
  }
  while (!why.empty() && (why.back() == ' ' || why.back() == ';')) why.pop_back();
  f.detail = why.empty() ? "no cgroup mount" : why;
  return f;
}

// The block device behind `path` that a throttle rule can name: its st_dev
// in /sys/dev/block, a partition's disk, with a request queue.
HostFact ThrottleableDiskOf(const std::string& path) {
  HostFact f;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    f.detail = "stat " + path + ": " + std::strerror(errno);
    return f;
  }
  const std::string num = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  if (major(st.st_dev) == 0) {
    f.detail = path + " is on device " + num + ", not a block device (overlayfs, tmpfs, ...)";
    return f;
  }
  char real[PATH_MAX];
  if (::realpath(("/sys/dev/block/" + num).c_str(), real) == nullptr) {
    f.detail = path + " is on " + num + ", which /sys/dev/block does not list";
    return f;
  }
  std::string disk = real;
  if (::access((disk + "/partition").c_str(), F_OK) == 0) disk = disk.substr(0, disk.rfind('/'));
  const std::string name = disk.substr(disk.rfind('/') + 1);
  struct stat q {};
  if (::stat((disk + "/queue").c_str(), &q) != 0 || !S_ISDIR(q.st_mode)) {
    f.detail = path + " is on " + num + " (" + name + "), which has no request queue";
    return f;
  }
  f.present = true;
  f.detail = path + " is on " + num + ", disk " + name;
  return f;
}

// kiln's sandboxes can get I/O limits here: the hierarchy kiln limits with
// (v2 when our v2 cgroup offers memory, pids and cpu, else v1) has io
// (v2: listed in our cgroup.controllers) or blkio (v1: mounted, our directory
// writable), and /usr is on a block device with a request queue.
HostFact ProbeIoThrottle() {
  HostFact f;
  const HostFact& cgroups = HostCgroupControllers();
  if (!cgroups.present) {
    f.detail = "no cgroup limits here: " + cgroups.detail;
    return f;
  }
  std::map<std::string, std::string> own = OwnCgroups();
  const bool v2 = cgroups.detail.rfind("cgroup v2", 0) == 0;
  std::string controller;
  for (const auto& m : CgroupMounts()) {
    if (v2 && m.v2 && own.count("")) {
      const std::string dir = DirUnder(m, own[""]);
      const auto listed = ReadFile(dir + "/cgroup.controllers");
      std::string text = listed ? *listed : "";
      for (char& c : text) c = c == '\n' ? ' ' : c;
      if (Has(Split(text, ' '), "io")) controller = "cgroup v2 io at " + dir;
    } else if (!v2 && !m.v2 && Has(m.controllers, "blkio") && own.count("blkio")) {
      const std::string dir = DirUnder(m, own["blkio"]);
      if (::access(dir.c_str(), W_OK) == 0) controller = "cgroup v1 blkio at " + dir;
    }
  }
  if (controller.empty()) {
    f.detail = v2 ? "cgroup v2 does not offer io to our cgroup"
                  : "cgroup v1 has no blkio hierarchy of ours that we may write";
    return f;
  }
  const HostFact disk = ThrottleableDiskOf("/usr");
  f.present = disk.present;
  f.detail = controller + "; " + disk.detail;
  return f;
}

std::string DebianPackageOf(const std::string& module) {
  if (module == "PIL") return "python3-pil";
  if (module == "sklearn") return "python3-sklearn";
  return "python3-" + module;
}

}  // namespace

const Ia32Fact& HostIa32() {
  static const Ia32Fact fact = ProbeIa32();
  return fact;
}

const HostFact& HostUserNamespaces() {
  static const HostFact fact = ProbeUserNamespaces();
  return fact;
}

const LandlockFact& HostLandlock() {
  static const LandlockFact fact = ProbeLandlock();
  return fact;
}

bool HostIsRoot() { return ::geteuid() == 0; }

const HostFact& HostCgroupControllers() {
  static const HostFact fact = ProbeCgroupControllers();
  return fact;
}

namespace {
HostFact ProbeGvisor() {
  HostFact f;
  if (!HostIsRoot()) {
    f.detail = "the gVisor backend needs root (runsc's rootful mode)";
    return f;
  }
  if (!HostCgroupControllers().present) {
    f.detail = "the gVisor backend needs cgroups: " + HostCgroupControllers().detail;
    return f;
  }
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::istringstream in(path);
    std::string d;
    while (std::getline(in, d, ':')) dirs.push_back(d);
  }
  dirs.insert(dirs.end(), {"/usr/bin", "/usr/sbin"});
  std::string runsc;
  for (const auto& d : dirs) {
    if (!d.empty() && d[0] == '/' && ::access((d + "/runsc").c_str(), X_OK) == 0) {
      runsc = d + "/runsc";
      break;
    }
  }
  if (runsc.empty()) {
    f.detail = "runsc (gVisor) is not installed (Debian: runsc)";
    return f;
  }
  ProcessOptions o;
  o.timeout = std::chrono::seconds(60);
  const ProcessResult r =
      RunProcess({runsc, "--network=none", "do", kHostPython, "-c", "print(6 * 7 * 1001)"}, o);
  f.present = r.exit_code == 0 && r.out == "42042\n";
  if (!f.present) {
    std::string err = r.err.substr(r.err.size() > 300 ? r.err.size() - 300 : 0);
    f.detail = runsc + " --network=none do python3 did not run (exit " +
               std::to_string(r.exit_code) + ", stdout '" + r.out.substr(0, 80) + "'): " + err;
  }
  return f;
}
}  // namespace

const HostFact& HostGvisor() {
  static const HostFact fact = ProbeGvisor();
  return fact;
}

const HostFact& HostIoThrottle() {
  static const HostFact fact = ProbeIoThrottle();
  return fact;
}

std::vector<std::string> HostCgroupMountPoints() {
  std::vector<std::string> out;
  for (const auto& m : CgroupMounts()) out.push_back(m.mount_point);
  return out;
}

std::optional<uint64_t> HostMemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return std::nullopt;
}

std::vector<std::string> MissingPythonModules(const std::vector<std::string>& modules) {
  static std::mutex mu;
  static std::map<std::string, bool> importable;
  std::vector<std::string> missing;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& m : modules) {
    auto it = importable.find(m);
    if (it == importable.end()) {
      ProcessOptions o;
      o.timeout = std::chrono::seconds(120);
      const ProcessResult r = RunProcess({kHostPython, "-I", "-c", "import " + m}, o);
      it = importable.emplace(m, r.exit_code == 0).first;
    }
    if (!it->second) missing.push_back(m);
  }
  return missing;
}

std::optional<std::string> PythonModulesMissingReason(const std::vector<std::string>& modules) {
  const std::vector<std::string> missing = MissingPythonModules(modules);
  if (missing.empty()) return std::nullopt;
  std::string names, packages;
  for (const auto& m : missing) {
    names += (names.empty() ? "" : ", ") + m;
    packages += (packages.empty() ? "" : " ") + DebianPackageOf(m);
  }
  return std::string(kHostPython) + " cannot import " + names +
         " on this host (Debian: " + packages + ", which `make deps` installs)";
}

}  // namespace kiln::testing
