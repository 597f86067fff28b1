// The warm pool of a gVisor profile (backend = "gvisor", docs/adr/0021):
// runsc sandboxes launched ahead, their interpreter started and the preloads
// imported, waiting for their first job, handed to the spawner as the native
// pool's are (handoff.h) and adopted by a supervisor (Sandbox::Adopt).
//
// There is no zygote to fork from: every sandbox is a whole `runsc run`
// (supervisor::LaunchGvisor, the cold path's own launch), so a refill costs
// what a cold gVisor start costs, off the request path. Its keeper (runsc's
// parent, which reports runsc's wait status on its control socket) is this
// process's child: the pool reaps it after the sandbox was handed out.
//
// Single-threaded, driven from the pool process's poll loop (pool_process.cc).
// A launch blocks while the helper builds the root (tens of ms); runsc's own
// start then runs beside the loop, and the sandbox is ready when the
// runtime's hello is readable.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"
#include "supervisor/gvisor.h"
#include "supervisor/host.h"
#include "zygote/pool.h"
#include "zygote/sizing.h"

namespace kiln::zygote {

struct GvisorPoolOptions {
  explicit GvisorPoolOptions(policy::SandboxPolicy p) : policy(std::move(p)) {}
  policy::SandboxPolicy policy;  // the profile's, its preloads included
  std::string profile;
  double rlimit_cpu_s = 30;  // the Sentry's RLIMIT_CPU: the longest session's budget
  size_t min = 1;
  size_t max = 16;
  double target_wait = 0.05;
  // runsc starts at once, at the most: each costs a cold gVisor start's CPU.
  size_t max_refilling = 1;
  std::chrono::milliseconds child_timeout{30000};  // launch -> hello
};

class GvisorPool final : public WarmPool {
 public:
  // kFailedPrecondition when this host cannot run the gVisor backend (why).
  static Result<std::unique_ptr<GvisorPool>> Create(const supervisor::HostContext& host,
                                                    GvisorPoolOptions options);
  ~GvisorPool() override;
  GvisorPool(const GvisorPool&) = delete;
  GvisorPool& operator=(const GvisorPool&) = delete;

  void Step(int timeout_ms) override;
  std::optional<PooledChild> TakeForHandoff() override;
  void RecordArrival(bool took_one) override;
  void set_external_ready(size_t n) override { external_ready_ = n; }
  std::vector<int> WatchFds() const override;
  size_t refilling() const override { return pending_.size(); }
  size_t target() const override { return target_; }
  bool starter_ready() const override { return true; }
  const PoolStats& stats() const override { return stats_; }
  size_t ready() const { return ready_.size(); }
  void set_fixed_target(size_t n) { fixed_target_ = n; }

 private:
  struct Child {
    supervisor::GvisorLaunch launch;
    std::chrono::steady_clock::time_point requested{}, ready_at{};
  };
  GvisorPool(const supervisor::HostContext& host, GvisorPoolOptions options)
      : host_(host), options_(std::move(options)) {}
  void Launch();
  void Discard(Child& c, bool failed, const std::string& why);
  void ReapKeepers();
  void Resize();
  PooledChild ToPooled(Child& c);

  const supervisor::HostContext& host_;
  GvisorPoolOptions options_;
  std::deque<Child> pending_, ready_;
  std::vector<pid_t> keepers_;  // handed out or discarded, not yet reaped
  size_t target_ = 0;
  size_t fixed_target_ = 0;
  size_t external_ready_ = 0;
  RateEstimator rate_;
  PoolStats stats_;
  std::chrono::steady_clock::time_point backoff_until_{};
  std::chrono::milliseconds backoff_{0};
};

}  // namespace kiln::zygote
