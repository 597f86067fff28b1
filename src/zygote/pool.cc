#include "zygote/pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "base/log.h"
#include "child/sync_message.h"
#include "supervisor/sync_channel.h"
#include "supervisor/verify.h"
#include "sys/syscalls.h"

namespace kiln::zygote {
namespace {

using Clock = std::chrono::steady_clock;
using child::SyncMessage;
using child::SyncTag;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// What a dying child last wrote to its stderr pipe (non-blocking), as ": ..."
// for the failure's reason (its last 400 bytes, lines joined by " | "), or "".
std::string StderrTailOf(int fd) {
  char buf[4096];
  std::string all;
  ssize_t n;
  while (all.size() < (64u << 10) && (n = ::read(fd, buf, sizeof buf)) > 0) {
    all.append(buf, static_cast<size_t>(n));
  }
  while (!all.empty() && (all.back() == '\n' || all.back() == ' ')) all.pop_back();
  if (all.empty()) return "";
  std::string tail = all.size() > 400 ? "..." + all.substr(all.size() - 400) : all;
  std::string out;
  for (char c : tail) {
    if (c == '\n') {
      out += " | ";
    } else {
      out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  }
  return ": " + out;
}

}  // namespace

struct Pool::Pending {
  unsigned slot = 0;
  UniqueFd sync, runtime, out, err, workspace, init_pidfd;
  std::unique_ptr<isolation::Cgroup> cgroup;
  std::string cgroup_name;
  pid_t init_pid = 0, worker_pid = 0;
  bool set_up = false;  // 'W' arrived and Verify passed
  bool broken = false;
  std::string why;
  Clock::time_point requested{};
  double attach_request_ms = 0, attached_ms = 0, worker_ms = 0, attach_ms = 0;
};

Pool::Pool(const supervisor::HostContext& host, PoolOptions options)
    : host_(host), options_(std::move(options)) {}

Result<std::unique_ptr<Pool>> Pool::Create(const supervisor::HostContext& host,
                                           PoolOptions options) {
  if (options.max == 0 || options.min > options.max) {
    return InvalidArgument("pool: need 0 <= min <= max and max >= 1");
  }
  auto pool = std::unique_ptr<Pool>(new Pool(host, std::move(options)));
  pool->slot_used_.assign(kBlockSize - 1, false);
  KILN_TRY(pool->StartZygote());
  return pool;
}

Pool::~Pool() {
  // Children first (their cgroups are removed as they go), then the zygotes,
  // whose pid 1 takes whatever is left in their namespaces with it.
  for (auto& p : pending_) {
    if (p->init_pidfd) sys::PidfdSendSignal(p->init_pidfd.get(), SIGKILL);
  }
  for (auto& [c, slot] : ready_) sys::PidfdSendSignal(c.sandbox.init_pidfd.get(), SIGKILL);
  pending_.clear();
  ready_.clear();
}

Status Pool::StartZygote() {
  ZygoteOptions zo = options_.zygote;
  if (zo.library.empty()) {
    KILN_ASSIGN_OR_RETURN(zo.library, FindZygoteLibrary());
  }
  KILN_ASSIGN_OR_RETURN(zygote_, Zygote::Start(host_, zo));
  ++stats_.zygote_starts;
  return OkStatus();
}

void Pool::RestartZygote(const std::string& why) {
  KILN_LOG_WARN("pool {}: restarting the zygote: {}", options_.zygote.profile, why);
  // Whatever it forked and we have not handed out goes too.
  for (auto& p : pending_) {
    if (p->init_pidfd) sys::PidfdSendSignal(p->init_pidfd.get(), SIGKILL);
    if (p->slot < slot_used_.size()) slot_used_[p->slot] = false;
  }
  pending_.clear();
  for (auto& [c, slot] : ready_) {
    sys::PidfdSendSignal(c.sandbox.init_pidfd.get(), SIGKILL);
    slot_used_[slot] = false;
  }
  ready_.clear();
  if (zygote_) {
    // Sandboxes it made that are in use keep running under its pid 1, and
    // keep their uids: the old zygote's block stays reserved until then.
    zygote_->Retire();
    retired_.push_back(std::move(zygote_));
  }
  // A zygote that keeps failing is not restarted in a tight loop.
  zygote_backoff_until_ = Clock::now() + std::chrono::milliseconds(500);
}

std::optional<unsigned> Pool::TakeSlot() {
  for (size_t i = 0; i < slot_used_.size(); ++i) {
    const unsigned s = (next_slot_ + static_cast<unsigned>(i)) % slot_used_.size();
    if (!slot_used_[s]) {
      slot_used_[s] = true;
      next_slot_ = (s + 1) % slot_used_.size();
      return s;
    }
  }
  return std::nullopt;
}

Status Pool::Request() {
  auto slot = TakeSlot();
  if (!slot) return MakeError(Code::kResourceExhausted, "pool: every uid of the block is in use");
  auto p = std::make_unique<Pending>();
  p->slot = *slot;
  p->requested = Clock::now();
  auto release = [&] { slot_used_[*slot] = false; };
  // The cgroup first, so that pid 1's attach request finds it made.
  const policy::Limits& limits = options_.zygote.policy.limits();
  std::random_device rd;
  p->cgroup_name = "sbx-" + std::to_string(::getpid()) + "-z" + std::to_string(serial_++) + "-" +
                   std::to_string(rd() % 1000000);
  auto cg = host_.cgroups->Create(p->cgroup_name,
                                  supervisor::SandboxCgroupLimits(limits, zygote_->io_devices()));
  if (!cg.ok()) {
    release();
    return std::move(cg).error();
  }
  p->cgroup = std::move(*cg);
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
    release();
    return ErrnoError("socketpair");
  }
  p->sync.Reset(sp[0]);
  UniqueFd sync_child(sp[1]);
  const int one = 1;
  ::setsockopt(p->sync.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
    release();
    return ErrnoError("socketpair");
  }
  p->runtime.Reset(sp[0]);
  UniqueFd rt_child(sp[1]);
  int pp[2];
  if (::pipe2(pp, O_CLOEXEC) != 0) {
    release();
    return ErrnoError("pipe2");
  }
  p->out.Reset(pp[0]);
  UniqueFd out_w(pp[1]);
  if (::pipe2(pp, O_CLOEXEC) != 0) {
    release();
    return ErrnoError("pipe2");
  }
  p->err.Reset(pp[0]);
  UniqueFd err_w(pp[1]);
  SetNonBlocking(p->runtime.get());
  SetNonBlocking(p->out.get());
  SetNonBlocking(p->err.get());
  Status sent = zygote_->Fork(*slot, sync_child.get(), rt_child.get(), out_w.get(), err_w.get());
  if (!sent.ok()) {
    release();
    return sent;
  }
  pending_.push_back(std::move(p));
  return OkStatus();
}

Status Pool::Verify(const Pending& p) const {
  // Every layer of the jail, seen from outside, in both of the sandbox's
  // processes (docs/threat-model.md, "Pooled sandboxes"; supervisor/verify.h).
  supervisor::SandboxFacts facts;
  facts.init_pid = p.init_pid;
  facts.worker_pid = p.worker_pid;
  facts.uid = facts.gid = zygote_ ? zygote_->child_host_uid(p.slot) : 0;
  facts.cgroup_name = p.cgroup_name;
  facts.cgroup_v2 = host_.cgroups->mode() == isolation::CgroupMode::kV2;
  if (zygote_ && zygote_->zygote_pid() > 0) facts.not_shared_with.push_back(zygote_->zygote_pid());
  KILN_TRY(supervisor::VerifySandbox(facts));
  if (zygote_ == nullptr || zygote_->zygote_pid() <= 0) {
    return MakeError(Code::kInternal, "the zygote's pid is unknown");
  }
  return OkStatus();
}

void Pool::OnSync(Pending& p) {
  for (;;) {
    supervisor::Received m = supervisor::ReceiveSync(p.sync.get());
    if (m.again) return;
    if (m.eof || m.garbage) {
      p.broken = true;
      p.why = m.eof ? "the child hung up during its setup" : "malformed setup record";
      return;
    }
    switch (m.msg.tag) {
      case SyncTag::kAttachMe: {
        if (p.init_pid != 0 || m.sender <= 0) {
          p.broken = true;
          p.why = "unexpected attach request";
          return;
        }
        p.attach_request_ms = MsSince(p.requested);
        p.init_pid = m.sender;
        p.init_pidfd.Reset(sys::PidfdOpen(m.sender, 0));
        // The pid is the sender's only while it lives: it holds its end of
        // the channel until it exits, so an open channel after pidfd_open
        // proves the pidfd is that process.
        pollfd pfd{p.sync.get(), POLLRDHUP, 0};
        if (!p.init_pidfd || (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP)))) {
          p.broken = true;
          p.why = "pid 1 went away before its attach";
          return;
        }
        const auto t = Clock::now();
        Status attached = p.cgroup->Attach(m.sender);
        p.attach_ms = MsSince(t);
        if (!attached.ok()) {
          p.broken = true;
          p.why = "cgroup attach: " + attached.error().ToString();
          return;
        }
        SyncMessage go{};
        go.tag = SyncTag::kAttached;
        if (::send(p.sync.get(), &go, sizeof go, MSG_NOSIGNAL) != sizeof go) {
          p.broken = true;
          p.why = "send go";
          return;
        }
        p.attached_ms = MsSince(p.requested);
        break;
      }
      case SyncTag::kWorkspaceFd:
        if (!p.workspace && m.fd) p.workspace = std::move(m.fd);
        break;
      case SyncTag::kWorkerStarted: {
        if (p.worker_pid != 0 || p.init_pid == 0 || m.sender <= 0 || !p.workspace) {
          p.broken = true;
          p.why = "unexpected worker record";
          return;
        }
        p.worker_pid = m.sender;
        p.worker_ms = MsSince(p.requested);
        Status ok = Verify(p);
        if (!ok.ok()) {
          p.broken = true;
          p.why = "check failed: " + ok.error().message;
          return;
        }
        p.set_up = true;
        break;
      }
      case SyncTag::kFailure:
        p.broken = true;
        p.why = "setup failed at step " +
                std::string(ToString(static_cast<SetupStep>(m.msg.step))) + ": " +
                std::strerror(m.msg.err);
        return;
      case SyncTag::kMapsWritten:
      case SyncTag::kWorkerExited:
      case SyncTag::kAttached:
      default:
        p.broken = true;
        p.why = "unexpected setup record";
        return;
    }
  }
}

