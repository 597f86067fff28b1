// `kiln run --pool` (hidden): the program runs in a sandbox from a warm pool
// made for this one run (a zygote with the pool's preload list), so the
// escape and integration tiers can exercise the pool path through the same
// CLI (tests/CMakeLists.txt: the *_pool variants). And `kiln pool-bench`
// (hidden): the standalone measurements of bench/pool_bench.py.
#include "cli/pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <tuple>

#include "cli/commands.h"
#include "config/config.h"
#include "zygote/pool.h"

namespace kiln::cli {

std::vector<std::string> DefaultPoolPreload() {
  if (const char* env = std::getenv("KILN_POOL_PRELOAD"); env != nullptr) {
    std::vector<std::string> out;
    std::stringstream ss(env);
    std::string m;
    while (std::getline(ss, m, ',')) {
      if (!m.empty()) out.push_back(m);
    }
    return out;
  }
  return {"numpy", "pandas", "matplotlib"};
}

Result<supervisor::ExecutionResult> RunViaPool(const supervisor::HostContext& host,
                                               const policy::SandboxPolicy& policy,
                                               const supervisor::Program& program,
                                               supervisor::RunOptions options) {
  zygote::PoolOptions po{zygote::ZygoteOptions(policy)};
  po.zygote.profile = "run";
  po.zygote.preload = DefaultPoolPreload();
  for (const auto& m : policy.preload()) po.zygote.preload.push_back(m);
  po.min = 1;
  po.max = 1;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<zygote::Pool> pool, zygote::Pool::Create(host, po));
  KILN_ASSIGN_OR_RETURN(zygote::PooledChild child, pool->Take(std::chrono::seconds(60)));
  supervisor::AdoptedSandbox adopted = std::move(child.sandbox);
  options.adopt = &adopted;
  return supervisor::RunSandboxed(host, policy, program, options);
}

}  // namespace kiln::cli

// ---------------------------------------------------------------------------
// kiln pool-bench: the standalone figures of bench/pool_bench.py, measured
// side by side in this one process (docs in bench/README.md).

namespace kiln::cli {
namespace {

using BenchClock = std::chrono::steady_clock;

double MsBetween(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Private memory (USS) of a process: Private_Clean + Private_Dirty, bytes.
uint64_t Uss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  uint64_t total = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    uint64_t kb = 0;
    if ((ls >> key >> kb) && (key == "Private_Clean:" || key == "Private_Dirty:"))
      total += kb * 1024;
  }
  return total;
}

// Starts /usr/bin/python3 -c CODE with stdout to a pipe; returns pid and fd.
std::pair<pid_t, int> SpawnPython(const std::string& python, const std::string& code,
                                  bool discard_output = false) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {-1, -1};
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(discard_output ? null_fd : p[1], 1);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 2);
    char* const argv[] = {const_cast<char*>(python.c_str()), const_cast<char*>("-c"),
                          const_cast<char*>(code.c_str()), nullptr};
    ::execve(python.c_str(), argv, ::environ);
    ::_exit(127);
  }
  ::close(p[1]);
  return {pid, p[0]};
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// One bare interpreter run to its end: ms, and whether its stdout was `want`.
std::pair<double, bool> BareRun(const std::string& python, const std::string& code,
                                const std::string& want) {
  const auto t0 = BenchClock::now();
  auto [pid, fd] = SpawnPython(python, code);
  const std::string out = ReadAll(fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {MsBetween(t0, BenchClock::now()),
          out == want && WIFEXITED(status) && WEXITSTATUS(status) == 0};
}

nlohmann::json Summary(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - 1);
    return v[i];
  };
  double sum = 0;
  for (double x : v) sum += x;
  return {{"n", v.size()},
          {"p50", pct(0.5)},
          {"p90", pct(0.9)},
          {"p99", pct(0.99)},
          {"min", v.front()},
          {"max", v.back()},
          {"mean", sum / static_cast<double>(v.size())}};
}

struct BenchFlags {
  int runs = 100;
  int pandas_runs = 20;
  double seconds = 5;
  int concurrency = 8;
  int idle = 8;
  std::string profile = "default";
  std::string python = "/usr/bin/python3";
};

const char* kPandasCode =
    "import pandas as pd\n"
    "df = pd.DataFrame({'a': range(1000), 'b': [i * 0.5 for i in range(1000)]})\n"
    "d = df.describe()\n"
    "print(int(d.loc['count', 'a']))\n";

