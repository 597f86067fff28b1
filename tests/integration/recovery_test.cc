// Integration tier: every kind of kiln process can die under load and the
// node recovers by itself. The outside review killed the spawner (the
// server's one child) under load: every later request got 500 "hand the job
// to the spawner" while /readyz kept answering 200. Now a dead spawner is
// started again with backoff; meanwhile requests get 503 with Retry-After,
// /readyz answers 503, and nothing answers 500 or hangs.
//
// Killed here, one after the other, each by its pid (they are all this
// test's own descendants): the spawner, the pool process, a zygote, a
// session's supervisor, and pid 1 of a running sandbox. And, on its own, the
// supervisor of a running pooled execution: its sandbox and cgroups go too.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testlib/host_facts.h"
#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"
#include "testlib/procs.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;
using kiln_server_detail::WaitFor;

std::vector<ProcInfo> ChildrenOf(pid_t parent) { return ChildProcs(parent); }

// "hierarchy id" -> path, from /proc/PID/cgroup ("ID:CONTROLLERS:PATH" lines).
std::map<std::string, std::string> CgroupPaths(pid_t pid) {
  std::map<std::string, std::string> out;
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/cgroup").value_or(""));
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    out[line.substr(0, a)] = line.substr(b + 1);
  }
  return out;
}

// The host directories of the cgroups `pid` was moved into that `reference`
// (a kiln process that forked it, indirectly) is not in: the sandbox's own,
// in every hierarchy where it has one. Each listed `pid` in its cgroup.procs.
std::vector<std::string> OwnCgroupDirs(pid_t pid, pid_t reference) {
  const auto mine = CgroupPaths(pid), theirs = CgroupPaths(reference);
  std::vector<std::string> dirs;
  for (const auto& [id, path] : mine) {
    const auto t = theirs.find(id);
    if (t != theirs.end() && t->second == path) continue;
    for (const std::string& mount : HostCgroupMountPoints()) {
      const std::string dir = mount + path;
      std::istringstream procs(ReadFile(dir + "/cgroup.procs").value_or(""));
      for (std::string p; std::getline(procs, p);) {
        if (p == std::to_string(pid)) dirs.push_back(dir);
      }
    }
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  return dirs;
}

// The number of pid levels of `pid` (fields of NSpid in /proc/PID/status):
// 2 for a cold sandbox's process, 3 for a pooled one's (host, zygote, own).
size_t PidLevels(pid_t pid) {
  std::istringstream status(ReadFile("/proc/" + std::to_string(pid) + "/status").value_or(""));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    size_t n = 0;
    for (long v; fields >> v;) ++n;
    return n;
  }
  return 0;
}

// Whether one of `pid`'s fds is a pidfd of `target` (its fdinfo says "Pid:").
bool HoldsPidfdOf(pid_t pid, pid_t target) {
  std::error_code ec;
  const std::string want = "Pid:\t" + std::to_string(target) + "\n";
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fdinfo", ec)) {
    if (ReadFile(e.path().string()).value_or("").find(want) != std::string::npos) return true;
  }
  return false;
}

std::optional<pid_t> ChildNamed(pid_t parent, const std::string& comm) {
  const auto kids = ChildProcs(parent, comm);
  if (kids.empty()) return std::nullopt;
  return kids.front().pid;
}

// Two clients sending print(1) back to back, recording every answer.
class Load {
 public:
  Load(const KilnServer& server, std::string key) : server_(server), key_(std::move(key)) {
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  std::map<int, int> statuses() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_;
  }
  std::vector<std::string> problems() {
    std::lock_guard<std::mutex> lock(mu_);
    return problems_;
  }

