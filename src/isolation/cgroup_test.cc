// Unit tests for isolation/cgroup: both implementations run against a fake
// cgroup tree in a temporary directory (FakeCgroupFs), so they need no
// privileges. One test, CgroupReal.V1CreateAttachUsageRemove, runs on the real
// host when it is root and has cgroup v1 memory+pids+cpu, and skips otherwise.
#include "isolation/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::isolation {
namespace {

namespace fs = std::filesystem;

// Larger than PID_MAX_LIMIT (4M), so kill() on it is always ESRCH: tests that
// only need "some pid" in a fake cgroup.procs can never signal a real process.
constexpr pid_t kNoSuchPid = 1 << 30;

// gmock's HasSubstr without linking gmock.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::trunc);
  out << content;
}

std::string Sorted(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

std::set<std::string> Tokens(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string t;
  while (in >> t) out.insert(t);
  return out;
}

// A cgroup tree in a temporary directory that behaves like cgroupfs where the
// code under test depends on it: new directories come with their control
// files, writes never create files, rmdir removes the control files, and
// cgroup.procs, cgroup.subtree_control and cgroup.kill have their kernel
// semantics (migration, the no-internal-process rule, killing).
class FakeCgroupFs : public CgroupFs {
 public:
  void AddV2Hierarchy(const std::string& mount, const std::string& controllers) {
    hierarchies_[mount] = Hierarchy{true, {}};
    fs::create_directories(mount);
    PopulateV2(mount, controllers);
  }
  void AddV1Hierarchy(const std::string& mount, std::vector<std::string> controllers) {
    hierarchies_[mount] = Hierarchy{false, controllers};
    fs::create_directories(mount);
    PopulateV1(mount, controllers);
  }

  Status MakeDir(const std::string& path) override {
    KILN_TRY(CgroupFs::MakeDir(path));
    const auto* h = Find(path);
    if (h == nullptr) return OkStatus();
    if (h->second.v2) {
      // A child gets what its parent enabled in cgroup.subtree_control.
      PopulateV2(path, ReadText(fs::path(path).parent_path().string() + "/cgroup.subtree_control"));
    } else {
      PopulateV1(path, h->second.controllers);
    }
    return OkStatus();
  }

  Status RemoveDir(const std::string& path) override {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return ErrnoError("rmdir " + path, ENOENT);
    for (const auto& child : fs::directory_iterator(path)) {
      if (child.is_directory()) return ErrnoError("rmdir " + path, EBUSY);
    }
    for (const auto& child : fs::directory_iterator(path)) fs::remove(child.path());
    return CgroupFs::RemoveDir(path);
  }

  Status WriteFile(const std::string& path, std::string_view content) override {
    if (auto it = fail_writes.find(path); it != fail_writes.end()) {
      return ErrnoError("write \"" + std::string(content) + "\" to " + path, it->second);
    }
    if (!fs::is_regular_file(path)) return ErrnoError("open " + path + " for writing", ENOENT);
    std::string dir = fs::path(path).parent_path().string();
    std::string name = fs::path(path).filename().string();
    const auto* h = Find(path);
    std::string value(content);
    if (h != nullptr && name == "cgroup.procs") {
      for (const auto& entry : fs::recursive_directory_iterator(h->first)) {
        if (entry.path().filename() != "cgroup.procs") continue;
        std::set<std::string> pids = Tokens(ReadText(entry.path().string()));
        if (pids.erase(value) > 0) WriteText(entry.path().string(), Lines(pids));
      }
      std::set<std::string> pids = Tokens(ReadText(path));
      pids.insert(value);
      value = Lines(pids);
    } else if (h != nullptr && h->second.v2 && name == "cgroup.subtree_control") {
      std::set<std::string> available = Tokens(ReadText(dir + "/cgroup.controllers"));
      std::set<std::string> enabled = Tokens(ReadText(path));
      for (const std::string& tok : Tokens(value)) {
        std::string c = tok.substr(1);
        if (tok[0] == '-') {
          enabled.erase(c);
          continue;
        }
        if (available.count(c) == 0) return ErrnoError("write to " + path, ENOENT);
        if (dir != h->first && !Tokens(ReadText(dir + "/cgroup.procs")).empty()) {
          return ErrnoError("write to " + path, EBUSY);
        }
        enabled.insert(c);
      }
      value = Sorted(enabled);
    } else if (h != nullptr && !h->second.v2 && name == "memory.max_usage_in_bytes") {
      // v1: writing 0 resets the high-water mark to the usage now.
      if (value != "0") return ErrnoError("write to " + path, EINVAL);
      value = ReadText(dir + "/memory.usage_in_bytes");
    } else if (h != nullptr && h->second.v2 && name == "cgroup.kill" && value == "1") {
      for (const std::string& pid : Tokens(ReadText(dir + "/cgroup.procs"))) {
        ::kill(std::stoi(pid), SIGKILL);
      }
    }
    WriteText(path, value);
    writes.emplace_back(path, std::string(content));
    return OkStatus();
  }

  // v2 memory.peak (6.12+): a reset is per open file; reads through that fd
  // start from memory.current. Emulated with a memfd holding that value
  // (tests write to it through ReadAt's fd to play the cell's allocations).
  // `peak_read_only`: a kernel before 6.12 (the file is 0444).
  Result<UniqueFd> OpenAndResetPeak(const std::string& path) override {
    if (peak_read_only) return ErrnoError("open " + path + " for writing", EACCES);
    if (!fs::is_regular_file(path)) return ErrnoError("open " + path, ENOENT);
    UniqueFd fd(::memfd_create("memory.peak", MFD_CLOEXEC));
    if (!fd) return ErrnoError("memfd_create");
    const std::string now = ReadText(fs::path(path).parent_path().string() + "/memory.current");
    if (::pwrite(fd.get(), now.data(), now.size(), 0) != static_cast<ssize_t>(now.size())) {
      return ErrnoError("pwrite");
    }
    last_peak_fd = fd.get();
    return fd;
  }
  bool peak_read_only = false;
  int last_peak_fd = -1;

  bool Wrote(const std::string& path) const {
    for (const auto& [p, v] : writes) {
      if (p == path) return true;
    }
    return false;
  }

  // Control files new directories do not get (a kernel without the feature).
  std::set<std::string> omit;
  // path -> errno that WriteFile fails with.
  std::map<std::string, int> fail_writes;
  // Successful writes in order: (path, content).
  std::vector<std::pair<std::string, std::string>> writes;

 private:
  struct Hierarchy {
    bool v2;
    std::vector<std::string> controllers;
  };

  static std::string Lines(const std::set<std::string>& items) {
    std::string out;
    for (const auto& i : items) out += i + "\n";
    return out;
  }

  const std::pair<const std::string, Hierarchy>* Find(const std::string& path) const {
    for (const auto& entry : hierarchies_) {
      const std::string& mount = entry.first;
      if (path.compare(0, mount.size(), mount) == 0 &&
          (path.size() == mount.size() || path[mount.size()] == '/')) {
        return &entry;
      }
    }
    return nullptr;
  }

  void Put(const std::string& dir, const std::string& name, const std::string& value) {
    if (omit.count(name) == 0) WriteText(dir + "/" + name, value);
  }

  void PopulateV2(const std::string& dir, const std::string& controllers) {
    Put(dir, "cgroup.procs", "");
    Put(dir, "cgroup.controllers", Sorted(Tokens(controllers)));
    Put(dir, "cgroup.subtree_control", "");
    Put(dir, "cgroup.kill", "");
    Put(dir, "cgroup.freeze", "0");
    Put(dir, "memory.max", "max");
    Put(dir, "memory.swap.max", "max");
    Put(dir, "memory.peak", "0");
    Put(dir, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n");
    Put(dir, "memory.oom.group", "0");
    Put(dir, "pids.max", "max");
    Put(dir, "cpu.max", "max 100000");
    Put(dir, "cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n");
    // Like the kernel: io.max only where the io controller is enabled.
    if (Tokens(controllers).count("io") != 0) Put(dir, "io.max", "");
  }

  void PopulateV1(const std::string& dir, const std::vector<std::string>& controllers) {
    Put(dir, "cgroup.procs", "");
    Put(dir, "tasks", "");
    Put(dir, "notify_on_release", "0");
    for (const auto& c : controllers) {
      if (c == "memory") {
        Put(dir, "memory.limit_in_bytes", "9223372036854771712");
        Put(dir, "memory.memsw.limit_in_bytes", "9223372036854771712");
        Put(dir, "memory.swappiness", "60");
        Put(dir, "memory.max_usage_in_bytes", "0");
        Put(dir, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
      } else if (c == "pids") {
        Put(dir, "pids.max", "max");
      } else if (c == "cpu") {
        Put(dir, "cpu.cfs_period_us", "100000");
        Put(dir, "cpu.cfs_quota_us", "-1");
        Put(dir, "cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n");
      } else if (c == "cpuacct") {
        Put(dir, "cpuacct.usage", "0");
      } else if (c == "freezer") {
        Put(dir, "freezer.state", "THAWED");
      } else if (c == "blkio") {
        for (const char* f :
             {"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
              "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"}) {
          Put(dir, f, "");
        }
      }
    }
  }

  std::map<std::string, Hierarchy> hierarchies_;
};

// A child that sleeps until killed; killed and reaped on destruction if the
// test did not.
class SleepingChild {
 public:
  SleepingChild() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (;;) ::pause();
    }
  }
  ~SleepingChild() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Waits for the child; returns the signal that killed it, or -1.
  int WaitSignal() {
    int status = 0;
    if (::waitpid(pid_, &status, 0) != pid_) return -1;
    reaped_ = true;
    return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

class FakeTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-cgroup-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs_ = std::make_shared<FakeCgroupFs>();
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string P(const std::string& rel) const { return root_ + "/" + rel; }

  // cgroup v2 at <root>/unified offering every controller; sandboxes in /kiln.
  std::unique_ptr<CgroupManager> V2Manager() {
    fs_->AddV2Hierarchy(P("unified"), "cpuset cpu io memory hugetlb pids");
    return CgroupManager::ForV2(P("unified"), "/kiln", fs_);
  }

  // The development host: cpu and cpuacct in separate hierarchies; blkio too
  // when `blkio`.
  std::unique_ptr<CgroupManager> V1Manager(bool blkio = false) {
    std::vector<std::pair<std::string, std::string>> parents;
    std::vector<const char*> controllers = {"memory", "pids", "cpu", "cpuacct", "freezer"};
    if (blkio) controllers.push_back("blkio");
    for (const char* c : controllers) {
      fs_->AddV1Hierarchy(P(c), {c});
      parents.emplace_back(c, P(std::string(c) + "/kiln"));
    }
    return CgroupManager::ForV1(parents, fs_);
  }

  std::string root_;
  std::shared_ptr<FakeCgroupFs> fs_;
};

CgroupLimits TypicalLimits() {
  CgroupLimits limits;
  limits.memory_bytes = 512ull << 20;
  limits.pids = 64;
  limits.cpus = 1.5;
  return limits;
}

// ---------------------------------------------------------------------------
// cgroup v2

class CgroupV2 : public FakeTreeTest {};

TEST_F(CgroupV2, CreateWritesLimits) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  std::string dir = P("unified/kiln/sbx");
  EXPECT_EQ(ReadText(dir + "/memory.max"), "536870912");
  EXPECT_EQ(ReadText(dir + "/memory.swap.max"), "0");
  EXPECT_EQ(ReadText(dir + "/pids.max"), "64");
  EXPECT_EQ(ReadText(dir + "/cpu.max"), "150000 100000");
  EXPECT_EQ(ReadText(dir + "/memory.oom.group"), "1");
  EXPECT_EQ((*cg)->Describe(), "v2:" + dir + " (memory,pids,cpu)");
}

TEST_F(CgroupV2, EnablesControllersOnTheWayToTheParent) {
  fs_->AddV2Hierarchy(P("unified"), "cpu io memory pids");
  auto manager = CgroupManager::ForV2(P("unified"), "/a/kiln", fs_);
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  // io (best effort) rides along where the hierarchy offers it.
  EXPECT_EQ(ReadText(P("unified/cgroup.subtree_control")), "cpu io memory pids");
  EXPECT_EQ(ReadText(P("unified/a/cgroup.subtree_control")), "cpu io memory pids");
  EXPECT_EQ(ReadText(P("unified/a/kiln/cgroup.subtree_control")), "cpu io memory pids");
  EXPECT_EQ(ReadText(P("unified/a/kiln/sbx/cgroup.controllers")), "cpu io memory pids");
  EXPECT_TRUE(manager->io_support().available) << manager->io_support().why;
  // The parent is prepared once, not per sandbox.
  size_t writes = fs_->writes.size();
  auto second = manager->Create("sbx2", CgroupLimits{});
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  for (size_t i = writes; i < fs_->writes.size(); ++i) {
    EXPECT_EQ(fs_->writes[i].first.find("subtree_control"), std::string::npos)
        << fs_->writes[i].first;
  }
}

TEST_F(CgroupV2, ParentSetupFailsWhenNothingDelegatesTheControllers) {
  fs_->AddV2Hierarchy(P("unified"), "hugetlb");
  auto manager = CgroupManager::ForV2(P("unified"), "/kiln", fs_);
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.error().code, Code::kFailedPrecondition);
  EXPECT_EQ(cg.error().step, SetupStep::kCgroupCreate);
}

