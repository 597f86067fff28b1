// The spawner process (`kiln spawner`): started by `kiln serve`, it holds
// the warm pool's ready sandboxes and forks one supervisor per job
// (supervise_main.cc). Single-threaded.
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "base/log.h"
#include "spawner/job_channel.h"
#include "spawner/spawner.h"
#include "spawner/supervise_main.h"
#include "supervisor/gvisor.h"
#include "supervisor/host.h"
#include "sys/fd_passing.h"
#include "zygote/handoff.h"

namespace kiln::spawner {
namespace {

// The answer to an 'S' job (Spawner::PoolStatus, docs/protocol.md).
nlohmann::json PoolStatusJson(const std::optional<std::string>& no_pool, bool pool_running,
                              const std::map<std::string, zygote::PoolStatus>& reported,
                              const std::map<std::string, std::pair<uint64_t, uint64_t>>& takes,
                              const std::map<pid_t, std::string>& in_use,
                              const zygote::HandoffStock& stock) {
  nlohmann::json j = {{"type", "pool"},
                      {"enabled", !no_pool.has_value()},
                      {"running", pool_running},
                      {"reason", no_pool ? nlohmann::json(*no_pool) : nlohmann::json(nullptr)}};
  std::set<std::string> names;
  for (const auto& [name, s] : reported) names.insert(name);
  for (const auto& [name, t] : takes) names.insert(name);
  for (const auto& [pid, name] : in_use) names.insert(name);
  nlohmann::json profiles = nlohmann::json::object();
  for (const std::string& name : names) {
    const auto r = reported.find(name);
    const zygote::PoolStatus s = r != reported.end() ? r->second : zygote::PoolStatus{};
    const auto t = takes.find(name);
    uint64_t using_now = 0;
    for (const auto& [pid, profile] : in_use) using_now += profile == name ? 1 : 0;
    profiles[name] = {{"ready", stock.size(name)},
                      {"refilling", s.refilling},
                      {"in_use", using_now},
                      {"target", s.target},
                      {"zygote_ready", s.zygote_ready},
                      {"hits", t != takes.end() ? t->second.first : 0},
                      {"cold_fallbacks", t != takes.end() ? t->second.second : 0},
                      {"refills", s.refills},
                      {"refill_ms_total", s.refill_ms_total},
                      {"last_refill_ms", s.last_refill_ms},
                      {"failures", s.failures},
                      {"zygote_starts", s.zygote_starts}};
  }
  j["profiles"] = std::move(profiles);
  return j;
}

[[noreturn]] void SpawnerMain(int control, pid_t server, const config::Config& config,
                              const supervisor::HostContext& host) {
  // Dies with the server; everything below dies with us the same way.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() != server) ::_exit(0);
  ::prctl(PR_SET_NAME, "kiln-spawner", 0, 0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  // A service manager signals the whole process group or cgroup on stop; the
  // server orchestrates the drain, so the spawner and its supervisors ignore
  // SIGTERM and ^C (the sandbox resets every disposition: RunChild step C0).
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  // Nothing we fork may start with a blocked signal mask (the program's own
  // KeyboardInterrupt and SIGTERM handlers must work).
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The warm pool (docs/adr/0011-zygote.md): a process of its own does the
  // slow work and hands ready sandboxes over; they wait here, per profile.
  pid_t pool_pid = -1;
  UniqueFd pool_fd;
  zygote::HandoffStock stock;
  // The pool in plain sight ('S' jobs: Spawner::PoolStatus): what the pool
  // process last reported per profile, the executions that found a pooled
  // sandbox or none, and the supervisors that hold one now.
  std::map<std::string, zygote::PoolStatus> reported;
  std::map<std::string, std::pair<uint64_t, uint64_t>> takes;  // profile -> (hits, misses)
  std::map<pid_t, std::string> in_use;                         // supervisor -> profile
  // supervisor -> the cgroup of the pooled sandbox it adopted: named by the
  // pool process, not after the supervisor, so a dead supervisor's prefix
  // sweep below would miss it.
  std::map<pid_t, std::string> adopted_cgroups;
  const std::optional<std::string> no_pool = zygote::PoolUnavailableReason(config, host);
  auto start_pool = [&] {
    auto started = zygote::StartPoolProcess(config, host);
    if (!started.ok()) {
      KILN_LOG_WARN("warm pool: {}; executions start cold", started.error().ToString());
      return;
    }
    pool_pid = started->first;
    pool_fd = std::move(started->second);
  };
  if (no_pool) {
    KILN_LOG_INFO("warm pool off: {}", *no_pool);
  } else {
    start_pool();
  }
  for (;;) {
    pid_t exited;
    int status = 0;
    while ((exited = ::waitpid(-1, &status, WNOHANG)) > 0) {
      in_use.erase(exited);
      std::string adopted_cgroup;
      if (auto a = adopted_cgroups.find(exited); a != adopted_cgroups.end()) {
        adopted_cgroup = std::move(a->second);
        adopted_cgroups.erase(a);
      }
      if (exited != pool_pid &&
          (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)) &&
          host.cgroups != nullptr) {
        // A supervisor that died (killed, or crashed) left its sandbox's
        // cgroups behind: a cold sandbox's are named after it
        // ("sbx-<pid>-..."), an adopted pooled sandbox's as the pool named
        // it. Its sandbox died with it (a cold pid 1 by PDEATHSIG, a pooled
        // one when the setup channel hung up), and whatever is left is
        // killed.
        const std::string prefix = "sbx-" + std::to_string(exited) + "-";
        auto removed =
            host.cgroups->RemoveStale([&prefix, &adopted_cgroup](const std::string& name) {
              return name.rfind(prefix, 0) == 0 ||
                     (!adopted_cgroup.empty() && name == adopted_cgroup);
            });
        if (removed.ok() && *removed > 0) {
          KILN_LOG_WARN("a supervisor (pid {}) died; removed {} cgroup(s) it left", exited,
                        *removed);
        }
      }
      if (exited == pool_pid) {
        // Its sandboxes died with it (its zygotes' pid 1s have it as parent).
        KILN_LOG_WARN("warm pool: the pool process exited; restarting it");
        stock.Clear();
        reported.clear();
        pool_fd.Reset();
        pool_pid = -1;
        start_pool();
      }
    }
    pollfd pfds[2] = {{control, POLLIN, 0}, {pool_fd.get(), POLLIN, 0}};
    const int rc = ::poll(pfds, pool_fd ? 2 : 1, 200);
    if (rc < 0 && errno != EINTR) ::_exit(1);
    if (rc <= 0) continue;
    if (pool_fd && pfds[1].revents != 0) {
      for (;;) {
        auto from = zygote::ReceiveFromPool(pool_fd.get());
        if (!from.ok()) {
          if (from.error().code == Code::kUnavailable) {
            pool_fd.Reset();  // restarted when reaped
            break;
          }
          KILN_LOG_WARN("warm pool: {}", from.error().ToString());
          continue;
        }
        if (!from->has_value()) break;
        if ((*from)->handoff) stock.Add(std::move(*(*from)->handoff));
        if ((*from)->status) reported[(*from)->status->profile] = *(*from)->status;
      }
    }
    if (pfds[0].revents == 0) continue;
    // 'J': a job; 'P' + a profile name: a job that may take a pooled sandbox;
    // 'S': the pool's status, answered on the job's socket here.
    char tagbuf[72] = {};
    int job = -1;
    const sys::Received got = sys::ReceiveWithFds(control, tagbuf, sizeof tagbuf, &job, 1, 0);
    const ssize_t n = got.bytes;
    const char tag = n > 0 ? tagbuf[0] : 0;
    if (n == 0) ::_exit(0);  // the server is gone
    if (n < 0) ::_exit(1);
    if ((tag != 'J' && tag != 'P' && tag != 'S') || job < 0) {
      if (job >= 0) ::close(job);
      continue;
    }
    if (tag == 'S') {
      FramedChannel answer{UniqueFd(job), kMaxRequestBytes};
      (void)answer.Write(PoolStatusJson(no_pool, pool_fd.valid(), reported, takes, in_use, stock));
      continue;
    }
    std::optional<zygote::Handoff> pooled;
    std::string pooled_profile;
    if (tag == 'P' && n > 1) {
      const std::string profile(tagbuf + 1, strnlen(tagbuf + 1, static_cast<size_t>(n) - 1));
      pooled = stock.Take(profile);
      auto& [hits, misses] = takes[profile];
      ++(pooled ? hits : misses);
      if (pooled) pooled_profile = profile;
      if (pool_fd) {
        (void)zygote::SendArrival(pool_fd.get(), profile, pooled.has_value(),
                                  stock.consumed(profile));
      }
    }
    const pid_t self = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
      if (::getppid() != self) ::_exit(0);
      ::prctl(PR_SET_NAME, "kiln-supervise", 0, 0, 0);
      LimitOwnMemory();
      ::close(control);
      pool_fd.Reset();
      stock.Clear();  // only our own sandbox's fds stay open
      RunJob(job, host, std::move(pooled));
    }
    if (child > 0 && !pooled_profile.empty()) {
      in_use[child] = pooled_profile;
      adopted_cgroups[child] = pooled->cgroup_name;
    }
    ::close(job);
  }
}

}  // namespace

[[noreturn]] void RunSpawnerProcess(pid_t server) {
  // The configuration the server parsed, from fd 4.
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(4, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(4);
  auto config = config::ParseConfig(text, "the server's configuration");
  if (!config.ok()) {
    KILN_LOG_ERROR("spawner: {}", config.error().ToString());
    ::_exit(1);
  }
  auto host = supervisor::LoadHostContext();
  if (!host.ok()) {
    KILN_LOG_ERROR("spawner: {}", host.error().ToString());
    ::_exit(1);
  }
  // gVisor profiles: probe runsc once here, so that every supervisor (a fork)
  // inherits the answer (supervisor::ProbeGvisorHost).
  for (const auto& [name, profile] : config->profiles) {
    if (profile.backend == policy::Backend::kGvisor) {
      (void)supervisor::ProbeGvisorHost(*host);
      break;
    }
  }
  SpawnerMain(3, server, *config, *host);
}

}  // namespace kiln::spawner
