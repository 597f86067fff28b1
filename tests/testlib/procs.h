// The host's processes as /proc shows them, for tests that look at kiln's
// process tree from outside (which process is whose child, what it holds).
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "testlib/kiln_runner.h"

namespace kiln::testing {

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  std::string comm;
};

// Every process now (those that vanish while being read are left out).
inline std::vector<ProcInfo> AllProcs() {
  std::vector<ProcInfo> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    auto stat = ReadFile("/proc/" + pid + "/stat");
    if (!stat) continue;
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
    const size_t lp = stat->find('('), rp = stat->rfind(')');
    if (lp == std::string::npos || rp == std::string::npos || rp + 2 >= stat->size()) continue;
    ProcInfo p;
    std::istringstream rest(stat->substr(rp + 2));
    rest >> p.state >> p.ppid;
    p.pid = static_cast<pid_t>(std::atoi(pid.c_str()));
    p.comm = stat->substr(lp + 1, rp - lp - 1);
    out.push_back(std::move(p));
  }
  return out;
}

// The live (not zombie) children of `parent`; with `comm`, only those named so.
inline std::vector<ProcInfo> ChildProcs(pid_t parent, const std::string& comm = "") {
  std::vector<ProcInfo> out;
  for (auto& p : AllProcs()) {
    if (p.ppid == parent && p.state != 'Z' && (comm.empty() || p.comm == comm))
      out.push_back(std::move(p));
  }
  return out;
}

// Every process below `root`, not itself.
inline std::vector<ProcInfo> DescendantProcs(pid_t root) {
  const auto all = AllProcs();
  std::vector<ProcInfo> out;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    const pid_t p = frontier.back();
    frontier.pop_back();
    for (const auto& q : all) {
      if (q.ppid == p) {
        out.push_back(q);
        frontier.push_back(q.pid);
      }
    }
  }
  return out;
}

}  // namespace kiln::testing