TEST_F(CgroupV2, UnlimitedLeavesDefaults) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  std::string dir = P("unified/kiln/sbx");
  EXPECT_EQ(ReadText(dir + "/memory.max"), "max");
  EXPECT_EQ(ReadText(dir + "/pids.max"), "max");
  EXPECT_EQ(ReadText(dir + "/cpu.max"), "max 100000");
  EXPECT_FALSE(fs_->Wrote(dir + "/memory.max"));
  EXPECT_FALSE(fs_->Wrote(dir + "/pids.max"));
  EXPECT_FALSE(fs_->Wrote(dir + "/cpu.max"));
  // Swap is off whatever the limits.
  EXPECT_EQ(ReadText(dir + "/memory.swap.max"), "0");
}

TEST_F(CgroupV2, NoSwapAccountingSkipsSwapMax) {
  fs_->omit.insert("memory.swap.max");
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_FALSE(fs::exists(P("unified/kiln/sbx/memory.swap.max")));
  EXPECT_EQ(ReadText(P("unified/kiln/sbx/memory.max")), "536870912");
}

TEST_F(CgroupV2, UsageParsesStatFiles) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  std::string dir = P("unified/kiln/sbx");
  WriteText(dir + "/cpu.stat",
            "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 3\n");
  WriteText(dir + "/memory.peak", "73400320\n");
  WriteText(dir + "/memory.current", "1048576\n");
  WriteText(dir + "/memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n");
  WriteText(dir + "/pids.events", "max 17\n");
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_TRUE(usage->has_cpu);
  EXPECT_EQ(usage->cpu_usec, 1234567u);
  EXPECT_TRUE(usage->has_memory_peak);
  EXPECT_EQ(usage->memory_peak, 73400320u);
  EXPECT_TRUE(usage->has_memory_current);
  EXPECT_EQ(usage->memory_current, 1048576u);
  EXPECT_EQ(usage->oom_kills, 1u);
  EXPECT_EQ(usage->pids_max_hits, 17u);  // forks refused at pids.max
}

// Sessions report each cell's peak: reset through a descriptor kept open,
// read through it after (the kernel keeps a peak per open file).
TEST_F(CgroupV2, ResetMemoryPeakReadsThroughTheResettingDescriptor) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  const std::string dir = P("unified/kiln/sbx");
  WriteText(dir + "/memory.peak", "900000000\n");  // the session's first cell
  WriteText(dir + "/memory.current", "50000000\n");
  ASSERT_TRUE((*cg)->ResetMemoryPeak());
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_EQ(usage->memory_peak, 50000000u);  // not the file's lifetime value
  // The cell allocates: the kernel raises the fd's peak.
  const std::string grown = "70000000\n";
  ASSERT_EQ(::pwrite(fs_->last_peak_fd, grown.data(), grown.size(), 0),
            static_cast<ssize_t>(grown.size()));
  usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->memory_peak, 70000000u);
  EXPECT_TRUE((*cg)->Remove().ok());
}

TEST_F(CgroupV2, ResetMemoryPeakBefore612KeepsTheLifetimePeak) {
  fs_->peak_read_only = true;
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  WriteText(P("unified/kiln/sbx/memory.peak"), "900000000\n");
  EXPECT_FALSE((*cg)->ResetMemoryPeak());
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->memory_peak, 900000000u);
}

TEST_F(CgroupV2, UsageWithoutMemoryPeak) {
  fs_->omit.insert("memory.peak");  // before 5.19
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  WriteText(P("unified/kiln/sbx/cpu.stat"), "usage_usec 42\n");
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_FALSE(usage->has_memory_peak);
  EXPECT_EQ(usage->memory_peak, 0u);
  EXPECT_EQ(usage->cpu_usec, 42u);
  EXPECT_EQ(usage->oom_kills, 0u);
}