void Pool::Promote(size_t index) {
  std::unique_ptr<Pending> p = std::move(pending_[index]);
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
  PooledChild c;
  supervisor::AdoptedSandbox& a = c.sandbox;
  a.init_pidfd = std::move(p->init_pidfd);
  a.sync = std::move(p->sync);
  a.runtime = std::move(p->runtime);
  a.out = std::move(p->out);
  a.err = std::move(p->err);
  a.workspace = std::move(p->workspace);
  a.cgroup = std::move(p->cgroup);
  a.init_pid = p->init_pid;
  a.worker_pid = p->worker_pid;
  a.host_uid = zygote_->child_host_uid(p->slot);
  c.cgroup_name = p->cgroup_name;
  c.attach_request_ms = p->attach_request_ms;
  c.attached_ms = p->attached_ms;
  c.attach_ms = p->attach_ms;
  c.worker_ms = p->worker_ms;
  c.ready_ms = MsSince(p->requested);
  c.ready_at = Clock::now();
  rate_.Service(c.ready_ms / 1e3);
  ++stats_.children_made;
  ready_.emplace_back(std::move(c), p->slot);
}

void Pool::Fail(const std::string& why) {
  ++stats_.child_failures;
  // A child that failed its setup or check says the zygote is broken: it
  // goes, with everything it made (RestartZygote kills the rest).
  RestartZygote("a child failed: " + why);
}

