// The warm pool (src/zygote) from the inside: two pooled siblings are
// isolated from each other as two cold sandboxes are; the pool refills; a
// killed zygote is replaced. Needs root and cgroups (the pool does); skipped
// with the reason otherwise.
#include "cli/pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "config/config.h"
#include "supervisor/sandbox.h"
#include "testlib/host_facts.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"
#include "zygote/pool.h"

namespace kiln::testing {
namespace {

using namespace std::chrono_literals;

class PoolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The pool names its sandboxes' cgroups after its owner's pid; a `kiln
    // serve` starting meanwhile (another test) sweeps those of processes that
    // are not kiln's (serve.cc, IsStaleSandboxCgroup). This process owns a pool.
    ::prctl(PR_SET_NAME, "kiln-pool", 0, 0, 0);
    ::setenv("KILN_RUNTIME_DIR", (SourceDir() + "/runtime").c_str(), 0);
    auto h = supervisor::LoadHostContext();
    if (!h.ok()) {
      skip_ = "no host context: " + h.error().ToString();
      return;
    }
    host_ = new supervisor::HostContext(std::move(*h));
    if (::geteuid() != 0) skip_ = "the pool needs root";
    if (!host_->cgroups || host_->cgroups->mode() == isolation::CgroupMode::kNone) {
      skip_ = "the pool needs cgroups";
    }
    if (skip_.empty()) (void)supervisor::EnsureFontCache(*host_);
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    RequireSandbox();
    if (IsSkipped() || HasFatalFailure()) return;
    auto b = config::PolicyFor(**config::BuiltinConfig().Find("default"), {});
    ASSERT_TRUE(b.ok());
    auto p = b->Build();
    ASSERT_TRUE(p.ok());
    policy_.emplace(std::move(*p));
    zygote::PoolOptions po{zygote::ZygoteOptions(*policy_)};
    po.zygote.profile = "test";
    po.zygote.preload = {"numpy"};
    po.min = 2;
    po.max = 4;
    po.zygote.nice = kRefillNice;
    auto pool = zygote::Pool::Create(*host_, po);
    ASSERT_TRUE(pool.ok()) << pool.error().ToString();
    pool_ = std::move(*pool);
    pool_->set_fixed_target(2);
    Status ready = pool_->WaitReady(2, 60s);
    ASSERT_TRUE(ready.ok()) << ready.error().ToString();
  }

  zygote::PooledChild Take() {
    auto c = pool_->Take(30s);
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    return std::move(*c);
  }

  supervisor::ExecutionResult Run(zygote::PooledChild child, const std::string& code) {
    supervisor::AdoptedSandbox a = std::move(child.sandbox);
    supervisor::RunOptions o;
    o.adopt = &a;
    auto r = supervisor::RunSandboxed(*host_, *policy_, {"<string>", code, {}}, o);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? std::move(*r) : supervisor::ExecutionResult{};
  }

  // Runs `code` in `child` in a forked process; Finish() returns its stdout.
  struct Background {
    pid_t pid = -1;
    int out = -1;
  };
  Background RunInBackground(zygote::PooledChild child, const std::string& code) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      supervisor::ExecutionResult r = Run(std::move(child), code);
      std::string s = std::string(supervisor::ToString(r.outcome)) + "\n" + r.stdout_data;
      if (r.outcome != supervisor::Outcome::kOk) s += "reason: " + r.reason + "\n" + r.stderr_data;
      (void)!::write(p[1], s.data(), s.size());
      ::_exit(0);
    }
    ::close(p[1]);
    // The child process owns the sandbox now: our copy of its cgroup object
    // must not remove (and empty) the cgroup when it goes.
    if (child.sandbox.cgroup) child.sandbox.cgroup->Disown();
    child.sandbox.cgroup.reset();
    return {pid, p[0]};
  }
  static std::string Finish(Background b) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(b.out, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(b.out);
    ::waitpid(b.pid, nullptr, 0);
    return out;
  }

  static constexpr int kRefillNice = 10;
  static inline supervisor::HostContext* host_ = nullptr;
  static inline std::string skip_;
  std::optional<policy::SandboxPolicy> policy_;
  std::unique_ptr<zygote::Pool> pool_;
};

