#include "supervisor/gvisor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "isolation/mount_ns.h"

namespace kiln::supervisor {
namespace {

GvisorSpecInputs Inputs() {
  GvisorSpecInputs in;
  in.argv = {"/usr/bin/python3", "-I"};
  in.env = {"PATH=/usr/bin"};
  in.root = "/tmp";
  in.workspace = "/tmp/workspace";
  in.tmp = "/tmp/tmp";
  in.shm = "/tmp/dev/shm";
  in.file_size = 1 << 20;
  in.cpu_seconds = 2.5;
  in.tasks = 64;
  return in;
}

TEST(GvisorSpec, TheRootIsReadOnlyAndOnlyTheThreeTmpfsAreWritable) {
  const nlohmann::json spec = GvisorSpec(Inputs());
  EXPECT_EQ(spec["root"]["path"], "/tmp");
  EXPECT_EQ(spec["root"]["readonly"], true);
  std::map<std::string, std::string> writable;  // destination -> source
  for (const auto& m : spec["mounts"]) {
    if (m["type"] == "proc") continue;
    ASSERT_EQ(m["type"], "bind") << m.dump();
    const auto& opts = m["options"];
    EXPECT_NE(std::find(opts.begin(), opts.end(), "nosuid"), opts.end()) << m.dump();
    EXPECT_NE(std::find(opts.begin(), opts.end(), "noexec"), opts.end()) << m.dump();
    if (std::find(opts.begin(), opts.end(), "rw") != opts.end())
      writable[m["destination"].get<std::string>()] = m["source"].get<std::string>();
  }
  // The workspace, /tmp and /dev/shm; E2B's home directory is the workspace again.
  EXPECT_EQ(writable.size(), 4u);
  EXPECT_EQ(writable.count("/tmp"), 1u);
  EXPECT_EQ(writable.count("/dev/shm"), 1u);
  ASSERT_EQ(writable.count("/workspace"), 1u);
  EXPECT_EQ(writable[isolation::kE2bHomePath], writable["/workspace"]);
}

TEST(GvisorSpec, NoCapabilitiesNoNewPrivilegesAndTheLimits) {
  const nlohmann::json spec = GvisorSpec(Inputs());
  const auto& proc = spec["process"];
  EXPECT_EQ(proc["noNewPrivileges"], true);
  for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"})
    EXPECT_TRUE(proc["capabilities"][set].empty()) << set;
  EXPECT_EQ(proc["user"]["uid"], 1000);
  EXPECT_EQ(proc["cwd"], "/workspace");
  bool cpu = false, fsize = false, nproc = false;
  for (const auto& r : proc["rlimits"]) {
    // The Sentry's own count of the program's tasks (the pids limit inside).
    if (r["type"] == "RLIMIT_NPROC") nproc = r["soft"] == 64 && r["hard"] == 64;
    if (r["type"] == "RLIMIT_CPU") cpu = r["soft"] == 3 && r["hard"] == 4;
    if (r["type"] == "RLIMIT_FSIZE") fsize = r["soft"] == (1 << 20);
  }
  EXPECT_TRUE(cpu);
  EXPECT_TRUE(fsize);
  EXPECT_TRUE(nproc);
}

TEST(GvisorSpec, NewNamespacesWithNoPathSoNothingOfTheHostsIsJoined) {
  const nlohmann::json spec = GvisorSpec(Inputs());
  bool network = false;
  for (const auto& ns : spec["linux"]["namespaces"]) {
    EXPECT_FALSE(ns.contains("path")) << ns.dump();
    if (ns["type"] == "network") network = true;
  }
  EXPECT_TRUE(network);
}

}  // namespace
}  // namespace kiln::supervisor