void Pool::Resize() {
  const auto now = Clock::now();
  target_ = fixed_target_ != 0
                ? fixed_target_
                : ServersFor(rate_.load(now), options_.target_wait, options_.min, options_.max);
  // Shrink one at a time, oldest first.
  if (ready_.size() > target_) {
    auto& [c, slot] = ready_.front();
    sys::PidfdSendSignal(c.sandbox.init_pidfd.get(), SIGKILL);
    slot_used_[slot] = false;
    ready_.pop_front();
  }
  if (!zygote_ || !zygote_->ready()) return;
  while (ready_.size() + external_ready_ + pending_.size() < target_ &&
         (options_.max_refilling == 0 || pending_.size() < options_.max_refilling)) {
    Status s = Request();
    if (!s.ok()) {
      KILN_LOG_WARN("pool {}: refill: {}", options_.zygote.profile, s.error().ToString());
      break;
    }
  }
}

void Pool::Step(int timeout_ms) {
  enum Kind { kZControl, kZSetup, kZLog, kZInit, kRetired, kSync, kRuntime, kReadyDead, kInUse };
  std::vector<pollfd> fds;
  std::vector<std::pair<Kind, size_t>> who;
  auto add = [&](int fd, short events, Kind k, size_t i) {
    if (fd < 0) return;
    fds.push_back({fd, events, 0});
    who.emplace_back(k, i);
  };
  if (zygote_) {
    add(zygote_->control_fd(), POLLIN, kZControl, 0);
    add(zygote_->setup_fd(), POLLIN, kZSetup, 0);
    add(zygote_->log_fd(), POLLIN, kZLog, 0);
    add(zygote_->init_pidfd(), POLLIN, kZInit, 0);
  }
  for (size_t i = 0; i < retired_.size(); ++i) add(retired_[i]->init_pidfd(), POLLIN, kRetired, i);
  for (size_t i = 0; i < pending_.size(); ++i) {
    add(pending_[i]->sync.get(), POLLIN, kSync, i);
    if (pending_[i]->set_up) add(pending_[i]->runtime.get(), POLLIN, kRuntime, i);
  }
  for (size_t i = 0; i < ready_.size(); ++i)
    add(ready_[i].first.sandbox.init_pidfd.get(), POLLIN, kReadyDead, i);
  for (size_t i = 0; i < in_use_.size(); ++i) add(in_use_[i].init_pidfd.get(), POLLIN, kInUse, i);

  const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  std::vector<size_t> promote, dead_ready, done_in_use, done_retired;
  std::string zygote_broken;
  if (rc > 0) {
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const auto [kind, i] = who[k];
      switch (kind) {
        case kZControl:
          if (Status s = zygote_->OnControl(); !s.ok()) zygote_broken = s.error().message;
          if (zygote_->ready()) stats_.last_zygote_start_ms = zygote_->start_ms();
          if ((fds[k].revents & (POLLHUP | POLLERR)) != 0 && !zygote_->ready()) {
            zygote_broken = "the zygote closed its control socket";
          }
          break;
        case kZSetup:
          if (Status s = zygote_->OnSetup(); !s.ok()) zygote_broken = s.error().message;
          break;
        case kZLog: zygote_->DrainLog(); break;
        case kZInit: zygote_broken = "its pid 1 exited"; break;
        case kRetired: done_retired.push_back(i); break;
        case kSync: OnSync(*pending_[i]); break;
        case kRuntime: {
          // Ready once the hello's bytes are there; EOF instead means the
          // worker died before it: the child failed.
          char head[4];
          const ssize_t n =
              ::recv(pending_[i]->runtime.get(), head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
          if (n > 0) {
            promote.push_back(i);
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            pending_[i]->broken = true;
            pending_[i]->why = "the worker ended before its hello" +
                               (pending_[i]->err ? StderrTailOf(pending_[i]->err.get()) : "");
          }
          break;
        }
        case kReadyDead: dead_ready.push_back(i); break;
        case kInUse: done_in_use.push_back(i); break;
      }
    }
  }
  if (zygote_ && zygote_->exited() && zygote_broken.empty()) zygote_broken = "it exited";
  // Late bookkeeping, highest index first so the others stay valid.
  std::sort(done_in_use.rbegin(), done_in_use.rend());
  for (size_t i : done_in_use) {
    slot_used_[in_use_[i].slot] = false;
    in_use_.erase(in_use_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  std::sort(done_retired.rbegin(), done_retired.rend());
  for (size_t i : done_retired) {
    if (retired_[i]->ReapIfExited())
      retired_.erase(retired_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  std::sort(dead_ready.rbegin(), dead_ready.rend());
  for (size_t i : dead_ready) {
    slot_used_[ready_[i].second] = false;
    ready_.erase(ready_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  if (!zygote_broken.empty()) {
    RestartZygote(zygote_broken);
  } else {
    // A child that failed, or took too long, condemns its zygote.
    for (size_t i = 0; i < pending_.size(); ++i) {
      auto& p = *pending_[i];
      if (!p.broken && MsSince(p.requested) > static_cast<double>(options_.child_timeout.count())) {
        p.broken = true;
        p.why = "not ready within " + std::to_string(options_.child_timeout.count()) + " ms";
      }
      if (p.broken) {
        Fail(p.why);
        promote.clear();
        break;
      }
    }
    std::sort(promote.rbegin(), promote.rend());
    for (size_t i : promote) Promote(i);
  }
  if (!zygote_ && Clock::now() >= zygote_backoff_until_) {
    Status s = StartZygote();
    if (!s.ok()) {
      KILN_LOG_WARN("pool {}: zygote: {}", options_.zygote.profile, s.error().ToString());
      zygote_backoff_until_ = Clock::now() + std::chrono::seconds(1);
    }
  }
  Resize();
}

void Pool::HandOut(const PooledChild& c, unsigned slot) {
  // Its uid is free again once its pid 1 is gone (and with it every process
  // of its pid namespace). Without a watch it is never reused.
  UniqueFd watch(::fcntl(c.sandbox.init_pidfd.get(), F_DUPFD_CLOEXEC, 3));
  if (watch) in_use_.push_back({std::move(watch), slot});
  ++stats_.handed_out;
}

std::optional<PooledChild> Pool::TryTake() {
  rate_.Arrival(Clock::now());
  // Not one whose pid 1 died while it waited.
  while (!ready_.empty()) {
    auto [c, slot] = std::move(ready_.front());
    ready_.pop_front();
    pollfd pfd{c.sandbox.init_pidfd.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 0) != 0) {
      slot_used_[slot] = false;
      continue;
    }
    HandOut(c, slot);
    return std::move(c);
  }
  ++stats_.misses;
  return std::nullopt;
}

std::optional<PooledChild> Pool::TakeForHandoff() {
  if (ready_.empty()) return std::nullopt;
  auto [c, slot] = std::move(ready_.front());
  ready_.pop_front();
  HandOut(c, slot);
  ++external_ready_;  // until the owner says otherwise (set_external_ready)
  return std::move(c);
}

void Pool::RecordArrival(bool took_one) {
  rate_.Arrival(Clock::now());
  if (!took_one) ++stats_.misses;
}

std::vector<int> Pool::WatchFds() const {
  std::vector<int> fds;
  if (zygote_) {
    for (int fd :
         {zygote_->control_fd(), zygote_->setup_fd(), zygote_->log_fd(), zygote_->init_pidfd()}) {
      if (fd >= 0) fds.push_back(fd);
    }
  }
  for (const auto& z : retired_) fds.push_back(z->init_pidfd());
  for (const auto& p : pending_) {
    fds.push_back(p->sync.get());
    if (p->set_up) fds.push_back(p->runtime.get());
  }
  for (const auto& [c, slot] : ready_) fds.push_back(c.sandbox.init_pidfd.get());
  for (const auto& u : in_use_) fds.push_back(u.init_pidfd.get());
  return fds;
}

Result<PooledChild> Pool::Take(std::chrono::milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  if (auto c = TryTake()) return std::move(*c);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return MakeError(Code::kDeadlineExceeded, "no pooled sandbox ready");
    Step(static_cast<int>(std::min<int64_t>(left.count(), 50)));
    if (!ready_.empty()) {
      auto [c, slot] = std::move(ready_.front());
      ready_.pop_front();
      HandOut(c, slot);
      return std::move(c);
    }
  }
}

Status Pool::WaitReady(size_t n, std::chrono::milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  while (ready_.size() < n) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return MakeError(Code::kDeadlineExceeded, "pool: " + std::to_string(ready_.size()) + " of " +
                                                    std::to_string(n) + " sandboxes ready");
    }
    Step(static_cast<int>(std::min<int64_t>(left.count(), 50)));
  }
  return OkStatus();
}

}  // namespace kiln::zygote