std::string ReadProc(pid_t pid, const std::string& what) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + what);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string NsOf(pid_t pid, const char* ns) {
  char buf[64] = {};
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/" + ns;
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST_F(PoolTest, SiblingsHaveTheirOwnNamespacesUidsAndCgroups) {
  zygote::PooledChild a = Take();
  zygote::PooledChild b = Take();
  ASSERT_GT(a.sandbox.worker_pid, 0);
  ASSERT_GT(b.sandbox.worker_pid, 0);
  for (const char* ns : {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}) {
    EXPECT_NE(NsOf(a.sandbox.worker_pid, ns), NsOf(b.sandbox.worker_pid, ns)) << ns;
    EXPECT_FALSE(NsOf(a.sandbox.worker_pid, ns).empty()) << ns;
  }
  EXPECT_NE(a.sandbox.host_uid, b.sandbox.host_uid);
  EXPECT_NE(a.cgroup_name, b.cgroup_name);
  EXPECT_NE(ReadProc(a.sandbox.worker_pid, "cgroup"), ReadProc(b.sandbox.worker_pid, "cgroup"));
  EXPECT_NE(ReadProc(a.sandbox.worker_pid, "cgroup").find(a.cgroup_name), std::string::npos);
  EXPECT_NE(ReadProc(b.sandbox.worker_pid, "cgroup").find(b.cgroup_name), std::string::npos);
  // Every layer, seen from outside (the pool checked it too).
  const std::string st = ReadProc(a.sandbox.worker_pid, "status");
  EXPECT_NE(st.find("Seccomp:\t2"), std::string::npos) << st;
  EXPECT_NE(st.find("NoNewPrivs:\t1"), std::string::npos) << st;
  EXPECT_NE(st.find("CapEff:\t0000000000000000"), std::string::npos) << st;
  EXPECT_NE(st.find("CapBnd:\t0000000000000000"), std::string::npos) << st;
}

TEST_F(PoolTest, SiblingsCannotSeeOrSignalEachOther) {
  zygote::PooledChild a = Take();
  zygote::PooledChild b = Take();
  const pid_t b_worker = b.sandbox.worker_pid, b_init = b.sandbox.init_pid;
  const uid_t b_uid = b.sandbox.host_uid;
  int b_pidfd = ::fcntl(b.sandbox.init_pidfd.get(), F_DUPFD_CLOEXEC, 3);
  // A, with B alive and waiting: sees only its own processes, cannot signal
  // B's host pids (they do not exist in its pid namespace), cannot ptrace,
  // and kill(-1) reaches only its own namespace.
  const supervisor::ExecutionResult ra = Run(std::move(a), R"PY(
import os, signal, ctypes
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
for pid in ()PY" + std::to_string(b_worker) + ", " + std::to_string(b_init) +
                                                               R"PY():
    try:
        os.kill(pid, 0); print("signal ok")
    except OSError as e: print("signal", e.errno)
    print("proc", os.path.exists("/proc/%d" % pid))
libc = ctypes.CDLL(None, use_errno=True)
print("ptrace", libc.ptrace(16, )PY" + std::to_string(b_worker) +
                                                               R"PY(, 0, 0), ctypes.get_errno())
print("uid", os.getuid())
try:
    os.kill(-1, signal.SIGKILL)
except OSError as e: print("kill -1", e.errno)
)PY");
  EXPECT_EQ(ra.outcome, supervisor::Outcome::kOk) << ra.reason << ra.stderr_data;
  EXPECT_EQ(ra.stdout_data,
            "pids [2]\nsignal 3\nproc False\nsignal 3\nproc False\nptrace -1 1\nuid 1000\n"
            "kill -1 3\n")
      << ra.stderr_data;
  // B lived through it and runs normally, under its own uid.
  pollfd pfd{b_pidfd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0) << "A's kill(-1) reached B";
  ::close(b_pidfd);
  const std::string status = ReadProc(b_worker, "status");
  EXPECT_NE(status.find("Uid:\t" + std::to_string(b_uid)), std::string::npos) << status;
  const supervisor::ExecutionResult rb = Run(std::move(b), "print('b alive')");
  EXPECT_EQ(rb.stdout_data, "b alive\n");
}

TEST_F(PoolTest, SiblingsHaveSeparateTmpIpcAndAbstractSockets) {
  zygote::PooledChild a = Take();
  zygote::PooledChild b = Take();
  // A runs while B looks: its /tmp file, its abstract socket and its SysV
  // shared memory are invisible to B. A says it is ready with its last file,
  // which this test (root) sees through /proc/PID/root, and lives until the
  // test sends it SIGUSR1, so B really runs beside it however slow the host.
  const pid_t a_worker = a.sandbox.worker_pid;
  const std::string a_root = "/proc/" + std::to_string(a_worker) + "/root";
  Background ba = RunInBackground(std::move(a), R"PY(
import os, signal, socket, threading
go = threading.Event()
signal.signal(signal.SIGUSR1, lambda *_: go.set())
open("/tmp/from-a", "w").write("a")
open("/workspace/from-a", "w").write("a")
s = socket.socket(socket.AF_UNIX); s.bind("\0kiln-pool-test"); s.listen()
open("/dev/shm/from-a", "w").write("a")
go.wait(120)
print("a done", sorted(os.listdir("/tmp")))
)PY");
  struct Go {   // lets A end, also when an assertion below returns early
    int pidfd;  // A's worker, so a later signal cannot reach a reused pid
    void Send() const { ::syscall(SYS_pidfd_send_signal, pidfd, SIGUSR1, nullptr, 0); }
    ~Go() {
      Send();
      ::close(pidfd);
    }
  } go{static_cast<int>(::syscall(SYS_pidfd_open, a_worker, 0))};
  ASSERT_GE(go.pidfd, 0);
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(a_root + "/dev/shm/from-a"); }, 60s))
      << "A never made its files";
  const supervisor::ExecutionResult rb = Run(std::move(b), R"PY(
import os, socket
print(sorted(os.listdir("/tmp")), os.listdir("/workspace"), os.listdir("/dev/shm"))
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0kiln-pool-test"); print("connected")
except OSError as e: print("connect", e.errno)
)PY");
  EXPECT_EQ(rb.outcome, supervisor::Outcome::kOk) << rb.reason << "\n" << rb.stderr_data;
  EXPECT_EQ(rb.stdout_data, "['matplotlib'] [] []\nconnect 111\n") << rb.stderr_data;
  EXPECT_TRUE(std::filesystem::exists(a_root + "/dev/shm/from-a")) << "A ended before B had looked";
  go.Send();
  EXPECT_EQ(Finish(ba), "ok\na done ['from-a', 'matplotlib']\n");
}

