#include "zygote/handoff.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "base/log.h"
#include "sys/fd_passing.h"
#include "sys/syscalls.h"
#include "zygote/pool.h"
#include "zygote/wire.h"

namespace kiln::zygote {
namespace {

struct HandoffRecord {
  uint32_t magic = kWireMagic;
  int32_t init_pid = 0;
  int32_t worker_pid = 0;
  uint32_t host_uid = 0;
  char profile[64] = {};
  char cgroup[96] = {};
};
constexpr size_t kHandoffFds = 6;

// pool -> spawner besides handoffs: PoolStatus. Its own magic and size.
constexpr uint32_t kStatusMagic = 0x6b7a7953;  // "kzyS"
struct StatusRecord {
  uint32_t magic = kStatusMagic;
  char profile[64] = {};
  uint32_t refilling = 0;
  uint32_t target = 0;
  uint32_t zygote_ready = 0;
  uint32_t reserved = 0;
  uint64_t refills = 0;
  uint64_t failures = 0;
  uint64_t zygote_starts = 0;
  double refill_ms_total = 0;
  double last_refill_ms = 0;
};
static_assert(sizeof(StatusRecord) != sizeof(HandoffRecord));

struct StockRecord {
  uint32_t magic = kWireMagic;
  char tag = 'T';  // T: an execution took one; M: it found none
  char profile[64] = {};
  uint64_t consumed = 0;  // sandboxes of this profile the spawner no longer holds, in all
};

bool CopyName(char* out, size_t cap, const std::string& s) {
  if (s.empty() || s.size() >= cap) return false;
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return true;
}

std::string NameOf(const char* buf, size_t cap) { return std::string(buf, strnlen(buf, cap)); }

// The cpus this process may run on.
int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

}  // namespace

bool Handoff::alive() const {
  pollfd pfd{sandbox.init_pidfd.get(), POLLIN, 0};
  return sandbox.init_pidfd && ::poll(&pfd, 1, 0) == 0;
}

Status SendHandoff(int fd, const std::string& profile, const PooledChild& c) {
  const supervisor::AdoptedSandbox& a = c.sandbox;
  HandoffRecord r;
  r.init_pid = a.init_pid;
  r.worker_pid = a.worker_pid;
  r.host_uid = a.host_uid;
  if (!CopyName(r.profile, sizeof r.profile, profile) ||
      !CopyName(r.cgroup, sizeof r.cgroup, c.cgroup_name)) {
    return InvalidArgument("handoff: name too long");
  }
  const int fds[kHandoffFds] = {a.init_pidfd.get(), a.sync.get(), a.runtime.get(),
                                a.out.get(),        a.err.get(),  a.workspace.get()};
  const ssize_t n = sys::SendWithFds(fd, &r, sizeof r, fds, kHandoffFds, 0);
  if (n != sizeof r) return ErrnoError("hand a pooled sandbox to the spawner");
  return OkStatus();
}

Status SendPoolStatus(int fd, const PoolStatus& s) {
  StatusRecord r;
  if (!CopyName(r.profile, sizeof r.profile, s.profile))
    return InvalidArgument("profile name too long");
  r.refilling = s.refilling;
  r.target = s.target;
  r.zygote_ready = s.zygote_ready ? 1 : 0;
  r.refills = s.refills;
  r.failures = s.failures;
  r.zygote_starts = s.zygote_starts;
  r.refill_ms_total = s.refill_ms_total;
  r.last_refill_ms = s.last_refill_ms;
  if (::send(fd, &r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof r) {
    return ErrnoError("send the pool's status to the spawner");
  }
  return OkStatus();
}

Result<std::optional<FromPool>> ReceiveFromPool(int fd) {
  // Either record; one byte more than the larger shows a longer one as such.
  alignas(8) char buf[std::max(sizeof(HandoffRecord), sizeof(StatusRecord)) + 1] = {};
  int fds[kHandoffFds];
  const sys::Received got =
      sys::ReceiveWithFds(fd, buf, sizeof buf, fds, kHandoffFds, MSG_DONTWAIT);
  if (got.bytes < 0 && got.err == EAGAIN) return std::optional<FromPool>();
  if (got.bytes <= 0) {
    for (size_t i = 0; i < got.nfds; ++i) ::close(fds[i]);
    return MakeError(Code::kUnavailable, "the pool process is gone");
  }
  FromPool from;
  StatusRecord s;
  if (got.bytes == sizeof s && (std::memcpy(&s, buf, sizeof s), s.magic == kStatusMagic)) {
    for (size_t i = 0; i < got.nfds; ++i) ::close(fds[i]);
    if (got.nfds != 0 || got.truncated || s.zygote_ready > 1 || !std::isfinite(s.refill_ms_total) ||
        !std::isfinite(s.last_refill_ms) || s.refill_ms_total < 0 || s.last_refill_ms < 0) {
      return Internal("malformed status from the pool process");
    }
    PoolStatus& p = from.status.emplace();
    p.profile = NameOf(s.profile, sizeof s.profile);
    p.refilling = s.refilling;
    p.target = s.target;
    p.zygote_ready = s.zygote_ready == 1;
    p.refills = s.refills;
    p.failures = s.failures;
    p.zygote_starts = s.zygote_starts;
    p.refill_ms_total = s.refill_ms_total;
    p.last_refill_ms = s.last_refill_ms;
    if (p.profile.empty()) return Internal("malformed status from the pool process");
    return std::optional<FromPool>(std::move(from));
  }
  Handoff& h = from.handoff.emplace();
  supervisor::AdoptedSandbox& a = h.sandbox;
  UniqueFd* slots[kHandoffFds] = {&a.init_pidfd, &a.sync, &a.runtime, &a.out, &a.err, &a.workspace};
  for (size_t i = 0; i < got.nfds; ++i) slots[i]->Reset(fds[i]);
  HandoffRecord hr;
  std::memcpy(&hr, buf, sizeof hr);
  if (got.bytes != sizeof hr || hr.magic != kWireMagic || got.nfds != kHandoffFds ||
      got.truncated) {
    return Internal("malformed handoff from the pool process");
  }
  h.profile = NameOf(hr.profile, sizeof hr.profile);
  h.cgroup_name = NameOf(hr.cgroup, sizeof hr.cgroup);
  a.init_pid = hr.init_pid;
  a.worker_pid = hr.worker_pid;
  a.host_uid = hr.host_uid;
  return std::optional<FromPool>(std::move(from));
}

Status SendArrival(int fd, const std::string& profile, bool hit, uint64_t consumed) {
  StockRecord r;
  r.tag = hit ? 'T' : 'M';
  r.consumed = consumed;
  if (!CopyName(r.profile, sizeof r.profile, profile))
    return InvalidArgument("profile name too long");
  if (::send(fd, &r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof r) {
    return ErrnoError("tell the pool process");
  }
  return OkStatus();
}

Result<supervisor::AdoptedSandbox> Adopt(const supervisor::HostContext& host, Handoff&& h) {
  if (host.cgroups == nullptr) return FailedPrecondition("no cgroups");
  KILN_ASSIGN_OR_RETURN(h.sandbox.cgroup, host.cgroups->Adopt(h.cgroup_name));
  return std::move(h.sandbox);
}

bool PoolEligible(const config::Config& config, const config::Profile& profile,
                  const config::LimitSpec& request,
                  const std::vector<std::pair<std::string, std::string>>& env) {
  if (!config.pool.enabled || !profile.pool || !env.empty()) return false;
  auto asked = config::PolicyFor(profile, request);
  auto pooled = config::PolicyFor(profile, {});
  if (!asked.ok() || !pooled.ok()) return false;
  auto a = asked->Build();
  auto p = pooled->Build();
  if (!a.ok() || !p.ok()) return false;
  const policy::Limits& x = a->limits();
  const policy::Limits& y = p->limits();
  return x.memory_bytes == y.memory_bytes && x.cpus == y.cpus && x.pids == y.pids &&
         x.workspace_bytes == y.workspace_bytes && x.tmp_bytes == y.tmp_bytes &&
         x.shm_bytes == y.shm_bytes && x.open_files == y.open_files &&
         x.io.read_bps == y.io.read_bps && x.io.write_bps == y.io.write_bps &&
         x.io.read_iops == y.io.read_iops && x.io.write_iops == y.io.write_iops &&
         // The pooled sandbox's RLIMIT_CPU must not fire before what the
         // request allows (the supervisor polls an explicit limit itself).
         policy::CpuBackstopSeconds(x, x.wall_timeout_s, true) <=
             policy::CpuBackstopSeconds(y, y.wall_timeout_s, true);
}

std::optional<std::string> PoolUnavailableReason(const config::Config& config,
                                                 const supervisor::HostContext& host) {
  if (!config.pool.enabled) return "disabled in the configuration ([pool] enabled = false)";
  if (::geteuid() != 0) return "kiln is not root (each pooled sandbox needs its own host uid)";
  if (host.cgroups == nullptr || host.cgroups->mode() == isolation::CgroupMode::kNone) {
    return "no cgroups (each pooled sandbox is put into its own)";
  }
  return std::nullopt;
}

namespace {

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
    std::unique_ptr<Pool> pool;
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
    auto pol = b->Build();
    if (!pol.ok()) return nullptr;
    PoolOptions po{ZygoteOptions(*pol)};
    po.zygote.profile = name;
    po.zygote.preload = config.pool.preload;
    for (const auto& m : (*profile)->preload) po.zygote.preload.push_back(m);
    // Sessions take pooled sandboxes too: the longest one's cpu budget
    // (spawner.cc RunSession), lowered by each adopter to its own.
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
        StockRecord r;
        const ssize_t n = ::recv(spawner, &r, sizeof r, MSG_DONTWAIT);
        if (n == 0) ::_exit(0);  // the spawner is gone
        if (n < 0) break;
        if (n != sizeof r || r.magic != kWireMagic) continue;
        Entry* e = ensure(NameOf(r.profile, sizeof r.profile));
        if (e == nullptr) continue;
        e->pool->RecordArrival(r.tag == 'T');
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
      now.zygote_ready = e.pool->zygote() != nullptr && e.pool->zygote()->ready();
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

void HandoffStock::Add(Handoff h) { stock_[h.profile].push_back(std::move(h)); }

std::optional<Handoff> HandoffStock::Take(const std::string& profile) {
  auto it = stock_.find(profile);
  if (it == stock_.end()) return std::nullopt;
  while (!it->second.empty()) {
    Handoff h = std::move(it->second.front());
    it->second.pop_front();
    ++consumed_[profile];
    if (h.alive()) return h;
  }
  return std::nullopt;
}

uint64_t HandoffStock::consumed(const std::string& profile) const {
  auto it = consumed_.find(profile);
  return it == consumed_.end() ? 0 : it->second;
}

size_t HandoffStock::size(const std::string& profile) const {
  auto it = stock_.find(profile);
  return it == stock_.end() ? 0 : it->second.size();
}

}  // namespace kiln::zygote
