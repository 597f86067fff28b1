#include "supervisor/verify.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::supervisor {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value after "Key:\t" in a /proc/PID/status text ("" if absent).
std::string StatusField(const std::string& status, const std::string& key) {
  const std::string k = "\n" + key + ":";
  size_t pos = status.find(k);
  if (pos == std::string::npos) return "";
  pos += k.size();
  const size_t end = status.find('\n', pos);
  std::string v = status.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  const size_t a = v.find_first_not_of(" \t");
  return a == std::string::npos ? "" : v.substr(a);
}

// pid 0: the checker's own.
std::string NsLink(const std::string& proc, pid_t pid, const char* ns) {
  const std::string path =
      proc + "/" + (pid > 0 ? std::to_string(pid) : std::string("self")) + "/ns/" + ns;
  char buf[64];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

Status VerifySandbox(const SandboxFacts& f) {
  const std::string uid = std::to_string(f.uid);
  const std::string gid = std::to_string(f.gid);
  static constexpr const char* kNamespaces[] = {"user", "mnt", "pid",   "net",
                                                "ipc",  "uts", "cgroup"};
  // Ours and the others', read once for both pids.
  std::vector<std::vector<std::string>> theirs;
  for (pid_t other : f.not_shared_with) {
    theirs.emplace_back();
    for (const char* ns : kNamespaces) theirs.back().push_back(NsLink(f.proc, other, ns));
  }
  std::vector<std::string> ours;
  for (const char* ns : kNamespaces) ours.push_back(NsLink(f.proc, 0, ns));
  for (pid_t pid : {f.init_pid, f.worker_pid}) {
    const std::string dir = f.proc + "/" + std::to_string(pid);
    const std::string st = "\n" + ReadSmallFile(dir + "/status");
    auto expect = [&](const char* key, const std::string& want) -> Status {
      const std::string got = StatusField(st, key);
      if (got != want) {
        return MakeError(Code::kInternal, "pid " + std::to_string(pid) + ": " + key + " is '" +
                                              got + "', not '" + want + "'");
      }
      return OkStatus();
    };
    KILN_TRY(expect("Seccomp", "2"));
    KILN_TRY(expect("NoNewPrivs", "1"));
    for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
      KILN_TRY(expect(cap, "0000000000000000"));
    }
    KILN_TRY(expect("Uid", uid + "\t" + uid + "\t" + uid + "\t" + uid));
    KILN_TRY(expect("Gid", gid + "\t" + gid + "\t" + gid + "\t" + gid));
    // Innermost pid: 1 for pid 1, 2 for the worker.
    const std::string nspid = StatusField(st, "NSpid");
    const std::string last = nspid.substr(nspid.find_last_of('\t') + 1);
    if (last != (pid == f.init_pid ? "1" : "2")) {
      return MakeError(Code::kInternal, "pid " + std::to_string(pid) + ": NSpid " + nspid);
    }
    // Its cgroup, in every hierarchy with a limit controller.
    if (f.cgroup_name) {
      std::istringstream cg(ReadSmallFile(dir + "/cgroup"));
      std::string line;
      int in_ours = 0;
      while (std::getline(cg, line)) {
        const size_t a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        const std::string ctrl = line.substr(a + 1, b - a - 1);
        const std::string path = line.substr(b + 1);
        bool limit = ctrl.empty() && f.cgroup_v2;
        std::istringstream names(ctrl);
        std::string name;
        while (std::getline(names, name, ',')) {
          if (name == "memory" || name == "pids" || name == "cpu") limit = true;
        }
        if (!limit) continue;
        const std::string want = "/" + *f.cgroup_name;
        if (path.size() < want.size() ||
            path.compare(path.size() - want.size(), want.size(), want) != 0) {
          return MakeError(Code::kInternal,
                           "pid " + std::to_string(pid) + " is not in its cgroup: " + line);
        }
        ++in_ours;
      }
      if (in_ours == 0)
        return MakeError(Code::kInternal, "no cgroup line for pid " + std::to_string(pid));
    }
    // Its own namespaces: none shared with us or with the others named.
    for (size_t i = 0; i < std::size(kNamespaces); ++i) {
      const char* ns = kNamespaces[i];
      const std::string mine = NsLink(f.proc, pid, ns);
      bool shared = mine.empty() || mine == ours[i];
      for (const auto& other : theirs) shared = shared || mine == other[i];
      if (shared) {
        return MakeError(Code::kInternal,
                         "pid " + std::to_string(pid) + " shares its " + ns + " namespace");
      }
    }
  }
  return OkStatus();
}

}  // namespace kiln::supervisor