TEST_F(PoolTest, MountinfoNamesNoHostId) {
  // Each child's /dev/shm, /tmp and /workspace are made by the pool (the
  // host's root) and the jail's by the pool too, so no tmpfs line prints a
  // host uid or gid (docs/adr/0017); the child still owns its workspace, and
  // the zygote keeps no child's tmpfs open.
  zygote::PooledChild a = Take();
  const supervisor::ExecutionResult r = Run(std::move(a), R"PY(
import os
print(open("/proc/self/mountinfo").read(), end="")
st = os.stat("/workspace")
print("workspace", st.st_uid, st.st_gid, oct(st.st_mode & 0o7777))
open("/workspace/w", "w").write("x")
open("/tmp/t", "w").write("x")
open("/dev/shm/s", "w").write("x")
print("wrote", os.stat("/workspace/w").st_uid, os.listdir("/proc/sys"))
)PY");
  ASSERT_EQ(r.outcome, supervisor::Outcome::kOk) << r.reason << "\n" << r.stderr_data;
  int tmpfs = 0;
  std::istringstream in(r.stdout_data);
  for (std::string line; std::getline(in, line);) {
    if (line.find(" - tmpfs ") != std::string::npos) ++tmpfs;
    // The super options (after " - TYPE SOURCE "): no uid=/gid= option
    // (an ext4's resuid= is the host filesystem's own, not the sandbox's).
    std::istringstream fields(line.substr(line.find(" - ") + 3));
    std::string type, source, options;
    fields >> type >> source >> options;
    std::istringstream opts(options);
    for (std::string o; std::getline(opts, o, ',');) {
      EXPECT_NE(o.rfind("uid=", 0), 0u) << "a mount names a host uid: " << line;
      EXPECT_NE(o.rfind("gid=", 0), 0u) << "a mount names a host gid: " << line;
    }
  }
  EXPECT_GE(tmpfs, 8) << r.stdout_data;  // the jail's five, the child's three
  EXPECT_NE(r.stdout_data.find("workspace 1000 1000 0o755\n"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("wrote 1000 []\n"), std::string::npos) << r.stdout_data;
  // The zygote holds no child's tmpfs once the child has its copy (a refill
  // in flight may hold one for a moment: wait for a quiet instant).
  ASSERT_NE(pool_->zygote(), nullptr);
  const pid_t zygote = pool_->zygote()->zygote_pid();
  ASSERT_GT(zygote, 0);
  auto tmpfs_dirs_held = [&] {
    int held = 0;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(zygote) + "/fd", ec)) {
      struct stat st {};
      struct statfs sf {};
      if (::stat(e.path().c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
          ::statfs(e.path().c_str(), &sf) == 0 && sf.f_type == TMPFS_MAGIC) {
        ++held;
      }
    }
    return held;
  };
  EXPECT_TRUE(WaitFor([&] { return tmpfs_dirs_held() == 0; }, 10s))
      << tmpfs_dirs_held() << " tmpfs directories held by the zygote";
}

