// The pool process's main (`kiln-pool`, forked by the spawner): a Pool per
// profile (src/zygote/pool.h), its refills, the handoffs of ready sandboxes to
// the spawner and the pool's status (docs/adr/0011-zygote.md). Everything in
// this file runs in that process except StartPoolProcess, the spawner's fork
// of it. The records it exchanges with the spawner are handoff.cc's.
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "base/log.h"
#include "sys/syscalls.h"
#include "zygote/gvisor_pool.h"
#include "zygote/handoff.h"
#include "zygote/pool.h"

namespace kiln::zygote {
namespace {

// The cpus this process may run on.
int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// The pool process: a Pool per profile (made at the first arrival of the
// profile, the default profile's at once), its refills, and the handoffs.
[[noreturn]] void PoolProcessMain(int spawner, pid_t parent, const config::Config& config,
                                  const supervisor::HostContext& host) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() != parent) ::_exit(0);
  ::prctl(PR_SET_NAME, "kiln-pool", 0, 0, 0);
  // Nothing of the spawner's but our socket and stdio (its control socket
  // to the server, a stock of sandboxes' fds after a restart).
  if (spawner > 3) (void)sys::CloseRange(3, static_cast<unsigned>(spawner) - 1, 0);
  (void)sys::CloseRange(static_cast<unsigned>(spawner) + 1, ~0U, 0);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  struct Entry {
    std::unique_ptr<WarmPool> pool;
    uint64_t sent = 0;
    double refill_ms_total = 0, last_refill_ms = 0;
    PoolStatus reported;  // what the spawner last got
    std::chrono::steady_clock::time_point reported_at{};
  };
  std::map<std::string, Entry> pools;
  auto ensure = [&](const std::string& name) -> Entry* {
    auto it = pools.find(name);
    if (it != pools.end()) return it->second.pool ? &it->second : nullptr;
    Entry& e = pools[name];
    auto profile = config.Find(name);
    if (!profile.ok() || !(*profile)->pool) return nullptr;
    auto b = config::PolicyFor(**profile, {});
    if (!b.ok()) return nullptr;
    if ((*profile)->backend == policy::Backend::kGvisor) {
      // runsc sandboxes launched ahead (gvisor_pool.h), the pool's preloads
      // and the profile's imported.
      std::vector<std::string> preload = config.pool.preload;
      for (const auto& m : (*profile)->preload) preload.push_back(m);
      b->Preload(preload);
      auto gpol = b->Build();
      if (!gpol.ok()) return nullptr;
      GvisorPoolOptions go{*gpol};
      go.profile = name;
      go.rlimit_cpu_s =
          policy::SessionCpuBudgetSeconds(config.server.session_max_lifetime_s, gpol->limits());
      go.min = static_cast<size_t>(config.pool.min);
      go.max = static_cast<size_t>(config.pool.max);
      go.target_wait = config.pool.target_wait;
      if (config.pool.max_refilling > 0)
        go.max_refilling = static_cast<size_t>(config.pool.max_refilling);
      auto made = GvisorPool::Create(host, std::move(go));
      if (!made.ok()) {
        KILN_LOG_WARN("pool {}: {}; its executions start cold", name, made.error().ToString());
        return nullptr;
      }
      e.pool = std::move(*made);
      return &e;
    }
    auto pol = b->Build();
    if (!pol.ok()) return nullptr;
    PoolOptions po{ZygoteOptions(*pol)};
    po.zygote.profile = name;
    po.zygote.preload = config.pool.preload;
    for (const auto& m : (*profile)->preload) po.zygote.preload.push_back(m);
    // Sessions take pooled sandboxes too: the longest one's cpu budget
    // (spawner/supervise_main.cc RunSession), lowered by each adopter to its own.
    po.zygote.rlimit_cpu_s =
        policy::SessionCpuBudgetSeconds(config.server.session_max_lifetime_s, pol->limits());
    po.min = static_cast<size_t>(config.pool.min);
    po.max = static_cast<size_t>(config.pool.max);
    po.target_wait = config.pool.target_wait;
    po.max_refilling = config.pool.max_refilling > 0
                           ? static_cast<size_t>(config.pool.max_refilling)
                           : static_cast<size_t>(std::max(1, UsableCpus()));
    po.zygote.nice = config.pool.refill_nice;
    auto created = Pool::Create(host, po);
    if (!created.ok()) {
      KILN_LOG_WARN("pool {}: {}; its executions start cold", name, created.error().ToString());
      return nullptr;
    }
    e.pool = std::move(*created);
    KILN_LOG_DEBUG("pool {}: zygote starting", name);
    return &e;
  };
  (void)ensure(config.server.default_profile);
  for (;;) {
    std::vector<pollfd> fds{{spawner, POLLIN, 0}};
    for (auto& [name, e] : pools) {
      if (!e.pool) continue;
      for (int fd : e.pool->WatchFds()) fds.push_back({fd, POLLIN, 0});
    }
    const int rc = ::poll(fds.data(), fds.size(), 100);
    if (rc < 0 && errno != EINTR) ::_exit(1);
    if (fds[0].revents != 0) {
      for (;;) {
        auto got = ReceiveArrival(spawner);
        if (!got.ok()) ::_exit(0);  // the spawner is gone
        if (!*got) break;
        const Arrival& r = **got;
        if (!r.valid) continue;
        Entry* e = ensure(r.profile);
        if (e == nullptr) continue;
        e->pool->RecordArrival(r.hit);
        e->pool->set_external_ready(e->sent > r.consumed ? e->sent - r.consumed : 0);
      }
    }
    for (auto& [name, e] : pools) {
      if (!e.pool) continue;
      e.pool->Step(0);
      const uint64_t sent_before = e.sent;
      while (auto c = e.pool->TakeForHandoff()) {
        Status sent = SendHandoff(spawner, name, *c);
        if (!sent.ok()) {
          KILN_LOG_WARN("pool {}: {}", name, sent.error().ToString());
          continue;  // the child dies with our copies
        }
        ++e.sent;
        e.refill_ms_total += c->ready_ms;
        e.last_refill_ms = c->ready_ms;
        // The cgroup is the supervisor's that takes the sandbox (or, unused,
        // removed at the next start as a stale one of ours).
        c->sandbox.cgroup->Disown();
      }
      // The status, when it changed: at once after a handoff (so that the
      // spawner never holds a sandbox its status does not count), else at
      // most every 250 ms.
      PoolStatus now;
      now.profile = name;
      now.refilling = static_cast<uint32_t>(e.pool->refilling());
      now.target = static_cast<uint32_t>(e.pool->target());
      now.zygote_ready = e.pool->starter_ready();
      now.refills = e.sent;
      now.refill_ms_total = e.refill_ms_total;
      now.last_refill_ms = e.last_refill_ms;
      now.failures = e.pool->stats().child_failures;
      now.zygote_starts = e.pool->stats().zygote_starts;
      const auto t = std::chrono::steady_clock::now();
      if (!(now == e.reported) &&
          (e.sent != sent_before || t - e.reported_at >= std::chrono::milliseconds(250)) &&
          SendPoolStatus(spawner, now).ok()) {
        e.reported = now;
        e.reported_at = t;
      }
    }
  }
}

}  // namespace

Result<std::pair<pid_t, UniqueFd>> StartPoolProcess(const config::Config& config,
                                                    const supervisor::HostContext& host) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
    return ErrnoError("socketpair for the pool process");
  }
  UniqueFd mine(sp[0]), theirs(sp[1]);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork the pool process");
  if (pid == 0) {
    mine.Reset();
    PoolProcessMain(theirs.Release(), parent, config, host);
  }
  return std::make_pair(pid, std::move(mine));
}

}  // namespace kiln::zygote
