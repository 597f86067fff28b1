#include "isolation/host_probe.h"

#include <linux/sched.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sys/syscalls.h"

namespace kiln::isolation {
namespace {

std::string ReadTrimmed(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// 0 on success, else the errno of clone3 with `flags`.
int TryClone(uint64_t flags) {
  clone_args args{};
  args.flags = flags;
  args.exit_signal = SIGCHLD;
  pid_t pid = sys::Clone3(&args);
  if (pid == 0) ::_exit(0);
  if (pid < 0) return errno;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return 0;
}

}  // namespace

std::string_view ToString(LayerState s) {
  switch (s) {
    case LayerState::kAvailable: return "available";
    case LayerState::kDegraded: return "degraded";
    case LayerState::kMissing: return "missing";
  }
  return "missing";
}

std::vector<LayerReport> ProbeNamespacesAndKernel() {
  std::vector<LayerReport> out;

  {
    LayerReport r{"clone3", LayerState::kAvailable, "clone3(2) works", true};
    if (int e = TryClone(0); e != 0) {
      r.state = LayerState::kMissing;
      r.detail = std::string("clone3 failed: ") + std::strerror(e) + " (Linux >= 5.3 needed)";
    }
    out.push_back(r);
  }
  {
    LayerReport r{"pidfd", LayerState::kAvailable, "pidfd_open(2) works", true};
    int fd = sys::PidfdOpen(::getpid(), 0);
    if (fd < 0) {
      r.state = LayerState::kMissing;
      r.detail = std::string("pidfd_open failed: ") + std::strerror(errno) + " (Linux >= 5.3)";
    } else {
      ::close(fd);
    }
    out.push_back(r);
  }
  {
    LayerReport r{"user namespace", LayerState::kAvailable, "", true};
    const std::string max = ReadTrimmed("/proc/sys/user/max_user_namespaces");
    if (int e = TryClone(CLONE_NEWUSER); e != 0) {
      r.state = LayerState::kMissing;
      r.detail = std::string("clone3(CLONE_NEWUSER) failed: ") + std::strerror(e) +
                 " (user.max_user_namespaces=" + max + ")";
      const std::string unpriv = ReadTrimmed("/proc/sys/kernel/unprivileged_userns_clone");
      if (::geteuid() != 0 && unpriv == "0") r.detail += "; kernel.unprivileged_userns_clone=0";
    } else if (::geteuid() == 0) {
      r.detail = "root: each sandbox gets its own host uid from a reserved range";
    } else {
      r.state = LayerState::kDegraded;
      r.detail =
          "unprivileged: every sandbox maps to your own uid (sandboxes share a host identity)";
    }
    out.push_back(r);
  }
  const struct {
    const char* name;
    uint64_t flag;
  } kNs[] = {{"pid namespace", CLONE_NEWPID},     {"mount namespace", CLONE_NEWNS},
             {"network namespace", CLONE_NEWNET}, {"ipc namespace", CLONE_NEWIPC},
             {"uts namespace", CLONE_NEWUTS},     {"cgroup namespace", CLONE_NEWCGROUP}};
  for (const auto& ns : kNs) {
    LayerReport r{ns.name, LayerState::kAvailable, "clone3 with it works", true};
    // Inside a new user namespace, as the sandbox makes it.
    if (int e = TryClone(CLONE_NEWUSER | ns.flag); e != 0) {
      r.state = LayerState::kMissing;
      r.detail = std::string("clone3 failed: ") + std::strerror(e);
    }
    out.push_back(r);
  }
  {
    LayerReport r{"seccomp", LayerState::kAvailable, "", true};
    const std::string actions = ReadTrimmed("/proc/sys/kernel/seccomp/actions_avail");
    if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
      r.state = LayerState::kMissing;
      r.detail = std::string("prctl(PR_GET_SECCOMP): ") + std::strerror(errno);
    } else if (actions.find("kill_process") == std::string::npos ||
               actions.find("errno") == std::string::npos) {
      r.state = LayerState::kMissing;
      r.detail = "the kernel lacks the kill_process or errno action (actions: " + actions + ")";
    } else {
      r.detail = "filter mode; actions: " + actions;
    }
    out.push_back(r);
  }
  {
    LayerReport r{"no_new_privs", LayerState::kAvailable, "PR_SET_NO_NEW_PRIVS (Linux >= 3.5)",
                  true};
    out.push_back(r);
  }
  {
    LayerReport r{"landlock", LayerState::kAvailable, "", true};
    const int abi = sys::LandlockAbiVersion();
    if (abi < 0) {
      r.state = LayerState::kMissing;
      r.detail = errno == EOPNOTSUPP
                     ? "built but disabled (add landlock to the lsm= boot parameter)"
                     : std::string("not supported: ") + std::strerror(errno);
    } else {
      r.detail = "ABI " + std::to_string(abi);
      if (abi < 4)
        r.detail += "; TCP restriction needs ABI 4 (network namespace and seccomp still apply)";
      if (abi < 6) {
        r.state = LayerState::kDegraded;
        r.detail +=
            "; signal and abstract-socket scoping need ABI 6 (the pid namespace still isolates "
            "signals)";
      } else {
        r.detail += ": filesystem writes, TCP, signals and abstract unix sockets restricted";
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace kiln::isolation
