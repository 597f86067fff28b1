// The records between the pool process and the spawner, both ends
// (handoffs, status, arrivals; src/zygote/handoff.h), the spawner's stock of
// handed-off sandboxes, and the eligibility rule both the server and the
// supervisor apply. The pool process's own loop is pool_process.cc.
#include "zygote/handoff.h"

#include <poll.h>
#include <sys/socket.h>
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
  uint32_t backend = 0;  // 0 native, 1 gvisor
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
  r.backend = a.backend == policy::Backend::kGvisor ? 1 : 0;
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
      got.truncated || hr.backend > 1) {
    return Internal("malformed handoff from the pool process");
  }
  h.profile = NameOf(hr.profile, sizeof hr.profile);
  h.cgroup_name = NameOf(hr.cgroup, sizeof hr.cgroup);
  a.init_pid = hr.init_pid;
  a.worker_pid = hr.worker_pid;
  a.host_uid = hr.host_uid;
  a.backend = hr.backend == 1 ? policy::Backend::kGvisor : policy::Backend::kNative;
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

Result<std::optional<Arrival>> ReceiveArrival(int fd) {
  StockRecord r;
  const ssize_t n = ::recv(fd, &r, sizeof r, MSG_DONTWAIT);
  if (n == 0) return MakeError(Code::kUnavailable, "the spawner is gone");
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return std::optional<Arrival>();
    return ErrnoError("receive from the spawner");
  }
  Arrival a;
  a.valid = n == sizeof r && r.magic == kWireMagic && (r.tag == 'T' || r.tag == 'M');
  if (a.valid) {
    a.profile = NameOf(r.profile, sizeof r.profile);
    a.hit = r.tag == 'T';
    a.consumed = r.consumed;
    a.valid = !a.profile.empty();
  }
  return std::optional<Arrival>(std::move(a));
}

Result<supervisor::AdoptedSandbox> Adopt(const supervisor::HostContext& host, Handoff&& h) {
  if (host.cgroups == nullptr) return FailedPrecondition("no cgroups");
  KILN_ASSIGN_OR_RETURN(h.sandbox.cgroup, host.cgroups->Adopt(h.cgroup_name));
  return std::move(h.sandbox);
}

bool ProfilePooled(const config::Config& config, const config::Profile& profile) {
  return config.pool.enabled && profile.pool;
}

bool PoolFits(const policy::Limits& x, const policy::Limits& y) {
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