 private:
  void Loop() {
    while (!stop_) {
      const HttpResponse r = server_.Execute(key_, {{"code", "print(1)"}}, 60s);
      std::lock_guard<std::mutex> lock(mu_);
      ++statuses_[r.status];
      if (r.status == 200) {
        if (Parse(r).value("stdout", "") != "1\n")
          problems_.push_back("200 without its output: " + r.Describe());
      } else if (r.status == 503) {
        if (!r.Header("Retry-After"))
          problems_.push_back("503 without Retry-After: " + r.Describe());
      } else {
        problems_.push_back(r.Describe());  // 500, or no answer in 60 s
      }
    }
  }

  const KilnServer& server_;
  std::string key_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<int, int> statuses_;
  std::vector<std::string> problems_;
  std::vector<std::thread> threads_;
};

class Recovery : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    WriteFile(dir_.path() + "/kiln.toml", R"TOML(
[server]
concurrency = 2
queue = 16
[tenants.default]
rate = 100000
burst = 100000
max_concurrent = 8
[pool]
max = 2
preload = ["numpy"]
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 30
memory = "256m"
)TOML");
    ASSERT_TRUE(server_.Start(dir_.path() + "/data", dir_.path() + "/kiln.toml", "recovery", &why_))
        << why_;
    key_ = Trim(server_.Stdout());
  }
  // Within 60 s: /readyz is 200 and an execution runs.
  ::testing::AssertionResult Recovered() {
    const bool ok = WaitFor(
        [&] {
          if (server_.Get("/readyz", 5s).status != 200) return false;
          const HttpResponse r = server_.Execute(key_, {{"code", "print('back')"}}, 30s);
          return r.status == 200 && Parse(r).value("stdout", "") == "back\n";
        },
        60s);
    if (ok) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "not recovered within 60 s; server log:\n"
                                         << server_.Stderr().substr(0, 6000);
  }
  HttpResponse Post(const std::string& path, const json& body) {
    return server_.Call("POST", path, {{"Authorization", "Bearer " + key_}}, body.dump(), 60s);
  }
  pid_t Spawner() { return ChildNamed(server_.pid(), "kiln-spawner").value_or(-1); }

  TempDir dir_;
  KilnServer server_;
  std::string key_, why_;
};