int DoPoolBench(const BenchFlags& f) {
  auto host = supervisor::LoadHostContext();
  if (!host.ok()) {
    std::cerr << "kiln pool-bench: " << host.error().ToString() << "\n";
    return kExitRefused;
  }
  (void)supervisor::EnsureFontCache(*host);
  auto profile = config::BuiltinConfig().Find(f.profile);
  if (!profile.ok()) return kExitUsage;
  auto builder = config::PolicyFor(**profile, {});
  if (!builder.ok()) return kExitUsage;
  auto policy = builder->Build();
  if (!policy.ok()) return kExitUsage;

  zygote::PoolOptions po{zygote::ZygoteOptions(*policy)};
  po.zygote.profile = f.profile;
  po.zygote.preload = DefaultPoolPreload();
  for (const auto& m : policy->preload()) po.zygote.preload.push_back(m);
  po.min = 2;
  po.max = 16;
  auto created = zygote::Pool::Create(*host, po);
  if (!created.ok()) {
    std::cerr << "kiln pool-bench: " << created.error().ToString() << "\n";
    return kExitRefused;
  }
  zygote::Pool& pool = **created;
  nlohmann::json out;
  out["preload"] = po.zygote.preload;
  {
    Status ready = pool.WaitReady(2, std::chrono::seconds(120));
    if (!ready.ok()) {
      std::cerr << "kiln pool-bench: " << ready.error().ToString() << "\n";
      return kExitRefused;
    }
  }
  out["zygote_start_ms"] = pool.stats().last_zygote_start_ms;
  bool broken = false;

  // One execution in a pooled sandbox, timed from the take to the result.
  // The pool refills between executions (in a server that is another process).
  std::vector<double> t_a, t_r, t_w, t_ready, t_attach;
  auto pooled_run = [&](const std::string& code, const std::string& want) -> double {
    pool.set_fixed_target(2);
    (void)pool.WaitReady(2, std::chrono::seconds(30));
    const auto t0 = BenchClock::now();
    auto child = pool.TryTake();
    if (!child) {
      broken = true;
      return 0;
    }
    t_a.push_back(child->attach_request_ms);
    t_attach.push_back(child->attach_ms);
    t_r.push_back(child->attached_ms);
    t_w.push_back(child->worker_ms);
    t_ready.push_back(child->ready_ms);
    supervisor::AdoptedSandbox a = std::move(child->sandbox);
    supervisor::RunOptions o;
    o.adopt = &a;
    auto r = supervisor::RunSandboxed(*host, *policy, {"<string>", code, {}}, o);
    const double ms = MsBetween(t0, BenchClock::now());
    if (!r.ok() || r->outcome != supervisor::Outcome::kOk || r->stdout_data != want) {
      broken = true;
      std::cerr << "kiln pool-bench: pooled run broken: "
                << (r.ok() ? r->reason + " " + r->stderr_data : r.error().ToString()) << "\n";
    }
    return ms;
  };
  // (a) print(1) and (b) pandas: pooled vs bare, interleaved.
  for (const auto& [name, code, want, runs] :
       {std::tuple<std::string, std::string, std::string, int>{"print", "print(1)\n", "1\n",
                                                               f.runs},
        {"pandas", kPandasCode, "1000\n", f.pandas_runs}}) {
    std::vector<double> pooled, bare;
    for (int i = 0; i < runs + 2; ++i) {
      const bool warm = i < 2;
      const double p = pooled_run(code, want);
      auto [b, ok] = BareRun(f.python, code, want);
      if (!ok) {
        broken = true;
        std::cerr << "kiln pool-bench: bare python broken\n";
      }
      if (!warm) {
        pooled.push_back(p);
        bare.push_back(b);
      }
    }
    out[name] = {{"pooled_ms", Summary(pooled)}, {"bare_ms", Summary(bare)}};
  }
  out["refill_ms"] = {{"fork_to_attach_request", Summary(t_a)},
                      {"attach", Summary(t_attach)},
                      {"fork_to_attached", Summary(t_r)},
                      {"fork_to_worker", Summary(t_w)},
                      {"fork_to_ready", Summary(t_ready)}};

  // (d) USS of idle pooled sandboxes vs a fresh interpreter with the same imports.
  {
    pool.set_fixed_target(static_cast<size_t>(f.idle));
    (void)pool.WaitReady(static_cast<size_t>(f.idle), std::chrono::seconds(60));
    const auto settle = BenchClock::now() + std::chrono::milliseconds(300);
    while (BenchClock::now() < settle) pool.Step(20);
    std::vector<zygote::PooledChild> idle;
    while (auto c = pool.TryTake()) idle.push_back(std::move(*c));
    std::vector<double> per_sandbox, per_init, per_worker;
    for (const auto& c : idle) {
      const uint64_t i = Uss(c.sandbox.init_pid), w = Uss(c.sandbox.worker_pid);
      per_init.push_back(static_cast<double>(i) / 1048576.0);
      per_worker.push_back(static_cast<double>(w) / 1048576.0);
      per_sandbox.push_back(static_cast<double>(i + w) / 1048576.0);
    }
    idle.clear();  // kills them (their cgroups go with them)
    std::string imports;
    for (const auto& m : po.zygote.preload) imports += "import " + m + "\n";
    if (std::find(po.zygote.preload.begin(), po.zygote.preload.end(), "matplotlib") !=
        po.zygote.preload.end()) {
      imports += "import matplotlib.pyplot\n";
    }
    std::vector<double> fresh;
    for (int i = 0; i < 3; ++i) {
      auto [pid, fd] = SpawnPython(
          f.python, imports + "import sys, time\nprint('ready', flush=True)\ntime.sleep(30)\n");
      char buf[16];
      (void)!::read(fd, buf, sizeof buf);
      fresh.push_back(static_cast<double>(Uss(pid)) / 1048576.0);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      ::close(fd);
    }
    out["uss_mib"] = {
        {"pooled_sandbox", Summary(per_sandbox)},
        {"pooled_init", Summary(per_init)},
        {"pooled_worker", Summary(per_worker)},
        {"fresh_interpreter", Summary(fresh)},
        {"zygote", static_cast<double>(Uss(pool.zygote()->zygote_pid())) / 1048576.0}};
  }

  // (c) Fresh sandboxes per second at concurrency C: one supervisor process
  // per execution (as the server's spawner forks them), pooled, then cold,
  // then bare interpreter starts for reference.
  auto throughput = [&](int mode) -> nlohmann::json {
    pool.set_fixed_target(0);  // Erlang C sizes it from here
    std::vector<pid_t> running;
    uint64_t done = 0, failed = 0;
    size_t max_target = 0;
    const auto t0 = BenchClock::now();
    const auto end = t0 + std::chrono::duration_cast<BenchClock::duration>(
                              std::chrono::duration<double>(f.seconds));
    auto reap = [&](bool block) {
      for (size_t i = 0; i < running.size();) {
        int status = 0;
        const pid_t r = ::waitpid(running[i], &status, block ? 0 : WNOHANG);
        if (r == running[i]) {
          (WIFEXITED(status) && WEXITSTATUS(status) == 0 ? done : failed) += 1;
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    };
    while (BenchClock::now() < end) {
      while (static_cast<int>(running.size()) < f.concurrency) {
        pid_t pid = -1;
        if (mode == 0) {
          auto c = pool.TryTake();
          if (!c) break;
          zygote::PooledChild child = std::move(*c);
          pid = ::fork();
          if (pid == 0) {
            supervisor::AdoptedSandbox a = std::move(child.sandbox);
            supervisor::RunOptions o;
            o.adopt = &a;
            auto r = supervisor::RunSandboxed(*host, *policy, {"<string>", "print(1)\n", {}}, o);
            ::_exit(r.ok() && r->outcome == supervisor::Outcome::kOk && r->stdout_data == "1\n"
                        ? 0
                        : 1);
          }
          if (child.sandbox.cgroup) child.sandbox.cgroup->Disown();  // the supervisor owns it
          child.sandbox.cgroup.reset();
        } else if (mode == 1) {
          pid = ::fork();
          if (pid == 0) {
            auto r = supervisor::RunSandboxed(*host, *policy, {"<string>", "print(1)\n", {}}, {});
            ::_exit(r.ok() && r->outcome == supervisor::Outcome::kOk && r->stdout_data == "1\n"
                        ? 0
                        : 1);
          }
        } else {
          auto [p, fd] = SpawnPython(f.python, "print(1)", true);
          ::close(fd);
          pid = p;
        }
        if (pid < 0) break;
        running.push_back(pid);
      }
      if (mode == 0) {
        pool.Step(1);
        max_target = std::max(max_target, pool.target());
      } else {
        ::usleep(500);
      }
      reap(false);
    }
    const double secs = std::chrono::duration<double>(BenchClock::now() - t0).count();
    reap(true);
    nlohmann::json j = {{"completed", done},
                        {"failed", failed},
                        {"seconds", secs},
                        {"per_second", static_cast<double>(done) / secs}};
    if (mode == 0) {
      j["pool_target_max"] = max_target;
      j["misses"] = pool.stats().misses;
    }
    if (failed > 0) broken = true;
    return j;
  };
  out["throughput"] = {{"concurrency", f.concurrency},
                       {"pooled", throughput(0)},
                       {"cold", throughput(1)},
                       {"bare_python", throughput(2)}};
  out["stats"] = {{"handed_out", pool.stats().handed_out},
                  {"children_made", pool.stats().children_made},
                  {"child_failures", pool.stats().child_failures},
                  {"zygote_starts", pool.stats().zygote_starts}};
  out["broken"] = broken;
  std::cout << out.dump(2) << "\n";
  return broken ? 1 : 0;
}

}  // namespace

void RegisterPoolBench(CLI::App& app, Action* action) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("pool-bench", "Measure the warm pool (bench/pool_bench.py)");
  cmd->group("");  // hidden
  cmd->add_option("--runs", flags->runs, "print(1) executions per candidate");
  cmd->add_option("--pandas-runs", flags->pandas_runs, "pandas executions per candidate");
  cmd->add_option("--seconds", flags->seconds, "Duration of each throughput run");
  cmd->add_option("--concurrency", flags->concurrency, "Executions in flight for throughput");
  cmd->add_option("--idle", flags->idle, "Idle pooled sandboxes for the memory figure");
  cmd->add_option("--profile", flags->profile, "Built-in profile");
  cmd->add_option("--python", flags->python, "Bare interpreter to compare with");
  cmd->callback([flags, action] { *action = [flags] { return DoPoolBench(*flags); }; });
}

}  // namespace kiln::cli