TEST_F(CgroupV2, KillAllWritesCgroupKill) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  ASSERT_TRUE((*cg)->KillAll().ok());
  EXPECT_EQ(ReadText(P("unified/kiln/sbx/cgroup.kill")), "1");
  EXPECT_FALSE(fs_->Wrote(P("unified/kiln/sbx/cgroup.freeze")));
}

TEST_F(CgroupV2, KillAllWithoutCgroupKillFreezesKillsAndThaws) {
  fs_->omit.insert("cgroup.kill");  // before 5.14
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  SleepingChild child;
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE((*cg)->Attach(child.pid()).ok());
  ASSERT_TRUE((*cg)->KillAll().ok());
  EXPECT_EQ(child.WaitSignal(), SIGKILL);
  std::string freeze = P("unified/kiln/sbx/cgroup.freeze");
  std::vector<std::string> freeze_writes;
  for (const auto& [path, value] : fs_->writes) {
    if (path == freeze) freeze_writes.push_back(value);
  }
  EXPECT_EQ(freeze_writes, (std::vector<std::string>{"1", "0"}));
}

TEST_F(CgroupV2, RemoveDeletesDirectory) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  ASSERT_TRUE(fs::is_directory(P("unified/kiln/sbx")));
  ASSERT_TRUE((*cg)->Remove().ok());
  EXPECT_FALSE(fs::exists(P("unified/kiln/sbx")));
  EXPECT_TRUE(fs::is_directory(P("unified/kiln")));
  EXPECT_TRUE((*cg)->Remove().ok());
  EXPECT_TRUE((*cg)->KillAll().ok());
  EXPECT_FALSE((*cg)->Attach(kNoSuchPid).ok());
}

TEST_F(CgroupV2, WriteToMissingControlFileNamesIt) {
  fs_->omit.insert("pids.max");
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_FALSE(cg.ok());
  EXPECT_TRUE(Contains(cg.error().message, P("unified/kiln/sbx/pids.max")));
  EXPECT_EQ(cg.error().sys_errno, ENOENT);
  EXPECT_EQ(cg.error().step, SetupStep::kCgroupCreate);
  EXPECT_FALSE(fs::exists(P("unified/kiln/sbx")));  // the partial cgroup is gone
}

TEST_F(CgroupV2, CloneIntoFdIsTheDirectory) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  int fd = (*cg)->clone_into_fd();
  ASSERT_GE(fd, 0);
  struct stat by_fd {
  }, by_path{};
  ASSERT_EQ(::fstat(fd, &by_fd), 0);
  ASSERT_EQ(::stat(P("unified/kiln/sbx").c_str(), &by_path), 0);
  EXPECT_EQ(by_fd.st_ino, by_path.st_ino);
  EXPECT_TRUE(S_ISDIR(by_fd.st_mode));
}

TEST_F(CgroupV2, RejectsBadNamesAndCpuLimits) {
  auto manager = V2Manager();
  for (const char* name : {"", ".", "..", "a/b", "../escape"}) {
    auto cg = manager->Create(name, CgroupLimits{});
    ASSERT_FALSE(cg.ok()) << name;
    EXPECT_EQ(cg.error().code, Code::kInvalidArgument) << name;
  }
  for (double cpus : {-1.0, 0.001}) {
    CgroupLimits limits;
    limits.cpus = cpus;
    auto cg = manager->Create("sbx", limits);
    ASSERT_FALSE(cg.ok()) << cpus;
    EXPECT_EQ(cg.error().code, Code::kInvalidArgument) << cpus;
  }
  EXPECT_FALSE(fs::exists(P("unified/kiln/sbx")));
}

TEST_F(CgroupV2, ExistingNameIsAnError) {
  auto manager = V2Manager();
  auto first = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  auto second = manager->Create("sbx", CgroupLimits{});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().sys_errno, EEXIST);
  EXPECT_TRUE(fs::is_directory(P("unified/kiln/sbx")));  // the first one is untouched
}

// ---------------------------------------------------------------------------
// cgroup v1

// ---------------------------------------------------------------------------
// I/O limits (best effort in both modes)

CgroupLimits IoLimitsOn(std::vector<BlockDevice> devices) {
  CgroupLimits limits = TypicalLimits();
  limits.io = {100ull << 20, 50ull << 20, 1000, 500};
  limits.io_devices = std::move(devices);
  return limits;
}

const BlockDevice kVda{254, 0, "vda"};
const BlockDevice kSda{8, 0, "sda"};

// The writes to one control file, in order.
std::vector<std::string> WritesTo(const FakeCgroupFs& fs, const std::string& path) {
  std::vector<std::string> out;
  for (const auto& [p, v] : fs.writes) {
    if (p == path) out.push_back(v);
  }
  return out;
}

TEST_F(CgroupV2, WritesOneIoMaxLinePerDevice) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", IoLimitsOn({kVda, kSda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(P("unified/kiln/cgroup.subtree_control")), "cpu io memory pids");
  EXPECT_EQ(WritesTo(*fs_, P("unified/kiln/sbx/io.max")),
            (std::vector<std::string>{"254:0 rbps=104857600 wbps=52428800 riops=1000 wiops=500",
                                      "8:0 rbps=104857600 wbps=52428800 riops=1000 wiops=500"}));
  EXPECT_EQ((*cg)->io_note(), "io limits on 254:0 (vda), 8:0 (sda)");
  EXPECT_TRUE(manager->io_support().available);
}

TEST_F(CgroupV2, AnUnsetIoLimitIsMax) {
  auto manager = V2Manager();
  CgroupLimits limits;
  limits.io.read_bps = 4ull << 20;
  limits.io_devices = {kVda};
  auto cg = manager->Create("sbx", limits);
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(P("unified/kiln/sbx/io.max")),
            "254:0 rbps=4194304 wbps=max riops=max wiops=max");
}

TEST_F(CgroupV2, NoIoLimitsAskedWritesNoIoMax) {
  auto manager = V2Manager();
  CgroupLimits limits = TypicalLimits();
  limits.io_devices = {kVda};
  auto cg = manager->Create("sbx", limits);
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_FALSE(fs_->Wrote(P("unified/kiln/sbx/io.max")));
  EXPECT_EQ((*cg)->io_note(), "no io limits (none asked for)");
}