TEST_F(PoolTest, RandomStreamsDiffer) {
  KILN_REQUIRE_PYTHON_MODULES("numpy");
  const std::string code =
      "import random, numpy\nprint(random.getrandbits(64), numpy.random.randint(1 << 62), "
      "hash(1))\n";
  const supervisor::ExecutionResult a = Run(Take(), code);
  const supervisor::ExecutionResult b = Run(Take(), code);
  ASSERT_EQ(a.outcome, supervisor::Outcome::kOk) << a.stderr_data;
  ASSERT_EQ(b.outcome, supervisor::Outcome::kOk) << b.stderr_data;
  EXPECT_NE(a.stdout_data, b.stdout_data);
  std::istringstream sa(a.stdout_data), sb(b.stdout_data);
  std::string ra, rb, na, nb;
  sa >> ra >> na;
  sb >> rb >> nb;
  EXPECT_NE(ra, rb) << "random";
  EXPECT_NE(na, nb) << "numpy.random";
}

// The nice value of `pid` (/proc/PID/stat, field 19), or -100 if unreadable.
int NiceOf(pid_t pid) {
  const std::string stat = ReadProc(pid, "stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -100;
  std::istringstream fields(stat.substr(paren + 2));
  std::string f;
  for (int i = 3; i <= 19 && (fields >> f); ++i) {
    if (i == 19) return std::stoi(f);
  }
  return -100;
}

TEST_F(PoolTest, RefillsRunBelowExecutionsATakenSandboxDoesNot) {
  zygote::PooledChild c = Take();
  // Made at the zygote's nice value, every process of it...
  EXPECT_EQ(NiceOf(pool_->zygote()->zygote_pid()), kRefillNice);
  EXPECT_EQ(NiceOf(c.sandbox.init_pid), kRefillNice);
  EXPECT_EQ(NiceOf(c.sandbox.worker_pid), kRefillNice);
  // ... and at 0 once a supervisor has adopted it, before the program's first line.
  const supervisor::ExecutionResult r =
      Run(std::move(c), "import os\nprint(os.nice(0), os.getpriority(os.PRIO_PROCESS, 1))");
  EXPECT_EQ(r.stdout_data, "0 0\n") << r.stderr_data;
}

TEST_F(PoolTest, ASingleThreadedZygoteSharesItsMemoryWithEachChildsFirstProcess) {
  // One profile cpu: numpy's BLAS starts no thread, the zygote has one, and
  // each child's first process is a clone(CLONE_VM) of it, not a fork: the
  // worker is the sandbox's only copy of the zygote.
  ASSERT_NE(pool_->zygote(), nullptr);
  EXPECT_TRUE(pool_->zygote()->spawns());
  EXPECT_EQ(ReadProc(pool_->zygote()->zygote_pid(), "status").find("\nThreads:\t1\n") !=
                std::string::npos,
            true);
  // Its children work, again and again (the zygote's memory survives them).
  for (int i = 0; i < 6; ++i) {
    const supervisor::ExecutionResult r =
        Run(Take(), "import numpy, random\nprint(numpy.arange(3).sum(), random.random() < 1)");
    EXPECT_EQ(r.stdout_data, "3 True\n") << r.reason << r.stderr_data;
  }
  EXPECT_EQ(pool_->stats().child_failures, 0u);
  EXPECT_EQ(pool_->stats().zygote_starts, 1u);
}

TEST_F(PoolTest, RefillsAfterUse) {
  const uint64_t made = pool_->stats().children_made;
  (void)Run(Take(), "pass");
  (void)Run(Take(), "pass");
  Status ready = pool_->WaitReady(2, 30s);
  ASSERT_TRUE(ready.ok()) << ready.error().ToString();
  EXPECT_GE(pool_->stats().children_made, made + 2);
  EXPECT_EQ(pool_->stats().child_failures, 0u);
}

TEST_F(PoolTest, KilledZygoteIsReplaced) {
  const pid_t old = pool_->zygote()->zygote_pid();
  ASSERT_GT(old, 0);
  ASSERT_EQ(::kill(old, SIGKILL), 0);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline &&
         (pool_->stats().zygote_starts < 2 || pool_->zygote() == nullptr ||
          !pool_->zygote()->ready() || pool_->ready() < 1)) {
    pool_->Step(50);
  }
  ASSERT_NE(pool_->zygote(), nullptr);
  EXPECT_EQ(pool_->stats().zygote_starts, 2u);
  EXPECT_NE(pool_->zygote()->zygote_pid(), old);
  ASSERT_GE(pool_->ready(), 1u);
  const supervisor::ExecutionResult r = Run(Take(), "print('new zygote')");
  EXPECT_EQ(r.stdout_data, "new zygote\n");
}

