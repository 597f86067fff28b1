#include "supervisor/verify.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace kiln::supervisor {
namespace {

namespace fs = std::filesystem;

// A fake procfs: "self" (the checker), 100 (pid 1), 101 (the worker), 50 (a
// zygote). Namespace links are symlinks whose targets read as the kernel's.
class FakeProc {
 public:
  FakeProc() {
    root_ = fs::temp_directory_path() /
            ("kiln-verify-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(root_);
    Ns("self", "4000");
    Ns("50", "5000");
    Ns("100", "6000");
    Ns("101", "6000");
    Status("100", Good("1000", "3100\t1"));
    Status("101", Good("1000", "3101\t2"));
    Cgroup("100", "0::/kiln/sbx-1\n");
    Cgroup("101", "0::/kiln/sbx-1\n");
  }
  ~FakeProc() { fs::remove_all(root_); }

  static std::string Good(const std::string& id, const std::string& nspid) {
    const std::string ids = id + "\t" + id + "\t" + id + "\t" + id;
    return "Name:\tpython3\nUid:\t" + ids + "\nGid:\t" + ids + "\nNSpid:\t" + nspid +
           "\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
           "CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n";
  }
  void Status(const std::string& pid, const std::string& text) { Write(pid + "/status", text); }
  void Cgroup(const std::string& pid, const std::string& text) { Write(pid + "/cgroup", text); }
  // Every namespace of `pid` gets inode `base` + its index.
  void Ns(const std::string& pid, const std::string& base) {
    fs::create_directories(root_ / pid / "ns");
    int i = 0;
    for (const char* ns : {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}) {
      SetNs(pid, ns, std::string(ns) + ":[" + base + std::to_string(i++) + "]");
    }
  }
  void SetNs(const std::string& pid, const char* ns, const std::string& target) {
    const fs::path link = root_ / pid / "ns" / ns;
    fs::remove(link);
    if (!target.empty()) fs::create_symlink(target, link);
  }
  SandboxFacts Facts() const {
    SandboxFacts f;
    f.init_pid = 100;
    f.worker_pid = 101;
    f.uid = f.gid = 1000;
    f.cgroup_name = "sbx-1";
    f.cgroup_v2 = true;
    f.not_shared_with = {50};
    f.proc = root_.string();
    return f;
  }

 private:
  void Write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  static inline int counter_ = 0;
  fs::path root_;
};

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  s.replace(s.find(from), from.size(), to);
  return s;
}

struct Row {
  const char* name;
  std::function<void(FakeProc&, SandboxFacts&)> change;
  const char* error;  // nullptr: passes; else a substring of the message
};

TEST(VerifySandbox, Table) {
  const std::string good1 = FakeProc::Good("1000", "3100\t1");
  const std::string good2 = FakeProc::Good("1000", "3101\t2");
  const std::vector<Row> rows = {
      {"every layer", [](FakeProc&, SandboxFacts&) {}, nullptr},
      {"no seccomp filter",
       [&](FakeProc& p, SandboxFacts&) {
         p.Status("101", Replace(good2, "Seccomp:\t2", "Seccomp:\t0"));
       },
       "pid 101: Seccomp is '0', not '2'"},
      {"no no_new_privs",
       [&](FakeProc& p, SandboxFacts&) {
         p.Status("100", Replace(good1, "NoNewPrivs:\t1", "NoNewPrivs:\t0"));
       },
       "pid 100: NoNewPrivs is '0'"},
      {"a capability left",
       [&](FakeProc& p, SandboxFacts&) {
         p.Status("100", Replace(good1, "CapBnd:\t0000000000000000", "CapBnd:\t00000000000000c0"));
       },
       "pid 100: CapBnd"},
      {"ambient capabilities",
       [&](FakeProc& p, SandboxFacts&) {
         p.Status("101", Replace(good2, "CapAmb:\t0000000000000000", "CapAmb:\t0000000000000040"));
       },
       "pid 101: CapAmb"},
      {"another uid", [](FakeProc&, SandboxFacts& f) { f.uid = 1001; }, "pid 100: Uid is"},
      {"another gid", [](FakeProc&, SandboxFacts& f) { f.gid = 1001; }, "pid 100: Gid is"},
      {"a saved uid of root",
       [&](FakeProc& p, SandboxFacts&) {
         p.Status("101", Replace(good2, "Uid:\t1000\t1000\t1000", "Uid:\t1000\t1000\t0"));
       },
       "pid 101: Uid"},
      {"not pid 1 of its namespace",
       [&](FakeProc& p, SandboxFacts&) { p.Status("100", Replace(good1, "3100\t1", "3100\t7")); },
       "pid 100: NSpid"},
      {"in the checker's pid namespace",
       [&](FakeProc& p, SandboxFacts&) { p.Status("101", Replace(good2, "3101\t2", "3101")); },
       "pid 101: NSpid"},
      {"no status at all", [](FakeProc& p, SandboxFacts&) { p.Status("100", ""); },
       "pid 100: Seccomp is ''"},
      {"another cgroup", [](FakeProc& p, SandboxFacts&) { p.Cgroup("101", "0::/kiln/sbx-2\n"); },
       "pid 101 is not in its cgroup: 0::/kiln/sbx-2"},
      {"a cgroup whose name only ends like it",
       [](FakeProc& p, SandboxFacts&) { p.Cgroup("100", "0::/kiln/xsbx-1\n"); },
       "pid 100 is not in its cgroup"},
      {"v1: memory elsewhere",
       [](FakeProc& p, SandboxFacts& f) {
         f.cgroup_v2 = false;
         p.Cgroup("100", "5:pids:/kiln/sbx-1\n4:memory:/kiln\n3:cpu,cpuacct:/kiln/sbx-1\n");
       },
       "pid 100 is not in its cgroup: 4:memory:/kiln"},
      {"v1: every limit hierarchy, others ignored",
       [](FakeProc& p, SandboxFacts& f) {
         f.cgroup_v2 = false;
         const char* v1 =
             "6:devices:/\n5:pids:/kiln/sbx-1\n4:memory:/kiln/sbx-1\n3:cpu,cpuacct:/kiln/sbx-1\n"
             "1:name=systemd:/\n0::/\n";
         p.Cgroup("100", v1);
         p.Cgroup("101", v1);
       },
       nullptr},
      {"no limit hierarchy at all",
       [](FakeProc& p, SandboxFacts& f) {
         f.cgroup_v2 = false;
         p.Cgroup("100", "0::/kiln/sbx-1\n");
       },
       "no cgroup line for pid 100"},
      {"no cgroup expected (rlimits)",
       [](FakeProc& p, SandboxFacts& f) {
         f.cgroup_name.reset();
         p.Cgroup("100", "0::/\n");
         p.Cgroup("101", "0::/\n");
       },
       nullptr},
      {"shares the checker's net namespace",
       [](FakeProc& p, SandboxFacts&) { p.SetNs("101", "net", "net:[40003]"); },
       "pid 101 shares its net namespace"},
      {"shares the zygote's user namespace",
       [](FakeProc& p, SandboxFacts&) { p.SetNs("100", "user", "user:[50000]"); },
       "pid 100 shares its user namespace"},
      {"an unreadable namespace", [](FakeProc& p, SandboxFacts&) { p.SetNs("100", "ipc", ""); },
       "pid 100 shares its ipc namespace"},
      {"no zygote to compare with",
       [](FakeProc& p, SandboxFacts& f) {
         f.not_shared_with.clear();
         p.SetNs("100", "user", "user:[50000]");
       },
       nullptr},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    FakeProc proc;
    SandboxFacts facts = proc.Facts();
    row.change(proc, facts);
    const Status got = VerifySandbox(facts);
    if (row.error == nullptr) {
      EXPECT_TRUE(got.ok()) << got.error().ToString();
    } else {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.error().code, Code::kInternal);
      EXPECT_NE(got.error().message.find(row.error), std::string::npos) << got.error().message;
    }
  }
}

}  // namespace
}  // namespace kiln::supervisor
