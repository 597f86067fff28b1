// The pool process's pool of gVisor sandboxes (gvisor_pool.h). Runs in the
// pool process only.
#include "zygote/gvisor_pool.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include "base/log.h"
#include "sys/syscalls.h"

namespace kiln::zygote {
namespace {

using Clock = std::chrono::steady_clock;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool Readable(int fd) {
  pollfd pf{fd, POLLIN, 0};
  return fd >= 0 && ::poll(&pf, 1, 0) > 0 && (pf.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

}  // namespace

Result<std::unique_ptr<GvisorPool>> GvisorPool::Create(const supervisor::HostContext& host,
                                                       GvisorPoolOptions options) {
  const supervisor::GvisorHost& g = supervisor::ProbeGvisorHost(host);
  if (g.missing) return FailedPrecondition("the gVisor backend cannot run here: " + *g.missing);
  if (options.max == 0 || options.min > options.max) {
    return InvalidArgument("gVisor pool: min must be <= max, max >= 1");
  }
  auto pool = std::unique_ptr<GvisorPool>(new GvisorPool(host, std::move(options)));
  pool->Resize();
  return pool;
}

GvisorPool::~GvisorPool() {
  // Closing a keeper's control socket ends its runsc; the cgroups' drivers
  // kill what is left and remove them.
  pending_.clear();
  ready_.clear();
  for (pid_t k : keepers_) ::waitpid(k, nullptr, 0);
}

void GvisorPool::Launch() {
  supervisor::GvisorLaunchOptions lo;
  lo.rlimit_cpu_s = options_.rlimit_cpu_s;
  lo.preload_before_hello = true;
  Child c;
  c.requested = Clock::now();
  auto launched = supervisor::LaunchGvisor(host_, options_.policy, lo);
  if (!launched.ok()) {
    ++stats_.child_failures;
    // A host that cannot launch now is not asked again at once.
    backoff_ = std::min(std::chrono::milliseconds(30000),
                        std::max(std::chrono::milliseconds(1000), backoff_ * 2));
    backoff_until_ = Clock::now() + backoff_;
    KILN_LOG_WARN("pool {} (gvisor): refill: {}; next try in {} ms", options_.profile,
                  launched.error().ToString(), backoff_.count());
    return;
  }
  c.launch = std::move(*launched);
  ++stats_.children_made;
  pending_.push_back(std::move(c));
}

void GvisorPool::Discard(Child& c, bool failed, const std::string& why) {
  if (failed) {
    ++stats_.child_failures;
    KILN_LOG_WARN("pool {} (gvisor): a sandbox was dropped: {}", options_.profile, why);
  }
  // Its keeper kills runsc when the control socket closes; a stuck one dies
  // itself (runsc with it: PR_SET_PDEATHSIG), and the cgroup's driver kills
  // whatever is left.
  c.launch.ctl.Reset();
  sys::PidfdSendSignal(c.launch.keeper_pidfd.get(), SIGKILL);
  if (c.launch.keeper_pid > 0) keepers_.push_back(c.launch.keeper_pid);
  c.launch.keeper_pid = 0;
  c.launch.cgroup.reset();
}

void GvisorPool::ReapKeepers() {
  std::erase_if(keepers_, [](pid_t k) { return ::waitpid(k, nullptr, WNOHANG) != 0; });
}

void GvisorPool::Resize() {
  const auto now = Clock::now();
  target_ = fixed_target_ != 0
                ? fixed_target_
                : ServersFor(rate_.load(now), options_.target_wait, options_.min, options_.max);
  if (ready_.size() > target_) {
    Discard(ready_.front(), false, "");
    ready_.pop_front();
  }
  if (now < backoff_until_) return;
  if (ready_.size() + external_ready_ + pending_.size() < target_ &&
      pending_.size() < std::max<size_t>(1, options_.max_refilling)) {
    Launch();  // one per round: the loop keeps serving the other pools
  }
}

void GvisorPool::Step(int timeout_ms) {
  if (timeout_ms > 0) {
    std::vector<int> watch = WatchFds();
    std::vector<pollfd> fds;
    for (int fd : watch) fds.push_back({fd, POLLIN, 0});
    (void)::poll(fds.data(), fds.size(), timeout_ms);
  }
  ReapKeepers();
  const auto now = Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Child& c = *it;
    if (Readable(c.launch.keeper_pidfd.get())) {
      Discard(c, true, "runsc ended before the runtime started");
      it = pending_.erase(it);
    } else if (Readable(c.launch.runtime.get())) {
      // The runtime's hello: left for the adopter's WaitReady to read.
      c.ready_at = now;
      rate_.Service(MsBetween(c.requested, now) / 1e3);
      backoff_ = std::chrono::milliseconds(0);
      ready_.push_back(std::move(c));
      it = pending_.erase(it);
    } else if (now - c.requested > options_.child_timeout) {
      Discard(c, true,
              "not ready within " + std::to_string(options_.child_timeout.count()) + " ms");
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = ready_.begin(); it != ready_.end();) {
    if (Readable(it->launch.keeper_pidfd.get())) {
      Discard(*it, true, "a ready sandbox ended");
      it = ready_.erase(it);
    } else {
      ++it;
    }
  }
  Resize();
}

PooledChild GvisorPool::ToPooled(Child& c) {
  PooledChild p;
  supervisor::AdoptedSandbox& a = p.sandbox;
  supervisor::GvisorLaunch& l = c.launch;
  a.backend = policy::Backend::kGvisor;
  a.init_pidfd = std::move(l.keeper_pidfd);
  a.init_pid = l.keeper_pid;
  a.worker_pid = l.runsc_pid;
  a.host_uid = l.uid;
  a.sync = std::move(l.ctl);
  a.runtime = std::move(l.runtime);
  a.out = std::move(l.out);
  a.err = std::move(l.err);
  a.workspace = std::move(l.workspace);
  a.cgroup = std::move(l.cgroup);
  p.cgroup_name = l.cgroup_name;
  p.ready_ms = MsBetween(c.requested, c.ready_at);
  p.ready_at = c.ready_at;
  if (l.keeper_pid > 0) keepers_.push_back(l.keeper_pid);  // ours to reap when it ends
  l.keeper_pid = 0;
  return p;
}

std::optional<PooledChild> GvisorPool::TakeForHandoff() {
  if (ready_.empty()) return std::nullopt;
  Child c = std::move(ready_.front());
  ready_.pop_front();
  ++stats_.handed_out;
  ++external_ready_;  // until the owner says otherwise (set_external_ready)
  return ToPooled(c);
}

void GvisorPool::RecordArrival(bool took_one) {
  rate_.Arrival(Clock::now());
  if (!took_one) ++stats_.misses;
}

std::vector<int> GvisorPool::WatchFds() const {
  std::vector<int> fds;
  for (const auto& c : pending_) {
    fds.push_back(c.launch.runtime.get());
    fds.push_back(c.launch.keeper_pidfd.get());
  }
  for (const auto& c : ready_) fds.push_back(c.launch.keeper_pidfd.get());
  return fds;
}

}  // namespace kiln::zygote
