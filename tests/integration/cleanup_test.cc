// Integration tier: a run leaves nothing behind on the host: no cgroup
// directory (sbx-<kiln pid>-... under each controller's .../kiln parent, in
// every cgroup hierarchy mounted) and no uid-slot lock (a flock on
// /run/kiln-uid-slots/N held by kiln's pid). Each test first sees both while
// the run is live, so the "gone afterwards" checks are known to look in the
// right place.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "testlib/host_facts.h"
#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

// Every cgroup directory, in any hierarchy, that kiln process `pid` made.
std::vector<std::string> SandboxCgroups(pid_t pid) {
  const std::string prefix = "sbx-" + std::to_string(pid) + "-";
  std::vector<std::string> found;
  for (const std::string& mount : HostCgroupMountPoints()) {
    std::error_code ec;
    fs::recursive_directory_iterator it(mount, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code type_ec;
      if (!it->is_directory(type_ec) || it->is_symlink(type_ec)) continue;
      const std::string name = it->path().filename().string();
      if (name.rfind(prefix, 0) == 0) {
        found.push_back(it->path().string());
        it.disable_recursion_pending();
      }
    }
  }
  return found;
}

// /proc/locks lines of FLOCKs owned by `pid`.
std::vector<std::string> FlocksOf(pid_t pid) {
  std::ifstream in("/proc/locks");
  std::vector<std::string> held;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, kind, mode, rw, owner;
    ss >> id >> kind;
    if (kind == "->") ss >> kind;  // a waiter
    ss >> mode >> rw >> owner;
    if (kind == "FLOCK" && owner == std::to_string(pid)) held.push_back(line);
  }
  return held;
}

class Cleanup : public SandboxTest {
 protected:
  // Starts `kiln run --json ARGS -c CODE`, watches for its cgroups and lock
  // while it runs, then checks both are gone once it has exited. Each is
  // checked where kiln makes it: cgroups where it has cgroup limits, the
  // uid-slot lock as root (unprivileged, every sandbox maps to the caller's
  // own uid and takes no slot).
  void RunAndCheck(const std::string& code, const std::vector<std::string>& args,
                   const std::string& expected_status) {
    const std::optional<std::string> no_cgroup = CgroupLimitsMissingReason();
    const bool slots = HostIsRoot();
    if (no_cgroup && !slots) {
      GTEST_SKIP() << "kiln makes neither cgroups nor uid-slot locks here (not root): "
                   << *no_cgroup;
    }
    if (no_cgroup) std::cout << "[   NOTE   ] cgroups not checked: " << *no_cgroup << std::endl;
    if (!slots)
      std::cout << "[   NOTE   ] uid-slot locks not checked: not root, kiln takes none"
                << std::endl;
    std::vector<std::string> argv{KilnBin(), "run", "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("-c");
    argv.push_back(code);
    Subprocess kiln;
    ASSERT_TRUE(kiln.Start(argv));
    const pid_t pid = kiln.pid();
    // Watched for as long as kiln runs (the programs below live 1.6-2 s
    // after their sandbox is up, however long a busy host takes to get
    // there), not for a fixed window from the start.
    auto exited = [pid] {
      siginfo_t si{};
      return ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
             si.si_pid == pid;
    };
    std::vector<std::string> live_cgroups, live_locks;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline && !exited() &&
           ((!no_cgroup && live_cgroups.empty()) || (slots && live_locks.empty()))) {
      if (!no_cgroup && live_cgroups.empty()) live_cgroups = SandboxCgroups(pid);
      if (slots && live_locks.empty()) live_locks = FlocksOf(pid);
      ::usleep(10000);
    }
    const ProcessResult r = kiln.Wait();
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
    EXPECT_EQ(j.value("status", ""), expected_status) << r.out;

    if (!no_cgroup) {
      EXPECT_FALSE(live_cgroups.empty()) << "never saw sbx-" << pid << "-* while the run was live";
      EXPECT_EQ(SandboxCgroups(pid), std::vector<std::string>{}) << "cgroups left behind";
    }
    if (slots) {
      EXPECT_FALSE(live_locks.empty()) << "never saw a uid-slot flock of pid " << pid;
      EXPECT_EQ(FlocksOf(pid), std::vector<std::string>{}) << "uid-slot lock still held";
    }
  }
};

TEST_F(Cleanup, NormalRunRemovesItsCgroupsAndReleasesItsSlot) {
  RunAndCheck("import time; time.sleep(2)", {"--timeout", "20"}, "ok");
}

TEST_F(Cleanup, OomKilledRunRemovesItsCgroupsAndReleasesItsSlot) {
  KILN_REQUIRE_CGROUP_LIMITS();  // status memory_limit is an OOM kill in the sandbox's cgroup
  RunAndCheck(
      "import time\ntime.sleep(1.6)\nb = bytearray(256 << 20)\nfor i in range(0, len(b), 4096): "
      "b[i] = 1",
      {"--memory", "64m", "--timeout", "20"}, "memory_limit");
}

TEST_F(Cleanup, TimedOutRunRemovesItsCgroupsAndReleasesItsSlot) {
  RunAndCheck("import time; time.sleep(30)", {"--timeout", "2"}, "timeout");
}

}  // namespace
}  // namespace kiln::testing