TEST_F(Recovery, EveryKindOfProcessKilledUnderLoad) {
  Load load(server_, key_);
  std::this_thread::sleep_for(1s);

  // 1. The spawner.
  const pid_t spawner = Spawner();
  ASSERT_GT(spawner, 0);
  ASSERT_EQ(::kill(spawner, SIGKILL), 0);
  EXPECT_TRUE(Recovered());
  const pid_t spawner2 = Spawner();
  EXPECT_GT(spawner2, 0);
  EXPECT_NE(spawner2, spawner);
  EXPECT_NE(server_.Stderr().find("restarting"), std::string::npos);

  const bool pool = ::geteuid() == 0 && !CgroupLimitsMissingReason().has_value();
  if (pool) {
    // 2. The pool process.
    auto pool_pid = ChildNamed(spawner2, "kiln-pool");
    const bool pool_up =
        WaitFor([&] { return (pool_pid = ChildNamed(spawner2, "kiln-pool")).has_value(); }, 30s);
    ASSERT_TRUE(pool_up) << "no kiln-pool under the spawner";
    ASSERT_EQ(::kill(*pool_pid, SIGKILL), 0);
    EXPECT_TRUE(Recovered());
    // 3. A zygote (its sandbox's pid 1, a child of the new pool process).
    std::optional<pid_t> zygote;
    const bool zygote_up = WaitFor(
        [&] {
          auto p = ChildNamed(spawner2, "kiln-pool");
          if (!p) return false;
          auto kids = ChildrenOf(*p);
          if (kids.empty()) return false;
          zygote = kids[0].pid;
          return true;
        },
        30s);
    ASSERT_TRUE(zygote_up) << "no zygote under the pool process";
    ASSERT_EQ(::kill(*zygote, SIGKILL), 0);
    EXPECT_TRUE(Recovered());
  }

  // 4. A session's supervisor: that session is gone (410), nothing else.
  const HttpResponse created = Post("/v1/sessions", json::object());
  ASSERT_EQ(created.status, 201) << created.Describe();
  const std::string id = Parse(created).value("id", "");
  ASSERT_EQ(Post("/v1/sessions/" + id + "/execute", {{"code", "x = 1"}}).status, 200);
  // The session's supervisor is the one still there 2 s later (the load's
  // one-shots take milliseconds each).
  auto supervisors = [&] {
    std::vector<pid_t> out;
    for (const auto& p : ChildrenOf(Spawner())) {
      if (p.comm == "kiln-supervise") out.push_back(p.pid);
    }
    return out;
  };
  const auto before = supervisors();
  std::this_thread::sleep_for(2s);
  std::optional<pid_t> session_supervisor;
  for (pid_t p : supervisors()) {
    if (std::find(before.begin(), before.end(), p) != before.end()) session_supervisor = p;
  }
  ASSERT_TRUE(session_supervisor.has_value()) << "no long-lived supervisor";
  ASSERT_EQ(::kill(*session_supervisor, SIGKILL), 0);
  EXPECT_TRUE(Recovered());
  const HttpResponse after = Post("/v1/sessions/" + id + "/execute", {{"code", "x"}});
  EXPECT_EQ(after.status, 410) << after.Describe();

  // The load's verdict: only answers, 200 or 503 with Retry-After.
  load.Stop();
  const auto statuses = load.statuses();
  std::string all;
  for (const auto& p : load.problems()) all += p + "\n";
  EXPECT_TRUE(load.problems().empty()) << all;
  EXPECT_GT(statuses.count(200) ? statuses.at(200) : 0, 0);
  for (const auto& [status, n] : statuses)
    std::cout << "load: status " << status << ": " << n << "\n";

  // 5. Pid 1 of a running sandbox (the only one now): its execution answers
  // with a status, not a 5xx.
  auto sleeper = std::async(std::launch::async, [this] {
    return Post("/v1/execute", {{"code", "import time; print('up', flush=True); time.sleep(10)"},
                                {"memory", "128m"}});
  });
  // pid 1 is a supervisor's child that has a child (the worker); a cgroup v1
  // warm-up helper has none. A one-shot of the load that is still being torn
  // down can look the same for a few milliseconds, so the sleeper's pid 1 is
  // the only one seen in every poll for a whole second (it sleeps for 10).
  std::optional<pid_t> init;
  std::map<pid_t, std::chrono::steady_clock::time_point> first_seen;
  const bool running = WaitFor(
      [&] {
        std::map<pid_t, std::chrono::steady_clock::time_point> seen;
        for (const auto& sup : ChildrenOf(Spawner())) {
          if (sup.comm != "kiln-supervise") continue;
          for (const auto& kid : ChildrenOf(sup.pid)) {
            if (ChildrenOf(kid.pid).empty()) continue;
            auto it = first_seen.find(kid.pid);
            seen[kid.pid] = it != first_seen.end() ? it->second : std::chrono::steady_clock::now();
          }
        }
        first_seen = seen;
        const auto now = std::chrono::steady_clock::now();
        if (seen.size() != 1 || now - seen.begin()->second < 1s) return false;
        init = seen.begin()->first;
        return true;
      },
      20s);
  ASSERT_TRUE(running) << "no sandbox pid 1 under a supervisor";
  ASSERT_EQ(::kill(*init, SIGKILL), 0);
  const HttpResponse killed = sleeper.get();
  EXPECT_EQ(killed.status, 200) << killed.Describe();
  EXPECT_NE(Parse(killed).value("status", "ok"), "ok") << killed.Describe();
  EXPECT_TRUE(Recovered());
}

