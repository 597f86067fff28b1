// The warm pool in `kiln serve` (docs/adr/0011-zygote.md, docs/architecture.md):
//
//   kiln serve --fork--> kiln-spawner --fork--> kiln-pool (zygotes, refills: Pool per profile)
//                             |  <-- Handoff (a ready sandbox's fds) --'
//                             `--fork--> kiln-supervise (adopts it: Sandbox::Adopt)
//
// The pool process does every slow step (zygote start, forks, cgroup creation
// and attach, checks) and hands each ready sandbox to the spawner at once; the
// spawner keeps them per profile and gives one to the supervisor it forks for
// an eligible execution, which inherits the fds: the request path takes no
// round trip to the pool. The spawner tells the pool of each arrival (hit or
// miss), from which the pool sizes itself (Erlang C).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "config/config.h"
#include "supervisor/host.h"
#include "supervisor/sandbox.h"

namespace kiln::zygote {

struct PooledChild;

// A ready sandbox away from its pool.
struct Handoff {
  std::string profile;
  std::string cgroup_name;
  supervisor::AdoptedSandbox sandbox;  // without its cgroup (Adopt makes it)
  bool alive() const;                  // its pid 1 still runs
};

// How one profile's pool stands, as the pool process sees it (the spawner
// adds what it holds and what it gave out: Spawner::PoolStatus).
struct PoolStatus {
  std::string profile;
  uint32_t refilling = 0;  // children being made
  uint32_t target = 0;     // ready + refilling the pool sizes itself to (Erlang C)
  bool zygote_ready = false;
  uint64_t refills = 0;        // children made ready and handed over, in all
  double refill_ms_total = 0;  // their times from fork request to ready, summed
  double last_refill_ms = 0;
  uint64_t failures = 0;  // children killed during setup or check, in all
  uint64_t zygote_starts = 0;
  bool operator==(const PoolStatus&) const = default;
};

// pool -> spawner: one record (with the six fds). The fds stay the caller's.
Status SendHandoff(int fd, const std::string& profile, const PooledChild& child);
// pool -> spawner: a status record (no fds), sent when it changed.
Status SendPoolStatus(int fd, const PoolStatus& status);
// What the pool process sent: exactly one of the two.
struct FromPool {
  std::optional<Handoff> handoff;
  std::optional<PoolStatus> status;
};
// Spawner side, non-blocking: a handoff or a status, nullopt when nothing is
// waiting; kUnavailable when the pool process is gone; kInternal for a
// malformed record (whatever fds came with it closed).
Result<std::optional<FromPool>> ReceiveFromPool(int fd);

// spawner -> pool: an execution of `profile` arrived; `hit`: it took a
// sandbox. `consumed`: how many of the profile's handoffs the spawner no
// longer holds, in all (taken, or found dead), so the pool knows its stock.
Status SendArrival(int fd, const std::string& profile, bool hit, uint64_t consumed);

// One arrival record, as the pool process reads it (`valid` false for a
// malformed one, which is skipped).
struct Arrival {
  bool valid = false;
  std::string profile;
  bool hit = false;
  uint64_t consumed = 0;
};
// Pool side, non-blocking: nullopt when nothing is waiting; kUnavailable at
// EOF (the spawner is gone).
Result<std::optional<Arrival>> ReceiveArrival(int fd);

// The driver of an adopted sandbox's cgroup, from its name.
Result<supervisor::AdoptedSandbox> Adopt(const supervisor::HostContext& host, Handoff&& h);

// Whether a profile has a warm pool: the pool is on, and for the profile,
// (native profiles: zygotes, pool.h; gVisor profiles: runsc sandboxes, gvisor_pool.h).
bool ProfilePooled(const config::Config& config, const config::Profile& profile);

// Whether an execution of limits `asked` may take a pooled sandbox made with
// `pooled` (its profile's default limits): every limit fixed when its zygote
// forked the sandbox (memory, cpus, pids, the tmpfs sizes, open files, I/O)
// is the same; the CPU-time backstop (RLIMIT_CPU) may only be lower. The rest
// (timeouts, output caps, files, import policy) is the supervisor's per
// execution. An execution with extra environment never fits (the caller's
// check: the zygote's environment is fixed).
bool PoolFits(const policy::Limits& asked, const policy::Limits& pooled);

// Forks the pool process (single-threaded callers; pool_process.cc). Returns its pid and the
// spawner's end of their socket. It dies with its parent.
Result<std::pair<pid_t, UniqueFd>> StartPoolProcess(const config::Config& config,
                                                    const supervisor::HostContext& host);

// Whether this host can have a pool at all (root and cgroups), and why not.
std::optional<std::string> PoolUnavailableReason(const config::Config& config,
                                                 const supervisor::HostContext& host);

// The spawner's stock of ready sandboxes, per profile.
class HandoffStock final {
 public:
  void Add(Handoff h);
  // The oldest live one of `profile` (dead ones are dropped).
  std::optional<Handoff> Take(const std::string& profile);
  // Handoffs of `profile` taken or dropped, in all.
  uint64_t consumed(const std::string& profile) const;
  void Clear() { stock_.clear(); }
  size_t size(const std::string& profile) const;

 private:
  std::map<std::string, std::deque<Handoff>> stock_;
  std::map<std::string, uint64_t> consumed_;
};

}  // namespace kiln::zygote