TEST_F(CgroupV2, WithoutTheIoControllerTheSandboxRunsWithoutIoLimits) {
  fs_->AddV2Hierarchy(P("unified"), "cpu memory pids");
  auto manager = CgroupManager::ForV2(P("unified"), "/kiln", fs_);
  auto cg = manager->Create("sbx", IoLimitsOn({kVda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(P("unified/kiln/sbx/memory.max")), "536870912");
  EXPECT_FALSE(fs::exists(P("unified/kiln/sbx/io.max")));
  EXPECT_EQ(ReadText(P("unified/kiln/cgroup.subtree_control")), "cpu memory pids");
  const IoSupport io = manager->io_support();
  EXPECT_FALSE(io.available);
  EXPECT_EQ(io.why, "cgroup v2 does not delegate the io controller to " + P("unified"));
  EXPECT_EQ((*cg)->io_note(), "no io limits: " + io.why);
}

TEST_F(CgroupV2, NoThrottleableDeviceIsSaid) {
  auto manager = V2Manager();
  auto cg = manager->Create("sbx", IoLimitsOn({}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_FALSE(fs_->Wrote(P("unified/kiln/sbx/io.max")));
  EXPECT_EQ((*cg)->io_note(),
            "no io limits: no block device with a request queue behind the sandbox's files");
}

TEST_F(CgroupV2, ARefusedIoMaxIsBestEffort) {
  auto manager = V2Manager();
  fs_->fail_writes[P("unified/kiln/sbx/io.max")] = ENODEV;
  auto cg = manager->Create("sbx", IoLimitsOn({kVda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(P("unified/kiln/sbx/pids.max")), "64");
  EXPECT_TRUE(Contains((*cg)->io_note(), "no io limits: 254:0 (vda): "));
  EXPECT_TRUE(Contains((*cg)->io_note(), P("unified/kiln/sbx/io.max")));
}

TEST_F(CgroupV2, ARefusedIoEnableIsBestEffort) {
  // The three are enabled already; only the "+io" write is refused.
  fs_->AddV2Hierarchy(P("unified"), "cpu io memory pids");
  ASSERT_TRUE(fs_->WriteFile(P("unified/cgroup.subtree_control"), "+cpu +memory +pids").ok());
  fs_->fail_writes[P("unified/cgroup.subtree_control")] = EACCES;
  auto manager = CgroupManager::ForV2(P("unified"), "/kiln", fs_);
  auto cg = manager->Create("sbx", IoLimitsOn({kVda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(P("unified/kiln/sbx/cgroup.controllers")), "cpu memory pids");
  const IoSupport io = manager->io_support();
  EXPECT_FALSE(io.available);
  EXPECT_TRUE(Contains(io.why, "cannot enable the io controller: ")) << io.why;
  EXPECT_EQ((*cg)->io_note(), "no io limits: " + io.why);
}

class CgroupV1 : public FakeTreeTest {};

TEST_F(CgroupV1, WritesEachBlkioThrottleFilePerDevice) {
  auto manager = V1Manager(/*blkio=*/true);
  EXPECT_TRUE(manager->io_support().available);
  auto cg = manager->Create("sbx", IoLimitsOn({kVda, kSda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  const std::string dir = P("blkio/kiln/sbx");
  EXPECT_EQ(WritesTo(*fs_, dir + "/blkio.throttle.read_bps_device"),
            (std::vector<std::string>{"254:0 104857600", "8:0 104857600"}));
  EXPECT_EQ(WritesTo(*fs_, dir + "/blkio.throttle.write_bps_device"),
            (std::vector<std::string>{"254:0 52428800", "8:0 52428800"}));
  EXPECT_EQ(WritesTo(*fs_, dir + "/blkio.throttle.read_iops_device"),
            (std::vector<std::string>{"254:0 1000", "8:0 1000"}));
  EXPECT_EQ(WritesTo(*fs_, dir + "/blkio.throttle.write_iops_device"),
            (std::vector<std::string>{"254:0 500", "8:0 500"}));
  EXPECT_EQ((*cg)->io_note(), "io limits on 254:0 (vda), 8:0 (sda)");
  EXPECT_TRUE(Contains((*cg)->Describe(), "blkio"));
}

TEST_F(CgroupV1, AnUnsetIoLimitIsNotWritten) {
  // 0 in a blkio.throttle file removes the device's rule: never written.
  auto manager = V1Manager(/*blkio=*/true);
  CgroupLimits limits;
  limits.io.write_iops = 100;
  limits.io_devices = {kVda};
  auto cg = manager->Create("sbx", limits);
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  const std::string dir = P("blkio/kiln/sbx");
  EXPECT_EQ(WritesTo(*fs_, dir + "/blkio.throttle.write_iops_device"),
            (std::vector<std::string>{"254:0 100"}));
  for (const char* f : {"read_bps_device", "write_bps_device", "read_iops_device"}) {
    EXPECT_FALSE(fs_->Wrote(dir + "/blkio.throttle." + f)) << f;
  }
}

TEST_F(CgroupV1, WithoutBlkioTheSandboxRunsWithoutIoLimits) {
  auto manager = V1Manager(/*blkio=*/false);
  EXPECT_FALSE(manager->io_support().available);
  auto cg = manager->Create("sbx", IoLimitsOn({kVda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(P("memory/kiln/sbx/memory.limit_in_bytes")), "536870912");
  EXPECT_EQ((*cg)->io_note(), "no io limits: cgroup v1 has no blkio hierarchy");
}

TEST_F(CgroupV1, ARefusedThrottleRuleIsBestEffortPerDevice) {
  auto manager = V1Manager(/*blkio=*/true);
  fs_->fail_writes[P("blkio/kiln/sbx/blkio.throttle.read_bps_device")] = EINVAL;
  auto cg = manager->Create("sbx", IoLimitsOn({kVda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_TRUE(Contains((*cg)->io_note(), "no io limits: 254:0 (vda): ")) << (*cg)->io_note();
}

TEST_F(CgroupV1, CreateWritesLimitsInSeparateCpuAndCpuacctHierarchies) {
  auto manager = V1Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  for (const char* c : {"memory", "pids", "cpu", "cpuacct", "freezer"}) {
    EXPECT_TRUE(fs::is_directory(P(std::string(c) + "/kiln/sbx"))) << c;
  }
  EXPECT_EQ(ReadText(P("memory/kiln/sbx/memory.limit_in_bytes")), "536870912");
  EXPECT_EQ(ReadText(P("memory/kiln/sbx/memory.memsw.limit_in_bytes")), "536870912");
  EXPECT_FALSE(fs_->Wrote(P("memory/kiln/sbx/memory.swappiness")));
  EXPECT_EQ(ReadText(P("pids/kiln/sbx/pids.max")), "64");
  EXPECT_EQ(ReadText(P("cpu/kiln/sbx/cpu.cfs_period_us")), "100000");
  EXPECT_EQ(ReadText(P("cpu/kiln/sbx/cpu.cfs_quota_us")), "150000");
  EXPECT_EQ((*cg)->clone_into_fd(), -1);
  EXPECT_EQ((*cg)->Describe(), "v1:" + P("memory/kiln/sbx") + " (+pids,cpu,cpuacct,freezer)");
}

TEST_F(CgroupV1, WithoutMemswSetsSwappinessZero) {
  fs_->omit.insert("memory.memsw.limit_in_bytes");  // swapaccount=0
  auto manager = V1Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(P("memory/kiln/sbx/memory.limit_in_bytes")), "536870912");
  EXPECT_EQ(ReadText(P("memory/kiln/sbx/memory.swappiness")), "0");
}

TEST_F(CgroupV1, UnlimitedLeavesDefaults) {
  auto manager = V1Manager();
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_FALSE(fs_->Wrote(P("memory/kiln/sbx/memory.limit_in_bytes")));
  EXPECT_FALSE(fs_->Wrote(P("pids/kiln/sbx/pids.max")));
  EXPECT_FALSE(fs_->Wrote(P("cpu/kiln/sbx/cpu.cfs_quota_us")));
  EXPECT_EQ(ReadText(P("cpu/kiln/sbx/cpu.cfs_quota_us")), "-1");
  EXPECT_EQ(ReadText(P("memory/kiln/sbx/memory.swappiness")), "0");  // swap stays off
}

TEST_F(CgroupV1, CoMountedCpuCpuacctShareOneDirectory) {
  fs_->AddV1Hierarchy(P("memory"), {"memory"});
  fs_->AddV1Hierarchy(P("pids"), {"pids"});
  fs_->AddV1Hierarchy(P("cpu,cpuacct"), {"cpu", "cpuacct"});
  auto manager = CgroupManager::ForV1({{"memory", P("memory/kiln")},
                                       {"pids", P("pids/kiln")},
                                       {"cpu", P("cpu,cpuacct/kiln")},
                                       {"cpuacct", P("cpu,cpuacct/kiln")}},
                                      fs_);
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  SleepingChild child;
  ASSERT_TRUE((*cg)->Attach(child.pid()).ok());
  int attach_writes = 0;
  for (const auto& [path, value] : fs_->writes) {
    if (path == P("cpu,cpuacct/kiln/sbx/cgroup.procs")) ++attach_writes;
  }
  EXPECT_EQ(attach_writes, 1);
  WriteText(P("cpu,cpuacct/kiln/sbx/cpuacct.usage"), "2500000\n");
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_EQ(usage->cpu_usec, 2500u);
  ASSERT_TRUE((*cg)->KillAll().ok());  // no freezer: kill without freezing
  EXPECT_EQ(child.WaitSignal(), SIGKILL);
  ASSERT_TRUE((*cg)->Remove().ok());
  EXPECT_FALSE(fs::exists(P("cpu,cpuacct/kiln/sbx")));
}

TEST_F(CgroupV1, UsageParsesCpuacctAndOomControl) {
  auto manager = V1Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  WriteText(P("cpuacct/kiln/sbx/cpuacct.usage"), "1234567890\n");
  WriteText(P("memory/kiln/sbx/memory.max_usage_in_bytes"), "104857600\n");
  WriteText(P("memory/kiln/sbx/memory.usage_in_bytes"), "2097152\n");
  WriteText(P("memory/kiln/sbx/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  WriteText(P("pids/kiln/sbx/pids.events"), "max 5\n");
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_TRUE(usage->has_cpu);
  EXPECT_EQ(usage->cpu_usec, 1234567u);  // nanoseconds -> microseconds
  EXPECT_TRUE(usage->has_memory_peak);
  EXPECT_EQ(usage->memory_peak, 104857600u);
  EXPECT_TRUE(usage->has_memory_current);
  EXPECT_EQ(usage->memory_current, 2097152u);
  EXPECT_EQ(usage->oom_kills, 3u);
  EXPECT_EQ(usage->pids_max_hits, 5u);
}

TEST_F(CgroupV1, ResetMemoryPeakWritesZeroToMaxUsage) {
  auto manager = V1Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  WriteText(P("memory/kiln/sbx/memory.max_usage_in_bytes"), "900000000\n");
  WriteText(P("memory/kiln/sbx/memory.usage_in_bytes"), "50000000\n");
  ASSERT_TRUE((*cg)->ResetMemoryPeak());
  EXPECT_TRUE(fs_->Wrote(P("memory/kiln/sbx/memory.max_usage_in_bytes")));
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_EQ(usage->memory_peak, 50000000u);
}

TEST_F(CgroupV1, UsageWithoutCpuacctHasNoCpu) {
  fs_->AddV1Hierarchy(P("memory"), {"memory"});
  fs_->AddV1Hierarchy(P("pids"), {"pids"});
  fs_->AddV1Hierarchy(P("cpu"), {"cpu"});
  auto manager = CgroupManager::ForV1(
      {{"memory", P("memory/kiln")}, {"pids", P("pids/kiln")}, {"cpu", P("cpu/kiln")}}, fs_);
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_FALSE(usage->has_cpu);
  EXPECT_TRUE(usage->has_memory_peak);
}

TEST_F(CgroupV1, KillAllFreezesKillsAndThaws) {
  auto manager = V1Manager();
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  SleepingChild child;
  ASSERT_TRUE((*cg)->Attach(child.pid()).ok());
  ASSERT_TRUE((*cg)->KillAll().ok());
  EXPECT_EQ(child.WaitSignal(), SIGKILL);
  std::vector<std::string> states;
  for (const auto& [path, value] : fs_->writes) {
    if (path == P("freezer/kiln/sbx/freezer.state")) states.push_back(value);
  }
  EXPECT_EQ(states, (std::vector<std::string>{"FROZEN", "THAWED"}));
}

TEST_F(CgroupV1, DisownLeavesItAndAdoptTakesItOver) {
  // The warm pool creates a sandbox's cgroup, disowns it when it hands the
  // sandbox to a supervisor process, which adopts it by name and removes it.
  auto manager = V1Manager();
  auto made = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(made.ok()) << made.error().ToString();
  (*made)->Disown();
  made->reset();
  EXPECT_TRUE(fs::exists(P("memory/kiln/sbx")));
  auto adopted = manager->Adopt("sbx");
  ASSERT_TRUE(adopted.ok()) << adopted.error().ToString();
  WriteText(P("cpuacct/kiln/sbx/cpuacct.usage"), "7000\n");
  auto usage = (*adopted)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_EQ(usage->cpu_usec, 7u);
  adopted->reset();  // removes it, like a created one
  for (const char* c : {"memory", "pids", "cpu", "cpuacct", "freezer"}) {
    EXPECT_FALSE(fs::exists(P(std::string(c) + "/kiln/sbx"))) << c;
  }
  EXPECT_EQ(manager->Adopt("sbx").error().code, Code::kNotFound);
  EXPECT_FALSE(manager->Adopt("../x").ok());
}

TEST_F(CgroupV2, AdoptTakesItOver) {
  auto manager = V2Manager();
  auto made = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(made.ok()) << made.error().ToString();
  (*made)->Disown();
  made->reset();
  auto adopted = manager->Adopt("sbx");
  ASSERT_TRUE(adopted.ok()) << adopted.error().ToString();
  EXPECT_GE((*adopted)->clone_into_fd(), 0);
  ASSERT_TRUE((*adopted)->Remove().ok());
  EXPECT_FALSE(fs::exists(P("unified/kiln/sbx")));
}

TEST_F(CgroupV1, LimitWithoutItsControllerFails) {
  fs_->AddV1Hierarchy(P("memory"), {"memory"});
  auto manager = CgroupManager::ForV1({{"memory", P("memory/kiln")}}, fs_);
  CgroupLimits limits;
  limits.pids = 10;
  auto cg = manager->Create("sbx", limits);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.error().code, Code::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(P("memory/kiln/sbx")));
}

// ---------------------------------------------------------------------------
// Behaviour both implementations share (P16: the same tests against both).

class CgroupLifecycle : public FakeTreeTest, public ::testing::WithParamInterface<CgroupMode> {
 protected:
  std::unique_ptr<CgroupManager> Manager() {
    return GetParam() == CgroupMode::kV2 ? V2Manager() : V1Manager();
  }
  std::vector<std::string> Dirs(const std::string& name) const {
    if (GetParam() == CgroupMode::kV2) return {P("unified/kiln/" + name)};
    std::vector<std::string> out;
    for (const char* c : {"memory", "pids", "cpu", "cpuacct", "freezer"}) {
      out.push_back(P(std::string(c) + "/kiln/" + name));
    }
    return out;
  }
  std::string PidsMax(const std::string& name) const {
    return GetParam() == CgroupMode::kV2 ? P("unified/kiln/" + name + "/pids.max")
                                         : P("pids/kiln/" + name + "/pids.max");
  }
};

TEST_P(CgroupLifecycle, AttachKillRemove) {
  auto manager = Manager();
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  SleepingChild child;
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE((*cg)->Attach(child.pid()).ok());
  for (const auto& dir : Dirs("sbx")) {
    EXPECT_EQ(ReadText(dir + "/cgroup.procs"), std::to_string(child.pid()) + "\n") << dir;
  }
  ASSERT_TRUE((*cg)->KillAll().ok());
  EXPECT_EQ(child.WaitSignal(), SIGKILL);
  ASSERT_TRUE((*cg)->Remove().ok());
  for (const auto& dir : Dirs("sbx")) EXPECT_FALSE(fs::exists(dir)) << dir;
}

TEST_P(CgroupLifecycle, KillAllIsIdempotentOnAnEmptyCgroup) {
  auto manager = Manager();
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_TRUE((*cg)->KillAll().ok());
  EXPECT_TRUE((*cg)->KillAll().ok());
  EXPECT_TRUE(fs::is_directory(Dirs("sbx")[0]));
}

TEST_P(CgroupLifecycle, DestructorKillsAndRemoves) {
  auto manager = Manager();
  SleepingChild child;
  {
    auto cg = manager->Create("sbx", TypicalLimits());
    ASSERT_TRUE(cg.ok()) << cg.error().ToString();
    ASSERT_TRUE((*cg)->Attach(child.pid()).ok());
  }
  EXPECT_EQ(child.WaitSignal(), SIGKILL);
  for (const auto& dir : Dirs("sbx")) EXPECT_FALSE(fs::exists(dir)) << dir;
}

TEST_P(CgroupLifecycle, FailedLimitWriteRemovesThePartialCgroup) {
  auto manager = Manager();
  fs_->fail_writes[PidsMax("sbx")] = EINVAL;
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_FALSE(cg.ok());
  EXPECT_TRUE(Contains(cg.error().message, PidsMax("sbx")));
  EXPECT_EQ(cg.error().sys_errno, EINVAL);
  for (const auto& dir : Dirs("sbx")) EXPECT_FALSE(fs::exists(dir)) << dir;
}

TEST_P(CgroupLifecycle, MissingParentIsCreatedOnDemand) {
  auto manager = Manager();
  for (const auto& dir : Dirs("sbx")) ASSERT_FALSE(fs::exists(fs::path(dir).parent_path())) << dir;
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  for (const auto& dir : Dirs("sbx")) EXPECT_TRUE(fs::is_directory(dir)) << dir;
}

INSTANTIATE_TEST_SUITE_P(BothModes, CgroupLifecycle,
                         ::testing::Values(CgroupMode::kV1, CgroupMode::kV2),
                         [](const ::testing::TestParamInfo<CgroupMode>& p) {
                           return std::string(ToString(p.param));
                         });

// ---------------------------------------------------------------------------
// Parsers

// The development host's /proc/self/mountinfo, verbatim: every v1 controller
// in its own hierarchy, cgroup2 at /sys/fs/cgroup/unified.
constexpr char kDevHostMountinfo[] =
    "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    "23 27 0:22 / /sys rw,relatime - sysfs sysfs rw\n"
    "24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs "
    "rw,size=12334492k,nr_inodes=3083623,mode=755\n"
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

constexpr char kDevHostProcCgroup[] =
    "9:name=systemd:/\n"
    "8:pids:/\n"
    "7:blkio:/\n"
    "6:freezer:/\n"
    "5:devices:/\n"
    "4:memory:/process_api/66b6341798a393e8270ffbba43df87b6\n"
    "3:cpuset:/\n"
    "2:cpuacct:/\n"
    "1:cpu:/\n"
    "0::/\n";

// A systemd host with the unified hierarchy only (Debian 12, Ubuntu 22.04+).
constexpr char kProductionMountinfo[] =
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
    "24 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "28 24 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
    "29 24 0:26 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw\n";

TEST(ParseCgroupMounts, DevelopmentHost) {
  auto mounts = ParseCgroupMounts(kDevHostMountinfo);
  ASSERT_EQ(mounts.size(), 10u);
  std::map<std::string, std::vector<std::string>> by_point;
  for (const auto& m : mounts) {
    EXPECT_EQ(m.root, "/");
    by_point[m.mount_point] = m.controllers;
    EXPECT_EQ(m.v2, m.mount_point == "/sys/fs/cgroup/unified") << m.mount_point;
  }
  EXPECT_EQ(by_point["/sys/fs/cgroup/cpu"], std::vector<std::string>{"cpu"});
  EXPECT_EQ(by_point["/sys/fs/cgroup/cpuacct"], std::vector<std::string>{"cpuacct"});
  EXPECT_EQ(by_point["/sys/fs/cgroup/memory"], std::vector<std::string>{"memory"});
  EXPECT_EQ(by_point["/sys/fs/cgroup/pids"], std::vector<std::string>{"pids"});
  EXPECT_EQ(by_point["/sys/fs/cgroup/freezer"], std::vector<std::string>{"freezer"});
  EXPECT_TRUE(by_point["/sys/fs/cgroup/systemd"].empty());  // name=systemd is no controller
  EXPECT_TRUE(by_point["/sys/fs/cgroup/unified"].empty());
  EXPECT_EQ(by_point.count("/sys/fs/cgroup"), 0u);  // the tmpfs holding them is not a cgroup
}

TEST(ParseCgroupMounts, PureV2Production) {
  auto mounts = ParseCgroupMounts(kProductionMountinfo);
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_TRUE(mounts[0].v2);
  EXPECT_EQ(mounts[0].mount_point, "/sys/fs/cgroup");
  EXPECT_EQ(mounts[0].root, "/");
  EXPECT_TRUE(mounts[0].controllers.empty());
}

TEST(ParseCgroupMounts, CoMountedEscapedAndContainerRoot) {
  auto mounts = ParseCgroupMounts(
      "50 31 0:40 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:20 - cgroup cgroup "
      "ro,cpu,cpuacct\n"
      "51 31 0:41 / /mnt/my\\040cgroups\\134x rw - cgroup none "
      "rw,xattr,name=kiln,memory,release_agent=/x\n"
      "52 31 0:42 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio\n"
      "garbage line without separator\n"
      "53 31 0:43 / /cgroup2 rw - cgroup2 cgroup2 rw,nsdelegate\n");
  ASSERT_EQ(mounts.size(), 4u);
  EXPECT_EQ(mounts[0].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(mounts[0].root, "/docker/abc");
  EXPECT_EQ(mounts[0].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(mounts[1].mount_point, "/mnt/my cgroups\\x");
  EXPECT_EQ(mounts[1].controllers, std::vector<std::string>{"memory"});
  EXPECT_EQ(mounts[2].controllers, (std::vector<std::string>{"net_cls", "net_prio"}));
  EXPECT_TRUE(mounts[3].v2);
}

TEST(ParseProcCgroup, DevelopmentHost) {
  auto paths = ParseProcCgroup(kDevHostProcCgroup);
  ASSERT_EQ(paths.size(), 10u);
  std::map<std::string, std::string> m(paths.begin(), paths.end());
  EXPECT_EQ(m["memory"], "/process_api/66b6341798a393e8270ffbba43df87b6");
  EXPECT_EQ(m["cpu"], "/");
  EXPECT_EQ(m["pids"], "/");
  EXPECT_EQ(m["name=systemd"], "/");
  EXPECT_EQ(m[""], "/");
}

TEST(ParseProcCgroup, PureV2) {
  auto paths = ParseProcCgroup("0::/system.slice/kiln.service\n");
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_EQ(paths[0].first, "");
  EXPECT_EQ(paths[0].second, "/system.slice/kiln.service");
}

TEST(ParseProcCgroup, CoMountedAndDeleted) {
  auto paths = ParseProcCgroup("3:cpu,cpuacct:/a:b\n2:memory:/gone (deleted)\n");
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0], (std::pair<std::string, std::string>{"cpu", "/a:b"}));
  EXPECT_EQ(paths[1], (std::pair<std::string, std::string>{"cpuacct", "/a:b"}));
  EXPECT_EQ(paths[2], (std::pair<std::string, std::string>{"memory", "/gone"}));
}

// ---------------------------------------------------------------------------
// Detect() on fake mountinfo, /proc/self/cgroup and tree

class Detect : public FakeTreeTest {
 protected:
  CgroupHostOptions Options(const std::string& mountinfo, const std::string& proc_cgroup) {
    WriteText(P("mountinfo"), mountinfo);
    WriteText(P("proc-cgroup"), proc_cgroup);
    CgroupHostOptions options;
    options.proc_self_mountinfo = P("mountinfo");
    options.proc_self_cgroup = P("proc-cgroup");
    return options;
  }

  std::string V1Line(int id, const std::string& dir, const std::string& opts) {
    return std::to_string(id) + " 31 0:" + std::to_string(id) + " / " + P(dir) +
           " rw,relatime - cgroup cgroup rw," + opts + "\n";
  }

  // The development host's layout under the temp dir.
  std::string DevHostMountinfo(bool with_pids = true) {
    std::string out;
    int id = 32;
    for (const char* c :
         {"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"}) {
      if (!with_pids && std::string(c) == "pids") continue;
      fs_->AddV1Hierarchy(P(c), {c});
      out += V1Line(id++, c, c);
    }
    out += V1Line(id++, "systemd", "name=systemd");
    fs_->AddV2Hierarchy(P("unified"), "hugetlb");
    out +=
        std::to_string(id) + " 31 0:38 / " + P("unified") + " rw,relatime - cgroup2 cgroup2 rw\n";
    EXPECT_TRUE(fs_->MakeDir(P("memory/process_api")).ok());
    EXPECT_TRUE(fs_->MakeDir(P("memory/process_api/66b6341798a393e8270ffbba43df87b6")).ok());
    return out;
  }

  // A pure v2 systemd host; kiln.service delegated (Delegate=yes).
  std::string ProductionMountinfo(const std::string& service_controllers = "cpu memory pids") {
    fs_->AddV2Hierarchy(P("cgroup"), "cpuset cpu io memory hugetlb pids rdma misc");
    EXPECT_TRUE(fs_->WriteFile(P("cgroup/cgroup.subtree_control"), "+cpu +io +memory +pids").ok());
    EXPECT_TRUE(fs_->MakeDir(P("cgroup/system.slice")).ok());
    std::string enable;
    for (const auto& c : Tokens(service_controllers)) enable += "+" + c + " ";
    if (!enable.empty()) {
      EXPECT_TRUE(fs_->WriteFile(P("cgroup/system.slice/cgroup.subtree_control"), enable).ok());
    }
    EXPECT_TRUE(fs_->MakeDir(P("cgroup/system.slice/kiln.service")).ok());
    return "28 24 0:25 / " + P("cgroup") +
           " rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
  }
};

TEST_F(Detect, PicksV2WhenControllersAreDelegated) {
  auto options = Options(ProductionMountinfo(), "0::/system.slice/kiln.service\n");
  auto manager = CgroupManager::Detect(options, fs_);
  ASSERT_EQ(manager->mode(), CgroupMode::kV2) << manager->reason();
  EXPECT_EQ(manager->reason(), "cgroup v2 at " + P("cgroup") + " delegates memory, pids, cpu to " +
                                   P("cgroup/system.slice/kiln.service") + "; using cgroup v2");
  EXPECT_EQ(manager->controllers(), (std::vector<std::string>{"memory", "pids", "cpu"}));
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  std::string dir = P("cgroup/system.slice/kiln.service/kiln/sbx");
  EXPECT_EQ(ReadText(dir + "/cgroup.controllers"), "cpu memory pids");
  EXPECT_EQ(ReadText(dir + "/cpu.max"), "150000 100000");
  EXPECT_FALSE(fs::exists(P("cgroup/system.slice/kiln.service/supervisor")));
  // system.slice does not pass io on to kiln.service: no I/O limits, said.
  EXPECT_EQ(manager->io_support().why, "cgroup v2 does not delegate the io controller to " +
                                           P("cgroup/system.slice/kiln.service"));
  EXPECT_FALSE(manager->io_support().available);
}

TEST_F(Detect, V2WithIoDelegatedEnablesItForSandboxes) {
  auto options =
      Options(ProductionMountinfo("cpu io memory pids"), "0::/system.slice/kiln.service\n");
  auto manager = CgroupManager::Detect(options, fs_);
  ASSERT_EQ(manager->mode(), CgroupMode::kV2) << manager->reason();
  EXPECT_TRUE(manager->io_support().available) << manager->io_support().why;
  auto cg = manager->Create("sbx", IoLimitsOn({kVda}));
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  const std::string dir = P("cgroup/system.slice/kiln.service/kiln/sbx");
  EXPECT_EQ(ReadText(dir + "/cgroup.controllers"), "cpu io memory pids");
  EXPECT_EQ(ReadText(dir + "/io.max"), "254:0 rbps=104857600 wbps=52428800 riops=1000 wiops=500");
  EXPECT_EQ((*cg)->io_note(), "io limits on 254:0 (vda)");
}

TEST_F(Detect, V2MovesOwnProcessesIntoSupervisorLeaf) {
  auto options = Options(ProductionMountinfo(), "0::/system.slice/kiln.service\n");
  std::string own = P("cgroup/system.slice/kiln.service");
  ASSERT_TRUE(fs_->WriteFile(own + "/cgroup.procs", std::to_string(kNoSuchPid)).ok());
  auto manager = CgroupManager::Detect(options, fs_);
  ASSERT_EQ(manager->mode(), CgroupMode::kV2) << manager->reason();
  EXPECT_FALSE(fs::exists(own + "/supervisor"));  // Detect changes nothing
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_EQ(ReadText(own + "/cgroup.procs"), "");
  EXPECT_EQ(Tokens(ReadText(own + "/supervisor/cgroup.procs")),
            (std::set<std::string>{std::to_string(kNoSuchPid), std::to_string(::getpid())}));
  EXPECT_EQ(ReadText(own + "/cgroup.subtree_control"), "cpu memory pids");
  EXPECT_TRUE(fs::is_directory(own + "/kiln/sbx"));

  // A later Detect from inside the leaf still uses the delegated cgroup.
  auto again = CgroupManager::Detect(
      Options(ReadText(P("mountinfo")), "0::/system.slice/kiln.service/supervisor\n"), fs_);
  ASSERT_EQ(again->mode(), CgroupMode::kV2) << again->reason();
  auto cg2 = again->Create("sbx2", CgroupLimits{});
  ASSERT_TRUE(cg2.ok()) << cg2.error().ToString();
  EXPECT_TRUE(fs::is_directory(own + "/kiln/sbx2"));
}

TEST_F(Detect, PicksV1WhenV2DelegatesNothing) {
  auto manager = CgroupManager::Detect(Options(DevHostMountinfo(), kDevHostProcCgroup), fs_);
  ASSERT_EQ(manager->mode(), CgroupMode::kV1) << manager->reason();
  EXPECT_EQ(manager->reason(),
            "cgroup v2 is mounted but delegates no memory/pids/cpu controllers; using cgroup v1 "
            "(memory, pids, cpu, cpuacct, freezer, blkio)");
  EXPECT_EQ(manager->controllers(),
            (std::vector<std::string>{"memory", "pids", "cpu", "cpuacct", "freezer", "blkio"}));
  EXPECT_TRUE(manager->io_support().available) << manager->io_support().why;
  auto cg = manager->Create("sbx", TypicalLimits());
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  // Nested under our own memory cgroup; at the root of the others.
  std::string memory = P("memory/process_api/66b6341798a393e8270ffbba43df87b6/kiln/sbx");
  EXPECT_EQ(ReadText(memory + "/memory.limit_in_bytes"), "536870912");
  for (const char* c : {"pids", "cpu", "cpuacct", "freezer", "blkio"}) {
    EXPECT_TRUE(fs::is_directory(P(std::string(c) + "/kiln/sbx"))) << c;
  }
  EXPECT_FALSE(fs::exists(P("cpuset/kiln")));
  EXPECT_EQ((*cg)->Describe(), "v1:" + memory + " (+pids,cpu,cpuacct,freezer,blkio)");
}

TEST_F(Detect, V2PartialDelegationNamesWhatIsMissing) {
  auto options = Options(ProductionMountinfo("memory pids"), "0::/system.slice/kiln.service\n");
  auto manager = CgroupManager::Detect(options, fs_);
  EXPECT_EQ(manager->mode(), CgroupMode::kNone);
  EXPECT_TRUE(Contains(manager->reason(), "does not delegate cpu to"));
  EXPECT_TRUE(Contains(manager->reason(), "cgroup v1 is not mounted"));
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.error().code, Code::kFailedPrecondition);
}

TEST_F(Detect, NoneWhenV1LacksPids) {
  auto manager = CgroupManager::Detect(
      Options(DevHostMountinfo(/*with_pids=*/false), kDevHostProcCgroup), fs_);
  EXPECT_EQ(manager->mode(), CgroupMode::kNone);
  EXPECT_EQ(
      manager->reason(),
      "cgroup v2 is mounted but delegates no memory/pids/cpu controllers; cgroup v1 lacks the "
      "pids controller; no cgroup limits");
  EXPECT_TRUE(manager->controllers().empty());
}

TEST_F(Detect, ExplicitParentOverridesDefault) {
  auto options = Options(DevHostMountinfo(), kDevHostProcCgroup);
  options.parent = "/sandboxes";
  auto manager = CgroupManager::Detect(options, fs_);
  ASSERT_EQ(manager->mode(), CgroupMode::kV1) << manager->reason();
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_TRUE(fs::is_directory(P("memory/sandboxes/sbx")));
  EXPECT_TRUE(fs::is_directory(P("pids/sandboxes/sbx")));
}

TEST_F(Detect, ForcedV1SkipsV2) {
  auto options = Options(ProductionMountinfo(), "0::/system.slice/kiln.service\n");
  options.force_mode = CgroupMode::kV1;
  auto manager = CgroupManager::Detect(options, fs_);
  EXPECT_EQ(manager->mode(), CgroupMode::kNone);
  EXPECT_EQ(manager->reason(), "cgroup v1 forced; cgroup v1 is not mounted; no cgroup limits");
}

TEST_F(Detect, UnreadableMountinfoGivesNone) {
  CgroupHostOptions options;
  options.proc_self_mountinfo = P("missing");
  options.proc_self_cgroup = P("missing");
  auto manager = CgroupManager::Detect(options, fs_);
  EXPECT_EQ(manager->mode(), CgroupMode::kNone);
  EXPECT_TRUE(Contains(manager->reason(), P("missing")));
}

TEST_F(Detect, ContainerMountRootMapsOurPath) {
  // v1 in a container without a cgroup namespace: each hierarchy mounts only
  // our subtree, so /proc/self/cgroup paths start with the mount's root.
  std::string mountinfo;
  int id = 60;
  for (const char* c : {"memory", "pids", "cpu"}) {
    fs_->AddV1Hierarchy(P(c), {c});
    mountinfo +=
        std::to_string(id++) + " 31 0:1 /docker/abc " + P(c) + " rw - cgroup cgroup rw," + c + "\n";
  }
  auto manager = CgroupManager::Detect(
      Options(mountinfo, "3:memory:/docker/abc\n2:pids:/docker/abc\n1:cpu:/docker/abc\n0::/\n"),
      fs_);
  ASSERT_EQ(manager->mode(), CgroupMode::kV1) << manager->reason();
  EXPECT_EQ(manager->reason(), "cgroup v2 is not mounted; using cgroup v1 (memory, pids, cpu)");
  EXPECT_EQ(manager->io_support().why, "cgroup v1 has no blkio hierarchy");
  auto cg = manager->Create("sbx", CgroupLimits{});
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  EXPECT_TRUE(fs::is_directory(P("memory/kiln/sbx")));
}

// ---------------------------------------------------------------------------
// Which block devices to throttle: a fake sysfs

class IoDevices : public FakeTreeTest {
 protected:
  // <sysfs>/devices/<bus>/block/<disk>[/<part>] with dev files, and the
  // /sys/dev/block/MAJ:MIN symlinks into it, as the kernel lays them out.
  void AddDisk(const std::string& name, const std::string& num, bool queue = true) {
    const std::string dir = P("sys/devices/virtual-bus/block/" + name);
    fs::create_directories(dir);
    WriteText(dir + "/dev", num + "\n");
    if (queue) fs::create_directories(dir + "/queue");
    Link(num, "../../devices/virtual-bus/block/" + name);
  }
  void AddPartition(const std::string& disk, const std::string& name, const std::string& num) {
    const std::string dir = P("sys/devices/virtual-bus/block/" + disk + "/" + name);
    fs::create_directories(dir);
    WriteText(dir + "/dev", num + "\n");
    WriteText(dir + "/partition", "1\n");
    Link(num, "../../devices/virtual-bus/block/" + disk + "/" + name);
  }
  void Link(const std::string& num, const std::string& target) {
    fs::create_directories(P("sys/dev/block"));
    fs::create_symlink(target, P("sys/dev/block/" + num));
  }
  IoDeviceScan Scan(const std::vector<std::pair<std::string, dev_t>>& sources) {
    return ScanIoDeviceNumbers(sources, P("sys"));
  }
};

TEST_F(IoDevices, AWholeDiskIsItself) {
  AddDisk("vda", "254:0");
  const IoDeviceScan scan = Scan({{"/usr", makedev(254, 0)}});
  ASSERT_EQ(scan.devices.size(), 1u);
  EXPECT_EQ(ToString(scan.devices[0]), "254:0 (vda)");
  EXPECT_TRUE(scan.skipped.empty());
}

TEST_F(IoDevices, APartitionResolvesToItsDisk) {
  AddDisk("nvme0n1", "259:0");
  AddPartition("nvme0n1", "nvme0n1p2", "259:2");
  AddPartition("nvme0n1", "nvme0n1p3", "259:3");
  const IoDeviceScan scan =
      Scan({{"/usr", makedev(259, 2)}, {"/opt/data", makedev(259, 3)}, {"/etc", makedev(259, 2)}});
  // Two partitions of one disk: one device, limited once.
  ASSERT_EQ(scan.devices.size(), 1u);
  EXPECT_EQ(ToString(scan.devices[0]), "259:0 (nvme0n1)");
  EXPECT_TRUE(scan.skipped.empty());
}

TEST_F(IoDevices, WhatCannotBeThrottledIsSkippedWithTheReason) {
  AddDisk("vda", "254:0");
  AddDisk("nbd0", "43:0", /*queue=*/false);
  const IoDeviceScan scan = Scan({{"/usr", makedev(0, 31)},  // overlayfs, tmpfs, virtiofs
                                  {"/srv", makedev(7, 99)},  // not in sysfs
                                  {"/mnt", makedev(43, 0)},  // no request queue
                                  {"/opt", makedev(254, 0)}});
  ASSERT_EQ(scan.devices.size(), 1u);
  EXPECT_EQ(scan.devices[0], kVda);
  ASSERT_EQ(scan.skipped.size(), 3u);
  EXPECT_EQ(scan.skipped[0],
            "/usr: device 0:31 is not a block device (tmpfs, overlayfs, virtiofs, NFS, btrfs...)");
  EXPECT_TRUE(Contains(scan.skipped[1], "/srv: block device 7:99 is not in " + P("sys")));
  EXPECT_EQ(scan.skipped[2], "/mnt: block device 43:0 (nbd0) has no request queue to throttle");
}

TEST(IoDevicesReal, StatsEachPathAndSkipsPseudoFilesystems) {
  // /proc is procfs (an anonymous device, major 0) on every Linux host.
  const IoDeviceScan scan = ScanIoDevices({"/proc", "/no/such/kiln/path"});
  EXPECT_TRUE(scan.devices.empty());
  ASSERT_EQ(scan.skipped.size(), 2u);
  EXPECT_EQ(scan.skipped[0], "/no/such/kiln/path: stat: No such file or directory");
  EXPECT_TRUE(Contains(scan.skipped[1], "/proc: device 0:")) << scan.skipped[1];
}

// ---------------------------------------------------------------------------
// The real host (cgroup v1). Skips without root or without v1 memory+pids+cpu.

std::string RealDirOf(const std::vector<MountinfoCgroup>& mounts, const std::string& controller,
                      const std::string& cgroup_path) {
  for (const auto& m : mounts) {
    if (m.v2 ||
        std::find(m.controllers.begin(), m.controllers.end(), controller) == m.controllers.end()) {
      continue;
    }
    std::string rel = cgroup_path;
    if (m.root != "/" && rel.compare(0, m.root.size(), m.root) == 0)
      rel = rel.substr(m.root.size());
    return m.mount_point + (rel == "/" ? "" : rel);
  }
  return "";
}

TEST(CgroupReal, V1CreateAttachUsageRemove) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups on the host";
  CgroupHostOptions options;
  options.force_mode = CgroupMode::kV1;
  auto manager = CgroupManager::Detect(options);
  if (manager->mode() != CgroupMode::kV1) {
    GTEST_SKIP() << "no cgroup v1 memory+pids+cpu on this host: " << manager->reason();
  }
  CgroupFs real;
  auto mounts = ParseCgroupMounts(*real.ReadFile("/proc/self/mountinfo"));
  auto own = ParseProcCgroup(*real.ReadFile("/proc/self/cgroup"));
  // The "kiln" parents this test creates are removed again at the end.
  std::vector<std::string> new_parents;
  for (const auto& controller : manager->controllers()) {
    for (const auto& [c, path] : own) {
      if (c != controller) continue;
      std::string parent = RealDirOf(mounts, c, path) + "/kiln";
      if (!fs::exists(parent)) new_parents.push_back(parent);
    }
  }
  struct RemoveParents {
    std::vector<std::string>& dirs;
    ~RemoveParents() {
      for (const auto& d : dirs) ::rmdir(d.c_str());  // fails harmlessly if someone else uses it
    }
  } remove_parents{new_parents};

  std::string name = "kiln-test-" + std::to_string(::getpid());
  CgroupLimits limits;
  limits.memory_bytes = 256ull << 20;
  limits.pids = 32;
  limits.cpus = 0.5;
  limits.io.read_bps = 10ull << 20;
  limits.io_devices = ScanIoDevices({"/usr"}).devices;
  auto cg = manager->Create(name, limits);
  ASSERT_TRUE(cg.ok()) << cg.error().ToString();
  SleepingChild child;
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE((*cg)->Attach(child.pid()).ok());

  // Independent check: the kernel's view of the child's cgroups.
  auto child_cgroups =
      ParseProcCgroup(*real.ReadFile("/proc/" + std::to_string(child.pid()) + "/cgroup"));
  std::vector<std::string> dirs;
  for (const auto& [c, path] : child_cgroups) {
    const auto& used = manager->controllers();
    if (std::find(used.begin(), used.end(), c) == used.end()) continue;
    EXPECT_TRUE(path.size() > name.size() &&
                path.substr(path.size() - name.size() - 6) == "/kiln/" + name)
        << c << ":" << path;
    dirs.push_back(RealDirOf(mounts, c, path));
  }
  ASSERT_EQ(dirs.size(), manager->controllers().size());
  std::string memory_dir;
  for (const auto& [c, path] : child_cgroups) {
    if (c == "memory") memory_dir = RealDirOf(mounts, c, path);
  }
  ASSERT_FALSE(memory_dir.empty());
  EXPECT_TRUE(Contains(*real.ReadFile(memory_dir + "/cgroup.procs"), std::to_string(child.pid())));
  EXPECT_EQ(*real.ReadFile(memory_dir + "/memory.limit_in_bytes"), "268435456\n");
  // The kernel's own listing of the throttle rule, where blkio and a block
  // device behind /usr exist.
  for (const auto& [c, path] : child_cgroups) {
    if (c != "blkio" || !manager->io_support().available || limits.io_devices.empty()) continue;
    const BlockDevice& d = limits.io_devices[0];
    EXPECT_EQ(*real.ReadFile(RealDirOf(mounts, c, path) + "/blkio.throttle.read_bps_device"),
              std::to_string(d.major) + ":" + std::to_string(d.minor) + " 10485760\n");
    EXPECT_EQ((*cg)->io_note(), "io limits on " + ToString(d));
  }

  ASSERT_TRUE((*cg)->KillAll().ok());
  EXPECT_EQ(child.WaitSignal(), SIGKILL);
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  EXPECT_TRUE(usage->has_memory_peak);
  EXPECT_EQ(usage->oom_kills, 0u);
  const auto& used = manager->controllers();
  EXPECT_EQ(usage->has_cpu, std::find(used.begin(), used.end(), "cpuacct") != used.end());
  std::string description = (*cg)->Describe();
  auto removed = (*cg)->Remove();
  ASSERT_TRUE(removed.ok()) << removed.error().ToString();
  for (const auto& dir : dirs) EXPECT_FALSE(fs::exists(dir)) << dir;
  EXPECT_EQ((*cg)->Describe(), description);
}

}  // namespace
}  // namespace kiln::isolation