// Runs `code` (which names its worker `marker` and then sleeps) in a pooled
// sandbox, SIGKILLs that sandbox's pid 1 from outside, and gives the answer.
HttpResponse KillPooledInitDuring(const KilnServer& server,
                                  const std::function<HttpResponse(const std::string&)>& post,
                                  const std::string& marker, const std::string& code) {
  const bool stocked = WaitFor(
      [&] {
        const json pool = Parse(server.Get("/readyz", 5s));
        const json* p = pool.is_object() ? &pool : nullptr;
        for (const char* k : {"pool", "profiles", "default"}) {
          p = p != nullptr && p->contains(k) && (*p)[k].is_object() ? &(*p)[k] : nullptr;
        }
        return p != nullptr && p->value("ready", 0) >= 1;
      },
      60s);
  EXPECT_TRUE(stocked) << "no pooled sandbox ready within 60 s";
  if (!stocked) return {};
  auto answer = std::async(std::launch::async, [&] { return post(code); });
  std::optional<ProcInfo> worker;
  const bool running = WaitFor(
      [&] {
        for (auto& p : AllProcs()) {
          if (p.comm == marker && p.state != 'Z') worker = p;
        }
        return worker.has_value();
      },
      30s);
  EXPECT_TRUE(running) << "the execution never showed up as " << marker;
  if (!running) return answer.get();
  EXPECT_EQ(PidLevels(worker->pid), 3u) << "not a pooled sandbox (NSpid of its worker)";
  EXPECT_EQ(::kill(worker->ppid, SIGKILL), 0);
  return answer.get();
}

TEST_F(Recovery, APooledSandboxKilledBeforeItsProgramReportedIsA503ToRetry) {
  // A pooled sandbox is killed from outside (here its pid 1; in the field
  // with its zygote or the pool process) before its program said anything:
  // no result to give, so the answer is to retry, as when a supervisor dies.
  // Its pid 1 is not the supervisor's child: nothing may claim its exit status.
  if (!HostIsRoot()) GTEST_SKIP() << "the warm pool needs root";
  if (auto no = CgroupLimitsMissingReason()) GTEST_SKIP() << "the warm pool needs cgroups: " << *no;
  const std::string marker = "kq-" + std::to_string(::getpid() % 100000);
  auto post = [this](const std::string& code) { return Post("/v1/execute", {{"code", code}}); };
  const HttpResponse silent =
      KillPooledInitDuring(server_, post, marker,
                           "import ctypes, time\nctypes.CDLL(None).prctl(15, b'" + marker +
                               "', 0, 0, 0)\ntime.sleep(30)\n");
  EXPECT_EQ(silent.status, 503) << silent.Describe();
  EXPECT_TRUE(silent.Header("Retry-After").has_value()) << silent.Describe();
  EXPECT_NE(silent.body.find("retry"), std::string::npos) << silent.Describe();
  EXPECT_TRUE(Recovered());

  // One that printed first did run: its answer is a result, not a retry.
  const HttpResponse spoke = KillPooledInitDuring(
      server_, post, marker,
      "import ctypes, time\nprint('up', flush=True)\nctypes.CDLL(None).prctl(15, b'" + marker +
          "', 0, 0, 0)\ntime.sleep(30)\n");
  ASSERT_EQ(spoke.status, 200) << spoke.Describe();
  const json r = Parse(spoke);
  EXPECT_EQ(r.value("stdout", ""), "up\n") << spoke.Describe();
  EXPECT_EQ(r.value("status", ""), "setup_error") << spoke.Describe();
  EXPECT_EQ(r.value("reason", ""),
            "the sandbox's pid 1 ended without reporting the program's status")
      << spoke.Describe();
  EXPECT_TRUE(Recovered());
}