TEST_F(PoolTest, AdoptedSandboxGetsInputFilesAsItsOwn) {
  auto b = config::PolicyFor(**config::BuiltinConfig().Find("default"), {});
  ASSERT_TRUE(b.ok());
  b->AddFileContent("data/in.txt", "hello");
  auto p = b->Build();
  ASSERT_TRUE(p.ok());
  supervisor::AdoptedSandbox a = Take().sandbox;
  supervisor::RunOptions o;
  o.adopt = &a;
  auto r = supervisor::RunSandboxed(
      *host_, *p,
      {"<string>",
       "import os\nprint(open('data/in.txt').read(), os.stat('data/in.txt').st_uid)\n"
       "open('data/in.txt', 'a').write('!')\n",
       {}},
      o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "hello 1000\n") << r->stderr_data;
}

TEST_F(PoolTest, BrokenZygoteHandsOutNothing) {
  // A zygote whose children fail a step (here: RLIMIT_NOFILE above the hard
  // limit the zygote inherited) is killed and restarted, again and again, and
  // never hands out a sandbox. In a child process, whose hard limit may drop
  // for good.
  pool_.reset();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit low{256, 256};  // below the policy's open_files (1024)
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) ::_exit(10);
    zygote::PoolOptions po{zygote::ZygoteOptions(*policy_)};
    po.zygote.profile = "broken";
    po.min = 1;
    po.max = 1;
    auto pool = zygote::Pool::Create(*host_, po);
    if (!pool.ok()) ::_exit(11);
    // Ends as soon as two children have failed; the bound is for a broken pool.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline && (*pool)->stats().child_failures < 2) {
      (*pool)->Step(50);
    }
    int code = 0;
    if ((*pool)->stats().child_failures < 2) code |= 1;
    if ((*pool)->stats().zygote_starts < 2) code |= 2;
    if ((*pool)->ready() != 0 || (*pool)->TryTake().has_value()) code |= 4;
    if ((*pool)->stats().handed_out != 0) code |= 8;
    pool->reset();
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  // 1: no child failed; 2: the zygote was not restarted; 4, 8: a sandbox was handed out.
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Through `kiln serve`: an eligible request runs in a pooled sandbox (its
// result has no clone or uid-map phase: nothing was cloned for it), one with
// other limits starts cold, and `[pool] enabled = false` turns the pool off.
class PoolServer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the pool needs root";
    RequireSandbox();
  }

  // The phases of one print(1) (asserting it ran).
  static nlohmann::json Phases(const KilnServer& server, const std::string& key,
                               const nlohmann::json& body) {
    const HttpResponse r = server.Execute(key, body, 60s);
    EXPECT_EQ(r.status, 200) << r.Describe();
    const auto j = nlohmann::json::parse(r.body, nullptr, false);
    EXPECT_EQ(j.value("status", ""), "ok") << r.Describe();
    EXPECT_EQ(j.value("stdout", ""), "1\n") << r.Describe();
    return j.is_object() ? j.value("phases_ms", nlohmann::json::object()) : nlohmann::json();
  }
  static bool Pooled(const nlohmann::json& phases) {
    return phases.value("clone", -1.0) == 0.0 && phases.value("maps", -1.0) == 0.0;
  }

  std::string Config(bool enabled) {
    const std::string path = dir_.path() + (enabled ? "/on.toml" : "/off.toml");
    WriteFile(path, std::string(R"TOML(
[server]
concurrency = 2
[tenants.default]
rate = 1000
burst = 1000
[pool]
max = 2
preload = ["numpy"]
enabled = )TOML") + (enabled ? "true" : "false") +
                        R"TOML(
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 30
memory = "256m"
)TOML");
    return path;
  }

  TempDir dir_;
};

