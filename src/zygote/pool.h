// The warm pool of one profile: sandboxes forked from its zygote, set up,
// put into their own cgroups and checked, waiting for a program
// (docs/adr/0011-zygote.md, docs/setup-sequence.md "Pooled sandbox").
//
// Single-threaded: its owner calls Step() from a poll loop (or Take(), which
// steps until a sandbox is ready). Every slow step (the zygote's start,
// forks, cgroup creation, the v1 attach, the checks) happens on the refill
// path; TryTake() only pops a ready sandbox.
//
// A child's way through the pool:
//   requested (cgroup created, fds sent to the zygote)
//   -> 'A' from its pid 1: pidfd_open, attach to the cgroup, 'G'
//   -> 'D': its workspace fd
//   -> 'W' from its worker: every layer in place; Verify() from /proc
//   -> the runtime's hello is readable: ready
// Any failure (a child's F record, a hang-up, a failed check, a timeout)
// kills the child and restarts the zygote: a broken zygote never hands out a
// sandbox. A zygote that dies is restarted too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "isolation/cgroup.h"
#include "supervisor/host.h"
#include "supervisor/sandbox.h"
#include "zygote/sizing.h"
#include "zygote/zygote.h"

namespace kiln::zygote {

struct PoolOptions {
  explicit PoolOptions(ZygoteOptions z) : zygote(std::move(z)) {}
  ZygoteOptions zygote;
  size_t min = 1;                                  // ready-or-refilling sandboxes at the least
  size_t max = 16;                                 // ... and at the most
  double target_wait = 0.05;                       // Erlang C: P(a request finds no sandbox ready)
  std::chrono::milliseconds child_timeout{10000};  // request -> ready
  // Sandboxes being made at once, at the most (0: up to max). Each refill
  // costs a fork of the zygote and its teardown; more of them in flight than
  // there are cpus only compete with the executions and with each other.
  size_t max_refilling = 0;
};

// A ready sandbox, handed to its user with everything needed to drive it as
// the cold path does after the worker's 'W' (supervisor::RunOptions::adopt).
struct PooledChild {
  // Its pid 1 (not our child: poll, signal), setup and runtime channels,
  // capture pipes, workspace fd, cgroup, pids and host uid.
  supervisor::AdoptedSandbox sandbox;
  std::string cgroup_name;
  // Refill timings, ms from the fork request: pid 1 said 'A'; attached; 'W';
  // hello readable.
  double attach_request_ms = 0, attached_ms = 0, worker_ms = 0, ready_ms = 0;
  double attach_ms = 0;  // the cgroup attach itself
  std::chrono::steady_clock::time_point ready_at{};
};

struct PoolStats {
  uint64_t handed_out = 0;
  uint64_t misses = 0;  // TryTake found nothing ready
  uint64_t children_made = 0;
  uint64_t child_failures = 0;  // killed during setup or check
  uint64_t zygote_starts = 0;
  double last_zygote_start_ms = 0;
};

// What the pool process drives of one profile's pool, whichever backend
// makes its sandboxes: the native zygote's (Pool, below) or gVisor's
// (GvisorPool, gvisor_pool.h).
class WarmPool {
 public:
  virtual ~WarmPool() = default;
  // One round: handle what arrived on WatchFds() within `timeout_ms`, resize, refill.
  virtual void Step(int timeout_ms) = 0;
  // The next ready sandbox for the spawner's stock (not an arrival).
  virtual std::optional<PooledChild> TakeForHandoff() = 0;
  virtual void RecordArrival(bool took_one) = 0;
  // How many of its sandboxes wait in the spawner's stock.
  virtual void set_external_ready(size_t n) = 0;
  virtual std::vector<int> WatchFds() const = 0;
  virtual size_t refilling() const = 0;
  virtual size_t target() const = 0;
  // Whether it can make sandboxes now (the zygote is up; runsc runs).
  virtual bool starter_ready() const = 0;
  virtual const PoolStats& stats() const = 0;
};

class Pool final : public WarmPool {
 public:
  static Result<std::unique_ptr<Pool>> Create(const supervisor::HostContext& host,
                                              PoolOptions options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // One round: poll every fd of the pool for up to `timeout_ms`, handle what
  // arrived, restart a dead zygote, resize and refill.
  void Step(int timeout_ms) override;
  // A ready sandbox, or nullopt (counted as a miss). Counts an arrival.
  std::optional<PooledChild> TryTake();
  // Steps until a sandbox is ready (or `wait` passes: kDeadlineExceeded).
  Result<PooledChild> Take(std::chrono::milliseconds wait);
  // Steps until `n` sandboxes are ready (warm-up, tests, benchmarks).
  Status WaitReady(size_t n, std::chrono::milliseconds wait);

  // For a pool whose ready sandboxes wait elsewhere (the spawner's stock,
  // handoff.h): the next ready one without counting an arrival, and the
  // arrivals reported back. The stock counts towards the pool's size.
  std::optional<PooledChild> TakeForHandoff() override;
  void RecordArrival(bool took_one) override;
  void set_external_ready(size_t n) override { external_ready_ = n; }
  // Every fd Step() polls, for an owner that polls several pools at once.
  std::vector<int> WatchFds() const override;

  size_t ready() const { return ready_.size(); }
  size_t refilling() const override { return pending_.size(); }
  size_t target() const override { return target_; }
  bool starter_ready() const override { return zygote_ != nullptr && zygote_->ready(); }
  const PoolStats& stats() const override { return stats_; }
  const Zygote* zygote() const { return zygote_.get(); }
  // Pins the size (tests, benchmarks); 0 = Erlang C again.
  void set_fixed_target(size_t n) { fixed_target_ = n; }

 private:
  struct Pending;
  struct InUse {
    UniqueFd init_pidfd;
    unsigned slot;
  };
  Pool(const supervisor::HostContext& host, PoolOptions options);
  Status StartZygote();
  void RestartZygote(const std::string& why);
  Status Request();
  void OnSync(Pending& p);
  void Promote(size_t index);
  void Fail(const std::string& why);
  Status Verify(const Pending& p) const;
  void Resize();
  std::optional<unsigned> TakeSlot();
  void HandOut(const PooledChild& c, unsigned slot);

  const supervisor::HostContext& host_;
  PoolOptions options_;
  std::unique_ptr<Zygote> zygote_;
  std::vector<std::unique_ptr<Zygote>> retired_;
  std::deque<std::unique_ptr<Pending>> pending_;
  std::deque<std::pair<PooledChild, unsigned>> ready_;  // child, uid slot
  std::vector<InUse> in_use_;
  std::vector<bool> slot_used_;
  unsigned next_slot_ = 0;
  uint64_t serial_ = 0;
  size_t target_ = 0;
  size_t fixed_target_ = 0;
  size_t external_ready_ = 0;
  RateEstimator rate_;
  PoolStats stats_;
  std::chrono::steady_clock::time_point zygote_backoff_until_{};
};

}  // namespace kiln::zygote