TEST_F(Recovery, AKilledSupervisorTakesItsPooledSandboxAndCgroupsWithIt) {
  // A pooled sandbox's cgroups are named by the pool process, not after the
  // supervisor that adopts it, and its pid 1 is not the supervisor's child
  // (no parent-death signal): when that supervisor is SIGKILLed, its sandbox
  // must still die (pid 1 sees the setup channel hang up) and the spawner
  // must remove the cgroups it left, as it does a cold sandbox's.
  if (!HostIsRoot()) GTEST_SKIP() << "the warm pool needs root";
  if (auto no = CgroupLimitsMissingReason()) GTEST_SKIP() << "the warm pool needs cgroups: " << *no;
  const bool stocked = WaitFor(
      [&] {
        const json pool = Parse(server_.Get("/readyz", 5s));
        const json* p = pool.is_object() ? &pool : nullptr;
        for (const char* k : {"pool", "profiles", "default"}) {
          p = p != nullptr && p->contains(k) && (*p)[k].is_object() ? &(*p)[k] : nullptr;
        }
        return p != nullptr && p->value("ready", 0) >= 1;
      },
      60s);
  ASSERT_TRUE(stocked) << "no pooled sandbox ready within 60 s: "
                       << Parse(server_.Get("/readyz", 5s)).dump();
  const std::string marker = "ks-" + std::to_string(::getpid() % 100000);  // comm: <= 15 chars
  auto sleeper = std::async(std::launch::async, [this, &marker] {
    return Post("/v1/execute", {{"code",
                                 "import ctypes, time\n"
                                 "ctypes.CDLL(None).prctl(15, b'" +
                                     marker +
                                     "', 0, 0, 0)\n"
                                     "time.sleep(30)\n"}});
  });
  std::optional<ProcInfo> worker;
  const bool running = WaitFor(
      [&] {
        for (auto& p : AllProcs()) {
          if (p.comm == marker && p.state != 'Z') worker = p;
        }
        return worker.has_value();
      },
      30s);
  ASSERT_TRUE(running) << "the execution never showed up as " << marker;
  const pid_t init = worker->ppid;
  ASSERT_EQ(PidLevels(worker->pid), 3u) << "not a pooled sandbox (NSpid of its worker)";
  const std::vector<std::string> cgroups = OwnCgroupDirs(worker->pid, Spawner());
  ASSERT_FALSE(cgroups.empty()) << "the sandbox is in no cgroup of its own";
  std::optional<pid_t> supervisor;
  for (const auto& p : ChildrenOf(Spawner())) {
    if (p.comm == "kiln-supervise" && HoldsPidfdOf(p.pid, init)) supervisor = p.pid;
  }
  ASSERT_TRUE(supervisor.has_value()) << "no supervisor holds a pidfd of the sandbox's pid 1";
  // pidfds, so that a reused pid cannot pass for the sandbox's processes.
  const int init_fd = static_cast<int>(::syscall(SYS_pidfd_open, init, 0));
  const int worker_fd = static_cast<int>(::syscall(SYS_pidfd_open, worker->pid, 0));
  ASSERT_GE(init_fd, 0);
  ASSERT_GE(worker_fd, 0);

  ASSERT_EQ(::kill(*supervisor, SIGKILL), 0);
  auto exited = [](int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  };
  std::vector<std::string> left = cgroups;
  const bool gone = WaitFor(
      [&] {
        left.clear();
        for (const auto& d : cgroups) {
          std::error_code ec;
          if (std::filesystem::exists(d, ec)) left.push_back(d);
        }
        return exited(init_fd) && exited(worker_fd) && left.empty();
      },
      5s);
  std::string dirs;
  for (const auto& d : left) dirs += "  " + d + "\n";
  EXPECT_TRUE(exited(init_fd)) << "the sandbox's pid 1 outlived its supervisor";
  EXPECT_TRUE(exited(worker_fd)) << "the sandbox's worker outlived its supervisor";
  EXPECT_TRUE(left.empty()) << "cgroups left behind 5 s after the supervisor died:\n" << dirs;
  EXPECT_TRUE(gone);
  ::close(init_fd);
  ::close(worker_fd);
  const HttpResponse killed = sleeper.get();
  // It answers (whatever it says: its supervisor is gone), and does not hang.
  EXPECT_FALSE(killed.status == 200 && Parse(killed).value("status", "") == "ok")
      << killed.Describe();
  EXPECT_TRUE(Recovered());
}

}  // namespace
}  // namespace kiln::testing