TEST_F(PoolServer, EligibleRequestsArePooledOthersCold) {
  KilnServer server;
  std::string why;
  ASSERT_TRUE(server.Start(dir_.path() + "/data", Config(true), "on", &why)) << why;
  std::string key = server.Stdout();
  while (!key.empty() && (key.back() == '\n' || key.back() == ' ')) key.pop_back();
  const nlohmann::json print1 = {{"code", "print(1)"}};
  bool pooled = false;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!pooled && std::chrono::steady_clock::now() < deadline) {
    pooled = Pooled(Phases(server, key, print1));
    if (!pooled) std::this_thread::sleep_for(200ms);  // the zygote is starting
  }
  EXPECT_TRUE(pooled) << "no execution took a pooled sandbox within 60 s; server log:\n"
                      << server.Stderr().substr(0, 4000);
  // Other limits than the profile's defaults: cold.
  EXPECT_FALSE(Pooled(Phases(server, key, {{"code", "print(1)"}, {"memory", "128m"}})));
}

TEST_F(PoolServer, TheSwitchTurnsItOff) {
  KilnServer server;
  std::string why;
  ASSERT_TRUE(server.Start(dir_.path() + "/data", Config(false), "off", &why)) << why;
  std::string key = server.Stdout();
  while (!key.empty() && (key.back() == '\n' || key.back() == ' ')) key.pop_back();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(Pooled(Phases(server, key, {{"code", "print(1)"}})));
    std::this_thread::sleep_for(300ms);
  }
  EXPECT_NE(server.Stderr().find("warm pool off"), std::string::npos) << server.Stderr();
}

}  // namespace
}  // namespace kiln::testing
