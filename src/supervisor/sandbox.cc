#include "supervisor/sandbox.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/unique_fd.h"
#include "base/units.h"
#include "child/child_plan.h"
#include "child/sync_message.h"
#include "isolation/mount_ns.h"
#include "isolation/rlimits.h"
#include "isolation/user_ns.h"
#include "supervisor/cell_outputs.h"
#include "supervisor/gvisor.h"
#include "supervisor/input_files.h"
#include "supervisor/jail.h"
#include "supervisor/outcome.h"
#include "supervisor/runtime_channel.h"
#include "supervisor/sync_channel.h"
#include "supervisor/verify.h"
#include "supervisor/workspace.h"
#include "supervisor/workspace_files.h"
#include "sys/syscalls.h"

namespace kiln::supervisor {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using child::SyncMessage;
using child::SyncTag;

constexpr auto kSetupTimeout = std::chrono::seconds(20);
constexpr auto kCpuPollInterval = std::chrono::milliseconds(50);
constexpr auto kDrainTimeout = std::chrono::seconds(2);
constexpr uint64_t kMaxProgramBytes = 64ULL << 20;

// setpriority(2) of each thread of `pid` (nice is per thread).
Status SetNiceOfEveryThread(pid_t pid, int nice) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    char* end = nullptr;
    const std::string name = e.path().filename().string();
    const long tid = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0' || tid <= 0) continue;
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) != 0 && errno != ESRCH) {
      return ErrnoError("setpriority of thread " + name + " of the pooled worker");
    }
  }
  if (ec) return MakeError(Code::kUnavailable, "the pooled worker's threads: " + ec.message());
  return OkStatus();
}

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// argv/envp as the child needs them: NUL-terminated arrays of C strings whose
// storage outlives the clone.
class CStringArray final {
 public:
  void Add(std::string s) { strings_.push_back(std::move(s)); }
  char* const* Finish() {
    ptrs_.clear();
    for (auto& s : strings_) ptrs_.push_back(s.data());
    ptrs_.push_back(nullptr);
    return ptrs_.data();
  }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> ptrs_;
};

Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return ErrnoError("fcntl O_NONBLOCK");
  return OkStatus();
}

std::string UniqueCgroupName() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return "sbx-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(rd() % 1000000);
}

// Reads what is available from a capture pipe into `buf`, keeping at most
// `cap` bytes. Returns false at EOF. Sets *over when more than `cap` arrived.
bool ReadCapped(int fd, std::string* buf, uint64_t cap, bool* over) {
  char chunk[65536];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN;  // EAGAIN: open, nothing more now
    }
    if (n == 0) return false;
    const uint64_t room = cap > buf->size() ? cap - buf->size() : 0;
    if (static_cast<uint64_t>(n) > room) {
      buf->append(chunk, static_cast<size_t>(room));
      *over = true;
    } else {
      buf->append(chunk, static_cast<size_t>(n));
    }
  }
}

std::string DescribeFailure(const SyncMessage& m, const isolation::MountPlan& mounts) {
  const auto step = static_cast<SetupStep>(m.step);
  std::string s = "sandbox setup failed at step " + std::string(ToString(step));
  if (m.detail >= 0 && (step == SetupStep::kMountRoot || step == SetupStep::kMountBinds ||
                        step == SetupStep::kMountProc || step == SetupStep::kMountTmpfs ||
                        step == SetupStep::kStageFiles)) {
    const auto idx = static_cast<size_t>(m.detail);
    if (idx < mounts.ops().size()) {
      std::string target = mounts.ops()[idx].target;
      const std::string root = mounts.new_root();
      if (target.rfind(root, 0) == 0) target = target.substr(root.size());
      s += " (" + (target.empty() ? std::string("/") : target) + ")";
    }
  }
  if (step == SetupStep::kForkWorker && m.detail == child::kDetailExecInit)
    s += " (exec of " + std::string(child::kSandboxInitPath) + ")";
  if (m.err > 0) s += ": " + std::string(std::strerror(m.err));
  if (step == SetupStep::kStageFiles && m.err == ENOSPC)
    s += " (the files exceed the workspace size)";
  return s;
}

// Frames the runtime channel emits as events, by output_type.
const char* EventNameFor(const nlohmann::json& output) {
  const std::string type = output.value("output_type", "");
  if (type == "display_data") return "display";
  if (type == "execute_result") return "result";
  if (type == "error") return "error";
  return nullptr;
}

}  // namespace

// Everything the supervisor knows about one sandbox. The event loop (Pump)
// is shared by setup, cells and the idle time between them.
struct Sandbox::State {
  const HostContext* host = nullptr;
  std::optional<policy::SandboxPolicy> pol;
  policy::Limits limits;
  isolation::MountPlan mounts;
  std::optional<isolation::UidSlot> slot;
  std::vector<UniqueFd> keep_fds;
  CStringArray argv, envp;
  std::unique_ptr<isolation::Cgroup> cgroup;
  std::string cgroup_name;  // the last component of its path (Launch)
  bool use_cgroup = false;
  std::string limits_backend;
  pid_t warm_up = 0;

  pid_t pid = -1;
  UniqueFd pidfd;
  // Another backend's sandbox (docs/adr/0021: gVisor): its processes are the
  // Jail's; pid, pidfd and the setup channel are the native jail's only.
  std::unique_ptr<Jail> jail;
  UniqueFd worker_pidfd;  // for interrupts
  // Adopted from the warm pool (Sandbox::Adopt): pid 1 is not our child.
  bool adopted = false;
  uid_t adopted_uid = 0;
  bool reaped = false;
  bool dead_confirmed = false;  // pid 1 reaped, or its pidfd said it exited
  int init_status = 0;
  rusage ru{};
  UniqueFd sync_parent, rt_parent, out_r, err_r;
  UniqueFd workspace_fd;

  // Connection state.
  // The runtime channel's frames, checked, and the current cell's outputs
  // (the frames over the cell's budget: an output-limit kill).
  const RuntimeChannel::Limits rt_limits{};
  RuntimeChannel rt{rt_limits};
  bool attached = false;
  // cgroup v1 (ChildPlan::enter_cgroup): pid 1 asks to be attached; set once
  // it is in the cgroup and has been told.
  bool enter_cgroup = false, init_attached = false;
  bool sync_open = true, out_open = true, err_open = true, rt_open = true, init_exited = false;
  bool torn_down = false;
  std::optional<int> worker_status;
  std::optional<SyncMessage> failure;
  std::string failure_text;
  std::optional<Outcome> kill_reason;
  std::optional<std::string> protocol_error;
  bool killed = false;
  int64_t cells_started = 0;

  // The cell in progress (or the last one).
  // Its outputs and protocol state are the runtime channel's (rt).
  struct Cell {
    CellSpec spec;
    std::string stdout_data, stderr_data;
    bool stdout_truncated = false, stderr_truncated = false, outputs_truncated = false;
    Clock::time_point t_sent{}, t_end{}, deadline{}, grace_deadline = Clock::time_point::max();
    bool timed_out = false;    // the wall-clock timeout interrupted it
    bool interrupted = false;  // Interrupt() on request
    uint64_t cpu_start_usec = 0;
    const EventSink* sink = nullptr;
    explicit Cell(CellSpec s) : spec(std::move(s)) {}
  };
  std::optional<Cell> cell;
  size_t emitted_outputs = 0;          // outputs of the cell already sent as events
  bool command_start_emitted = false;  // the cell's command_started event went out

  // Timing.
  Clock::time_point t_start{}, t_planned{}, t_cgroup{}, t_cloned{}, t_maps{}, t_workspace{},
      t_worker{}, t_attach_asked{}, t_attached{}, t_exit{};
  Clock::time_point setup_deadline = Clock::time_point::max();
  Clock::time_point next_cpu_poll = Clock::time_point::max();
  PhaseTimes phases;

  ~State() {
    jail.reset();  // kills and reaps what is left of it
    if (pid > 0 && !reaped) {
      sys::PidfdSendSignal(pidfd.get(), SIGKILL);
      if (!adopted) ::waitpid(pid, nullptr, 0);
    }
    if (cgroup) {
      (void)cgroup->KillAll();
      (void)cgroup->Remove();
    }
    FinishCgroupWarmUp(warm_up);
  }

  bool dead() const { return init_exited || killed; }

  void Kill(std::optional<Outcome> why) {
    if (why && !kill_reason && !failure && !protocol_error) kill_reason = why;
    if (!killed && pid > 0) {
      killed = true;
      sys::PidfdSendSignal(pidfd.get(), SIGKILL);
    } else if (!killed && jail) {
      killed = true;
      jail->Kill();
    }
  }
  int exit_fd() const { return jail ? jail->exit_fd() : pidfd.get(); }
  void Violate(std::string why) {
    if (!protocol_error && !kill_reason && !failure) protocol_error = std::move(why);
    Kill(std::nullopt);
  }

  void Emit(std::string_view event, const nlohmann::json& data) {
    if (cell && cell->sink != nullptr && *cell->sink) (*cell->sink)(event, data);
  }

  // Output written before a frame is already in the pipes when the frame
  // arrives (the runtime flushes first): drain them so outputs keep order.
  // Between cells the pipes are left alone (their bytes belong to the next).
  void DrainStreams() {
    if (!cell) return;
    auto drain = [&](int fd, bool* open, std::string* buf, bool* truncated, const char* name) {
      if (!*open) return;
      bool over = false;
      const size_t before = buf->size();
      *open = ReadCapped(fd, buf, limits.output_bytes, &over);
      const std::string_view fresh = std::string_view(*buf).substr(before);
      if (!fresh.empty()) {
        rt.outputs().AddStream(name, fresh);
        Emit(name, {{"text", std::string(fresh)}});
      }
      if (over) {
        *truncated = true;
        *open = false;
        Kill(Outcome::kOutputLimit);
      }
    };
    drain(out_r.get(), &out_open, &cell->stdout_data, &cell->stdout_truncated, "stdout");
    drain(err_r.get(), &err_open, &cell->stderr_data, &cell->stderr_truncated, "stderr");
  }

  void EmitNewOutputs() {
    if (auto started = rt.outputs().command_pid(); started && !command_start_emitted) {
      command_start_emitted = true;
      Emit("command_started", {{"pid", *started}});
    }
    const auto& outs = rt.outputs().outputs();
    for (; emitted_outputs < outs.size(); ++emitted_outputs) {
      const auto& o = outs[emitted_outputs];
      if (const char* name = EventNameFor(o)) Emit(name, o);
    }
  }

  void SendCell() {
    Cell& c = *cell;
    // A session's cell reports its own memory high-water mark (not the
    // session's so far) where the host can reset it; the runtime has not
    // seen the cell yet (it is only queued here).
    if (cgroup && !c.spec.last) (void)cgroup->ResetMemoryPeak();
    rt.SendExecute(c.spec.code, c.spec.filename, pol->import_policy(), pol->display_limits(),
                   c.spec.extra);
    c.t_sent = Clock::now();
    c.deadline = c.t_sent + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(c.spec.timeout_s));
    if (cgroup) {
      next_cpu_poll = c.t_sent + kCpuPollInterval;
      auto usage = cgroup->Usage();
      if (usage.ok() && usage->has_cpu) c.cpu_start_usec = usage->cpu_usec;
    }
  }

  void HandleFrames() {
    using Kind = RuntimeChannel::EventKind;
    for (;;) {
      // Output written before a frame is in the pipes before it: read first.
      const RuntimeChannel::Event ev = rt.Next([this] { DrainStreams(); });
      switch (ev.kind) {
        case Kind::kNone: return;
        case Kind::kHello:
        case Kind::kSynced: continue;
        case Kind::kBadHello: Violate(ev.reason); continue;
        case Kind::kProtocolError: Violate(ev.reason); return;
        case Kind::kOutputLimit:
          cell->outputs_truncated = true;
          Kill(Outcome::kOutputLimit);
          return;
        case Kind::kExiting:
          // One-shot: the program's exit work is done; the result is known
          // before the process is gone.
          if (!worker_status) worker_status = (ev.exit_code & 0xff) << 8;  // W_EXITCODE(code, 0)
          t_exit = Clock::now();
          continue;
        case Kind::kOutput: EmitNewOutputs(); continue;
        case Kind::kReplied:
          EmitNewOutputs();
          cell->t_end = Clock::now();
          next_cpu_poll = Clock::time_point::max();
          continue;
      }
    }
  }

  void ReadRuntime() {
    char chunk[65536];
    for (int i = 0; i < 64 && rt_open; ++i) {  // at most 4 MiB per wake-up: stay fair
      ssize_t n = ::read(rt_parent.get(), chunk, sizeof chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) rt_open = false;
        break;
      }
      if (n == 0) {
        rt_open = false;
        break;
      }
      rt.Feed(chunk, static_cast<size_t>(n));
      HandleFrames();
      if (protocol_error) break;
    }
  }

  void OnSyncRecords(Clock::time_point now) {
    for (;;) {
      Received m = ReceiveSync(sync_parent.get());
      if (m.eof) {
        sync_open = false;
        break;
      }
      if (m.again) break;
      if (m.garbage) {
        failure_text = "the sandbox sent a malformed setup record";
        if (!failure) failure = SyncMessage{SyncTag::kFailure, 0, 0, EPROTO, -1, 0};
        Kill(std::nullopt);
        continue;
      }
      switch (m.msg.tag) {
        case SyncTag::kWorkspaceFd:
          if (!workspace_fd && m.fd) {
            workspace_fd = std::move(m.fd);
            t_workspace = now;
          }
          break;
        case SyncTag::kAttachMe: {
          // v1 only (ChildPlan::enter_cgroup): pid 1, and only once. The
          // worker does not exist yet; it is forked inside the cgroup.
          if (!enter_cgroup || init_attached || m.sender != pid) {
            failure_text = "the sandbox sent an unexpected setup record";
            if (!failure) failure = SyncMessage{SyncTag::kFailure, 0, 0, EPROTO, -1, 0};
            Kill(std::nullopt);
            break;
          }
          t_attach_asked = now;
          Status moved = cgroup->Attach(m.sender);
          if (!moved.ok()) {
            failure = SyncMessage{SyncTag::kFailure,
                                  static_cast<uint8_t>(SetupStep::kCgroupAttach),
                                  0,
                                  moved.error().sys_errno,
                                  -1,
                                  0};
            failure_text =
                "attaching the sandbox to its cgroup failed: " + moved.error().ToString();
            Kill(std::nullopt);
            break;
          }
          SyncMessage go{};
          go.tag = SyncTag::kAttached;
          if (::send(sync_parent.get(), &go, sizeof go, MSG_NOSIGNAL) != sizeof go) {
            // pid 1 is gone (or the channel broke): EOF or its exit tells.
            break;
          }
          t_attached = Clock::now();
          init_attached = true;
          break;
        }
        case SyncTag::kWorkerStarted:
          if (attached || m.sender <= 0) break;  // only the first counts
          if (enter_cgroup && !init_attached) {
            // pid 1 forks the worker only after kAttached: out of order.
            failure_text = "the sandbox sent an unexpected setup record";
            if (!failure) failure = SyncMessage{SyncTag::kFailure, 0, 0, EPROTO, -1, 0};
            Kill(std::nullopt);
            break;
          }
          t_worker = now;
          worker_pidfd.Reset(sys::PidfdOpen(m.sender, 0));
          // In its cgroup from birth: v2 cloned pid 1 into it, v1 moved pid
          // 1 before the fork (kAttachMe).
          if (!enter_cgroup) t_attach_asked = t_attached = now;
          attached = true;
          // Every layer, seen from outside, before any line of the program
          // is sent (S7, verify.h): fail closed.
          if (Status checked = VerifyFromOutside(m.sender); !checked.ok()) {
            if (!failure) {
              failure = SyncMessage{
                  SyncTag::kFailure, static_cast<uint8_t>(SetupStep::kVerify), 0, 0, -1, 0};
              failure_text =
                  "the sandbox failed its check from outside: " + checked.error().message;
            }
            Kill(std::nullopt);
          }
          break;
        case SyncTag::kWorkerExited:
          if (!worker_status) {
            worker_status = m.msg.status;
            t_exit = now;
          }
          break;
        case SyncTag::kFailure:
          if (!failure) {
            failure = m.msg;
            failure_text = DescribeFailure(m.msg, mounts);
          }
          Kill(std::nullopt);
          break;
        case SyncTag::kMapsWritten:
        case SyncTag::kAttached:
        default:
          failure_text = "the sandbox sent an unexpected setup record";
          if (!failure) failure = SyncMessage{SyncTag::kFailure, 0, 0, EPROTO, -1, 0};
          Kill(std::nullopt);
          break;
      }
    }
  }

  // A cold sandbox's pid 1 and worker, checked from outside as the pool
  // checks a pooled one (verify.h): seccomp, no_new_privs, no capability,
  // its host ids, its pid namespace, its cgroup, its own namespaces.
  Status VerifyFromOutside(pid_t worker) const {
    SandboxFacts facts;
    facts.init_pid = pid;
    facts.worker_pid = worker;
    facts.uid = slot->outer_uid();
    facts.gid = slot->outer_gid();
    if (cgroup) {
      facts.cgroup_name = cgroup_name;
      facts.cgroup_v2 = host->cgroups->mode() == isolation::CgroupMode::kV2;
    }
    return VerifySandbox(facts);
  }

  // One round of the event loop: waits until `wake` at most, handles what is
  // ready. The runtime channel and the capture pipes are read only while a
  // cell runs (or during setup for the channel's hello).
  Status Pump(Clock::time_point wake, const Waiters& waiters) {
    pollfd fds[8];
    int n = 0;
    int idx_sync = -1, idx_out = -1, idx_err = -1, idx_rt = -1, idx_cancel = -1, idx_control = -1;
    const bool in_cell = cell.has_value() && (!rt.replied() || cell->spec.last);
    if (sync_open) {
      idx_sync = n;
      fds[n++] = {sync_parent.get(), POLLIN, 0};
    }
    if (in_cell && out_open) {
      idx_out = n;
      fds[n++] = {out_r.get(), POLLIN, 0};
    }
    if (in_cell && err_open) {
      idx_err = n;
      fds[n++] = {err_r.get(), POLLIN, 0};
    }
    const int idx_pid = n;
    fds[n++] = {exit_fd(), POLLIN, 0};
    if (waiters.cancel_fd >= 0 && !killed) {
      idx_cancel = n;
      fds[n++] = {waiters.cancel_fd, POLLIN, 0};
    }
    if (waiters.control_fd >= 0 && waiters.on_control) {
      idx_control = n;
      fds[n++] = {waiters.control_fd, POLLIN, 0};
    }
    if (rt_open && (in_cell || !rt.hello())) {
      idx_rt = n;
      fds[n++] = {rt_parent.get(), static_cast<short>(POLLIN | (rt.outbox().empty() ? 0 : POLLOUT)),
                  0};
    }
    const auto now0 = Clock::now();
    const int timeout_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - now0).count() + 1, 0, 1000));
    const int rc = ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
    if (rc < 0 && errno != EINTR) return ErrnoError("poll");
    const auto now = Clock::now();
    if (rc <= 0) return OkStatus();

    if (idx_sync >= 0 && fds[idx_sync].revents != 0) OnSyncRecords(now);
    std::string& outbox = rt.outbox();
    if (idx_rt >= 0 && (fds[idx_rt].revents & POLLOUT) != 0 && !outbox.empty()) {
      ssize_t w = ::send(rt_parent.get(), outbox.data(), outbox.size(), MSG_NOSIGNAL);
      if (w > 0) {
        outbox.erase(0, static_cast<size_t>(w));
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        outbox.clear();  // the runtime is gone; its exit status will tell
      }
    }
    if (idx_rt >= 0 && (fds[idx_rt].revents & (POLLIN | POLLHUP | POLLERR)) != 0) ReadRuntime();
    if ((idx_out >= 0 && fds[idx_out].revents != 0) ||
        (idx_err >= 0 && fds[idx_err].revents != 0)) {
      DrainStreams();
    }
    if (fds[idx_pid].revents != 0) {
      init_exited = true;
      if (!t_exit.time_since_epoch().count()) t_exit = now;
    }
    if (idx_cancel >= 0 && fds[idx_cancel].revents != 0) Kill(Outcome::kCancelled);
    if (idx_control >= 0 && fds[idx_control].revents != 0) waiters.on_control();
    return OkStatus();
  }

  // Reaps pid 1, drains what is left, accounts, kills the rest of the
  // cgroup. Idempotent.
  void Teardown() {
    if (torn_down) return;
    torn_down = true;
    if (!killed && !init_exited) Kill(std::nullopt);
    if (!t_exit.time_since_epoch().count()) t_exit = Clock::now();
    if (jail) {
      if (auto status = jail->Reap(&ru)) {
        init_status = *status;
        if (!worker_status) worker_status = jail->ProgramStatus();
        // What runsc left (its Sentry and gofer die with it): killed before
        // any file is read.
        if (cgroup) (void)cgroup->KillAll();
        reaped = dead_confirmed = true;
      }
    } else if (adopted) {
      // Not our child: no wait status or rusage (the cgroup accounts), but
      // its pidfd says when it is gone.
      pollfd gone{pidfd.get(), POLLIN, 0};
      dead_confirmed = ::poll(&gone, 1, static_cast<int>(kDrainTimeout.count() * 1000)) > 0;
      reaped = true;
    } else if (pid > 0 && ::wait4(pid, &init_status, 0, &ru) == pid) {
      reaped = true;
      dead_confirmed = true;
    }
    init_exited = true;
    // Late records (the worker's status can race pid 1's exit) and the rest of
    // the output: every writer is dead, so these reach EOF quickly.
    const auto drain_deadline = Clock::now() + kDrainTimeout;
    const bool in_cell = cell.has_value() && (!rt.replied() || cell->spec.last);
    if (!in_cell) out_open = err_open = false;  // between cells: nothing to attribute
    while ((out_open || err_open || sync_open || (rt_open && !protocol_error && in_cell)) &&
           Clock::now() < drain_deadline) {
      if (sync_open) {
        Received m = ReceiveSync(sync_parent.get());
        if (m.eof || m.again) {
          sync_open = false;
        } else if (!m.garbage && m.msg.tag == SyncTag::kWorkerExited && !worker_status) {
          worker_status = m.msg.status;
        } else if (!m.garbage && m.msg.tag == SyncTag::kFailure && !failure) {
          failure = m.msg;
          failure_text = DescribeFailure(m.msg, mounts);
        }
      }
      // Frames first: each drains the pipes up to itself, keeping the order.
      if (in_cell && rt_open && !protocol_error) ReadRuntime();
      if (!in_cell) rt_open = false;
      DrainStreams();
      if (out_open || err_open || rt_open) {
        pollfd pf[3] = {
            {out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}, {rt_parent.get(), POLLIN, 0}};
        ::poll(pf, 3, 20);
      }
    }
    if (in_cell && !protocol_error && !kill_reason && !failure)
      protocol_error = rt.TruncatedFrame();
  }

  // Limits while a cell runs: wall clock (with the interrupt step for
  // sessions), cpu time of the cell.
  void CheckCellLimits() {
    if (!cell || rt.replied() || dead()) return;
    Cell& c = *cell;
    const auto now = Clock::now();
    if (now >= c.deadline && !c.timed_out) {
      if (c.spec.interrupt_grace_s) {
        c.timed_out = true;
        SignalWorker(SIGINT);
        c.grace_deadline = now + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(*c.spec.interrupt_grace_s));
      } else {
        Kill(Outcome::kTimeout);
        return;
      }
    }
    if (now >= c.grace_deadline) {
      Kill(Outcome::kTimeout);
      return;
    }
    // Only a cpu-time limit the caller set is polled; without one the wall
    // clock above is the limit (and RLIMIT_CPU a backstop it always beats).
    if (now >= next_cpu_poll && cgroup && limits.cpu_time_explicit) {
      next_cpu_poll = now + kCpuPollInterval;
      auto usage = cgroup->Usage();
      const uint64_t cpu_limit_usec = static_cast<uint64_t>(limits.cpu_time_s * 1e6);
      if (usage.ok() && usage->has_cpu && usage->cpu_usec - c.cpu_start_usec > cpu_limit_usec) {
        Kill(Outcome::kCpuLimit);
      }
    }
  }

  void SignalWorker(int sig) {
    if (jail) {
      (void)jail->Signal(sig);
    } else if (worker_pidfd) {
      sys::PidfdSendSignal(worker_pidfd.get(), sig);
    }
  }

  Clock::time_point NextWake() const {
    Clock::time_point wake = Clock::now() + std::chrono::seconds(1);
    if (!rt.hello() || !attached) wake = std::min(wake, setup_deadline);
    if (cell && !rt.replied()) {
      wake =
          std::min({wake, cell->timed_out ? cell->grace_deadline : cell->deadline, next_cpu_poll});
    }
    return wake;
  }

  // The outcome of the current cell, with the sandbox alive (the runtime
  // replied) or dead (Teardown done).
  ExecutionResult CellResult(bool final) {
    ExecutionResult r;
    r.limits_backend = limits_backend;
    if (cell) {
      Cell& c = *cell;
      r.stdout_data = c.stdout_data;
      r.stderr_data = c.stderr_data;
      r.stdout_truncated = c.stdout_truncated;
      r.stderr_truncated = c.stderr_truncated;
      r.outputs_truncated = c.outputs_truncated;
      const CellOutputs& outputs = rt.outputs();
      r.outputs = outputs.outputs();
      r.error = outputs.error();
      r.execution_count = outputs.execution_count();
      r.outputs_dropped = outputs.dropped();
      r.policy_violation = outputs.policy_violation();
      const auto end = c.t_end.time_since_epoch().count() ? c.t_end : t_exit;
      r.duration_ms = c.t_sent.time_since_epoch().count() && end.time_since_epoch().count()
                          ? Ms(c.t_sent, end)
                          : 0;
    }
    // Accounting.
    if (final) {
      r.cpu_ms = (static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                  static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3);
      r.peak_memory_bytes = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
    }
    if (cgroup) {
      auto usage = cgroup->Usage();
      if (usage.ok()) {
        if (usage->has_cpu) {
          const uint64_t start = cell && !cell->spec.last ? cell->cpu_start_usec : 0;
          r.cpu_ms = static_cast<double>(usage->cpu_usec - std::min(start, usage->cpu_usec)) / 1e3;
        }
        if (usage->has_memory_peak) r.peak_memory_bytes = usage->memory_peak;
        r.oom_kills = usage->oom_kills;
        r.pids_limit_hits = usage->pids_max_hits;
      }
    }

    Observations o;
    if (cell) {
      const Cell& c = *cell;
      o.has_cell = true;
      o.last = c.spec.last;
      o.cell_timeout_s = c.spec.timeout_s;
      o.timed_out = c.timed_out;
      o.interrupted = c.interrupted;
      const CellOutputs& outputs = rt.outputs();
      o.reply_status = outputs.reply_status();
      o.reply_exit_code = outputs.exit_code();
      o.error = outputs.error();
      o.policy_violation = outputs.policy_violation();
      o.outputs_truncated = c.outputs_truncated;
      o.stdout_truncated = c.stdout_truncated;
      o.stderr_truncated = c.stderr_truncated;
    }
    o.dead = dead();
    if (failure) {
      o.failure_step = static_cast<SetupStep>(failure->step);
      o.failure_errno = failure->err;
      o.failure_text = failure_text;
    }
    o.kill_reason = kill_reason;
    o.protocol_error = protocol_error;
    o.worker_status = worker_status;
    o.init_status = init_status;
    o.init_status_known = !(adopted && !jail);
    o.oom_kills = r.oom_kills;
    o.cpu_ms = r.cpu_ms;
    o.has_cgroup = cgroup != nullptr;
    o.limits = limits;
    o.cell_frame_budget = rt_limits.cell_frame_budget;
    Verdict v = Classify(o);
    r.outcome = v.outcome;
    r.exit_code = v.exit_code;
    r.signal = v.signal;
    r.reason = std::move(v.reason);
    r.setup_error = std::move(v.setup_error);
    r.session_state = std::move(v.session_state);
    // The other phases belong to the session's start.
    if (r.session_state == "kept") r.phases.run_ms = r.duration_ms;
    return r;
  }
};

Sandbox::Sandbox(std::unique_ptr<State> state) : s_(std::move(state)) {}
Sandbox::~Sandbox() = default;

Result<std::unique_ptr<Sandbox>> Sandbox::Launch(const HostContext& host,
                                                 const policy::SandboxPolicy& policy,
                                                 const LaunchOptions& options) {
  auto st = std::make_unique<State>();
  State& s = *st;
  s.t_start = Clock::now();
  s.host = &host;
  s.pol = policy;
  s.limits = policy.limits();
  const policy::Limits& limits = s.limits;
  if (policy.backend() == policy::Backend::kGvisor) {
    // Its own jail, the same supervisor (docs/adr/0021). Never the native
    // jail instead: a host without gVisor refuses the run.
    const double rlimit_cpu = options.rlimit_cpu_s.value_or(
        policy::CpuBackstopSeconds(limits, limits.wall_timeout_s, true));
    GvisorLaunchOptions go;
    go.env = options.env;
    go.rlimit_cpu_s = rlimit_cpu;
    KILN_ASSIGN_OR_RETURN(GvisorLaunch g, LaunchGvisor(host, policy, go));
    s.jail = GvisorJailOf(g);
    s.cgroup = std::move(g.cgroup);
    s.cgroup_name = std::move(g.cgroup_name);
    s.use_cgroup = true;
    s.limits_backend =
        "cgroup " + std::string(isolation::ToString(host.cgroups->mode())) + " (gvisor)";
    s.rt_parent = std::move(g.runtime);
    s.out_r = std::move(g.out);
    s.err_r = std::move(g.err);
    s.workspace_fd = std::move(g.workspace);
    s.adopted_uid = g.uid;
    s.sync_open = false;  // no setup channel: the runtime's hello is the start
    s.attached = true;    // runsc was in the cgroup before it ran
    // plan, cgroup, clone (the helper), child_setup (the helper builds the
    // root), then start: runsc's own start until the runtime's hello.
    s.t_planned = g.t_planned;
    s.t_cgroup = g.t_cgroup;
    s.t_cloned = s.t_maps = g.t_cloned;
    s.t_workspace = s.t_worker = s.t_attach_asked = s.t_attached = g.t_root;
    s.phases.plan_ms = Ms(s.t_start, s.t_planned);
    s.phases.cgroup_ms = Ms(s.t_planned, s.t_cgroup);
    s.phases.clone_ms = Ms(s.t_cgroup, s.t_cloned);
    s.setup_deadline = s.t_maps + kSetupTimeout;
    return std::unique_ptr<Sandbox>(new Sandbox(std::move(st)));
  }

  // --- Requirements: refuse, with doctor's reason, rather than run unprotected.
  const bool have_cgroup =
      host.cgroups != nullptr && host.cgroups->mode() != isolation::CgroupMode::kNone;
  if (!have_cgroup && policy.cgroup() == policy::Requirement::kRequired) {
    return FailedPrecondition(
        "the policy requires cgroup limits and this host gives none: " +
        (host.cgroups ? host.cgroups->reason() : std::string("not detected")) +
        " (see `kiln doctor`)");
  }
  if (!host.landlock && policy.landlock() == policy::Requirement::kRequired) {
    return FailedPrecondition("the policy requires Landlock: " + host.landlock_error +
                              " (see `kiln doctor`)");
  }

  // v1: begin the slow first cgroup attach now, so its RCU grace period
  // overlaps planning, clone and the child's setup (host.h).
  s.warm_up = !options.warm_up_started && host.cgroups &&
                      host.cgroups->mode() == isolation::CgroupMode::kV1 &&
                      policy.cgroup() == policy::Requirement::kRequired
                  ? StartCgroupWarmUp(host)
                  : 0;

  // --- Plan: everything the child needs, before clone (P4).
  isolation::MountLayout layout;
  layout.inside_uid = isolation::kInsideUid;
  layout.inside_gid = isolation::kInsideGid;
  layout.workspace_bytes = limits.workspace_bytes;
  layout.tmp_bytes = limits.tmp_bytes;
  layout.shm_bytes = limits.shm_bytes;
  // The input files: the child copies each from its open file (the plan's
  // memfds, or what OpenInputs opened) into the workspace.
  KILN_ASSIGN_OR_RETURN(std::vector<OpenInput> inputs,
                        OpenInputs(policy, limits.workspace_bytes, &s.keep_fds));
  for (const auto& in : inputs) layout.workspace_files.push_back({in.fd, in.name});
  for (auto& fd : OpenFontCache(host, &layout.mpl_cache_files)) s.keep_fds.push_back(std::move(fd));
  // The runtime directory is copied into the sandbox from fds opened here,
  // so it may live anywhere (mount_ns.h).
  layout.runtime_dir = host.runtime_dir;
  // kiln-sandbox-init, which pid 1 execs once the worker is forked (C22).
  if (host.libexec_dir.empty()) {
    return FailedPrecondition("kiln-sandbox-init (the sandbox's pid 1) was not found");
  }
  layout.zygote_lib_dir = host.libexec_dir;
  layout.extra_ro_paths = policy.extra_ro_mounts();
  KILN_ASSIGN_OR_RETURN(isolation::UidSlot slot, isolation::UidSlot::Acquire(host.slot_lock_dir));
  // As root, the sandbox's tmpfs mounts are made here, owned by its host ids:
  // none prints those ids in the sandbox's mountinfo (mount_ns.h).
  if (slot.privileged()) layout.tmpfs_owner.emplace(slot.outer_uid(), slot.outer_gid());
  s.slot.emplace(std::move(slot));
  KILN_ASSIGN_OR_RETURN(s.mounts, isolation::BuildMountPlan(layout));

  s.argv.Add(policy.interpreter());
  s.argv.Add("-I");  // isolated: no PYTHON* variables, no user site, no cwd on sys.path
  // No site: half of the interpreter's start (.pth files run code, and some
  // are host-specific); the launcher sets Debian's dist-packages path itself.
  s.argv.Add("-S");
  s.argv.Add("-B");  // the tree is read-only; never try to write .pyc files
  s.argv.Add(std::string(isolation::kRuntimeMountPath) + "/kiln_runtime/launch.py");
  if (!policy.preload().empty()) {
    std::string list;
    for (const auto& m : policy.preload()) list += (list.empty() ? "" : ",") + m;
    s.argv.Add("--preload");
    s.argv.Add(list);
  }
  for (auto& e : SandboxEnvironment(policy.limits().cpus, options.env)) s.envp.Add(std::move(e));

  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  s.sync_parent.Reset(sp[0]);
  UniqueFd sync_child(sp[1]);
  const int one = 1;
  if (::setsockopt(s.sync_parent.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
    return ErrnoError("setsockopt SO_PASSCRED");
  }
  // The runtime channel (docs/protocol.md section 2): fd 3 of the worker.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  s.rt_parent.Reset(sp[0]);
  UniqueFd rt_child(sp[1]);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  s.out_r.Reset(p[0]);
  UniqueFd out_w(p[1]);
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  s.err_r.Reset(p[0]);
  UniqueFd err_w(p[1]);
  KILN_TRY(SetNonBlocking(s.rt_parent.get()));
  KILN_TRY(SetNonBlocking(s.out_r.get()));
  KILN_TRY(SetNonBlocking(s.err_r.get()));

  child::ChildPlan plan;
  plan.sync_fd = sync_child.get();
  plan.code_fd = rt_child.get();
  plan.stdout_fd = out_w.get();
  plan.stderr_fd = err_w.get();
  plan.drop_groups = s.slot->privileged();
  plan.mount_ops = s.mounts.ops().data();
  plan.mount_count = s.mounts.ops().size();
  plan.new_root = s.mounts.new_root();
  plan.hostname = s.pol->hostname().c_str();
  plan.last_cap = host.last_cap;
  if (host.landlock) plan.landlock = *host.landlock;
  plan.seccomp = host.seccomp.data();
  plan.seccomp_length = host.seccomp.size();
  plan.exec_path = s.pol->interpreter().c_str();
  plan.argv = s.argv.Finish();
  plan.envp = s.envp.Finish();
  plan.cwd = isolation::kWorkspacePath;
  plan.init_path = child::kSandboxInitPath;
  s.t_planned = Clock::now();
  s.phases.plan_ms = Ms(s.t_start, s.t_planned);

  // --- cgroup. v2: before clone, which starts the child inside it. v1 (when
  // required): after clone, while the child builds its root; pid 1 is
  // attached when it asks, before it forks the worker (ADR 0004, 0012).
  // Best effort: a cgroup we may not create means the rlimit fallback, said
  // out loud.
  const bool required = policy.cgroup() == policy::Requirement::kRequired;
  const bool create_after_clone =
      have_cgroup && required && host.cgroups->mode() == isolation::CgroupMode::kV1;
  s.use_cgroup = have_cgroup;
  State* sp_state = &s;
  const isolation::CgroupLimits cgroup_limits =
      have_cgroup ? SandboxCgroupLimits(limits, SandboxIoDevices(s.mounts))
                  : isolation::CgroupLimits{};
  auto create_cgroup = [sp_state, &host, &cgroup_limits]() -> Status {
    sp_state->cgroup_name = UniqueCgroupName();
    KILN_ASSIGN_OR_RETURN(sp_state->cgroup,
                          host.cgroups->Create(sp_state->cgroup_name, cgroup_limits));
    return OkStatus();
  };
  if (have_cgroup && !create_after_clone) {
    Status created = create_cgroup();
    if (!created.ok()) {
      if (required) return std::move(created).error();
      s.use_cgroup = false;
      KILN_LOG_WARN("cannot create a cgroup here ({}); using rlimits (RLIMIT_DATA, RLIMIT_NPROC)",
                    created.error().ToString());
    }
  } else if (!have_cgroup) {
    KILN_LOG_WARN("no cgroup limits on this host ({}); using rlimits (RLIMIT_DATA, RLIMIT_NPROC)",
                  host.cgroups ? host.cgroups->reason() : "not detected");
  }
  // v1: pid 1 enters the cgroup itself before it forks the worker
  // (ChildPlan::enter_cgroup; docs/adr/0012).
  plan.enter_cgroup = s.enter_cgroup =
      s.use_cgroup && host.cgroups->mode() == isolation::CgroupMode::kV1;
  s.limits_backend =
      s.use_cgroup ? std::string("cgroup ") + std::string(isolation::ToString(host.cgroups->mode()))
                   : "rlimits";
  // Without a cgroup, RLIMIT_CPU is the only cpu limit: a session's stays
  // one cell's when the caller set one. Without a cpu-time limit of the
  // caller's, the wall clock is the limit and RLIMIT_CPU only a backstop.
  const double rlimit_cpu =
      options.rlimit_cpu_s && (s.use_cgroup || !limits.cpu_time_explicit)
          ? *options.rlimit_cpu_s
          : policy::CpuBackstopSeconds(limits, limits.wall_timeout_s, s.use_cgroup);
  plan.rlimits = isolation::BuildRlimitPlan({limits.open_files, limits.workspace_bytes, rlimit_cpu,
                                             !s.use_cgroup, limits.memory_bytes, limits.pids});
  s.t_cgroup = Clock::now();
  s.phases.cgroup_ms = Ms(s.t_planned, s.t_cgroup);

  // --- clone3 into every namespace at once.
  int pidfd = -1;
  clone_args args{};
  args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
               CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD;
  args.pidfd = sys::PointerToU64(&pidfd);
  args.exit_signal = SIGCHLD;
  if (s.cgroup && s.cgroup->clone_into_fd() >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(s.cgroup->clone_into_fd());
  }
  const pid_t pid = sys::Clone3(&args);
  if (pid == 0) child::RunChild(plan);  // never returns
  if (pid < 0) {
    const int e = errno;
    std::string hint;
    if (e == EPERM || e == ENOSPC || e == EUSERS) {
      hint = " (user namespaces may be disabled or exhausted: see `kiln doctor`)";
    }
    return ErrnoError("clone3 into new namespaces" + hint, e, SetupStep::kClone);
  }
  // From here the State's destructor kills and reaps the sandbox on any error.
  s.pid = pid;
  s.pidfd.Reset(pidfd);
  sync_child.Reset();
  rt_child.Reset();
  out_w.Reset();
  err_w.Reset();
  s.keep_fds.clear();  // the child has its copies
  s.mounts.CloseFds();
  s.t_cloned = Clock::now();
  s.phases.clone_ms = Ms(s.t_cgroup, s.t_cloned);

  KILN_TRY(isolation::WriteIdMapsFromParent(pid, *s.slot));
  {
    SyncMessage go{};
    go.tag = SyncTag::kMapsWritten;
    if (::send(s.sync_parent.get(), &go, sizeof go, MSG_NOSIGNAL) != sizeof go) {
      return ErrnoError("send to the sandbox's setup channel", errno, SetupStep::kUserMaps);
    }
  }
  s.t_maps = Clock::now();
  s.phases.maps_ms = Ms(s.t_cloned, s.t_maps);
  if (create_after_clone) {
    const auto t0 = Clock::now();
    KILN_TRY(create_cgroup());
    s.phases.cgroup_ms = Ms(t0, Clock::now());
  }
  s.setup_deadline = s.t_maps + kSetupTimeout;
  return std::unique_ptr<Sandbox>(new Sandbox(std::move(st)));
}

Result<std::unique_ptr<Sandbox>> Sandbox::Adopt(const HostContext& host,
                                                const policy::SandboxPolicy& policy,
                                                AdoptedSandbox adopted,
                                                std::optional<double> rlimit_cpu_s) {
  AdoptedSandbox& a = adopted;
  if (!a.cgroup || !a.sync || !a.runtime || !a.out || !a.err || !a.workspace || !a.init_pidfd ||
      a.init_pid <= 0 || host.cgroups == nullptr) {
    return InvalidArgument("an adopted sandbox needs its cgroup and every fd");
  }
  auto st = std::make_unique<State>();
  State& s = *st;
  s.t_start = Clock::now();
  s.host = &host;
  s.pol = policy;
  s.limits = policy.limits();
  s.adopted = true;
  s.adopted_uid = a.host_uid;
  s.use_cgroup = true;
  s.limits_backend = "cgroup " + std::string(isolation::ToString(host.cgroups->mode()));
  if (a.backend != policy.backend()) {
    return InvalidArgument("a pooled sandbox of another backend than the profile's");
  }
  if (a.backend == policy::Backend::kGvisor) {
    // A gVisor sandbox from the pool (src/zygote/gvisor_pool.cc): its keeper's
    // control socket is the setup channel's slot, its pidfd pid 1's. The
    // program's RLIMIT_CPU is the Sentry's (the pool's session budget); the
    // supervisor's own cpu accounting enforces the execution's.
    s.jail = AdoptGvisorJail(std::move(a.sync), std::move(a.init_pidfd));
    s.limits_backend += " (gvisor)";
    s.sync_open = false;  // no setup channel: the runtime's hello is the start
  } else {
    s.pid = a.init_pid;
    s.pidfd = std::move(a.init_pidfd);
    if (a.worker_pid > 0) s.worker_pidfd.Reset(sys::PidfdOpen(a.worker_pid, 0));
    {
      // The worker has run nothing of the caller's yet and forks only when a
      // cell makes it: whatever it forks later inherits this. Only lowered:
      // raising a hard limit takes CAP_SYS_RESOURCE in the host's namespace,
      // which a host's root may lack; lowering takes it in the sandbox's, which
      // our euid owns. The pidfd, open before and still naming a live process
      // after, proves the pid was not reused in between.
      if (!s.worker_pidfd) return InvalidArgument("an adopted sandbox without its worker");
      const double want = rlimit_cpu_s.value_or(
          policy::CpuBackstopSeconds(s.limits, s.limits.wall_timeout_s, true));
      rlimit now{};
      if (::prlimit(a.worker_pid, RLIMIT_CPU, nullptr, &now) != 0) {
        return ErrnoError("prlimit(RLIMIT_CPU) of the pooled worker");
      }
      auto cpu = static_cast<rlim_t>(std::ceil(want));
      if (now.rlim_max != RLIM_INFINITY && now.rlim_max > 0) cpu = std::min(cpu, now.rlim_max - 1);
      const rlimit rl{cpu, cpu + 1};
      if (::prlimit(a.worker_pid, RLIMIT_CPU, &rl, nullptr) != 0) {
        return ErrnoError("prlimit(RLIMIT_CPU) of the pooled worker");
      }
      // Refills ran below executions (ZygoteOptions::nice): an adopted sandbox
      // runs as a cold one does, at nice 0, pid 1 and every thread of the
      // worker (it has started none yet; the check costs a directory read).
      KILN_TRY(SetNiceOfEveryThread(a.worker_pid, 0));
      if (::setpriority(PRIO_PROCESS, static_cast<id_t>(a.init_pid), 0) != 0) {
        return ErrnoError("setpriority of the pooled sandbox's pid 1");
      }
      if (sys::PidfdSendSignal(s.worker_pidfd.get(), 0) != 0) {
        return MakeError(Code::kUnavailable, "the pooled worker exited before it was adopted");
      }
    }
    s.sync_parent = std::move(a.sync);
  }
  s.rt_parent = std::move(a.runtime);
  s.out_r = std::move(a.out);
  s.err_r = std::move(a.err);
  s.workspace_fd = std::move(a.workspace);
  s.cgroup = std::move(a.cgroup);
  s.attached = true;  // the pool attached it before its worker existed
  // The input files go in through the workspace fd, owned by the sandbox's
  // uid, before any line of the program runs.
  if (!policy.input_files().empty()) {
    std::vector<UniqueFd> opened;
    KILN_ASSIGN_OR_RETURN(std::vector<OpenInput> inputs,
                          OpenInputs(policy, s.limits.workspace_bytes, &opened));
    KILN_ASSIGN_OR_RETURN(ScopedFsIds ids, ScopedFsIds::Enter(a.host_uid, a.host_uid));
    const WorkspaceCaps caps{s.limits.workspace_bytes, s.limits.workspace_bytes};
    for (const auto& in : inputs) {
      // File to file in the kernel (sendfile): no copy through this process.
      KILN_TRY(WriteFileBeneath(s.workspace_fd.get(), in.name, in.fd, in.size, caps, a.host_uid,
                                a.host_uid));
    }
  }
  s.t_planned = s.t_cgroup = s.t_cloned = s.t_maps = s.t_workspace = s.t_worker = s.t_attach_asked =
      s.t_attached = Clock::now();
  s.phases.plan_ms = Ms(s.t_start, s.t_maps);
  s.setup_deadline = s.t_maps + kSetupTimeout;
  return std::unique_ptr<Sandbox>(new Sandbox(std::move(st)));
}

bool Sandbox::WaitReady(const Waiters& waiters) {
  State& s = *s_;
  while (!(s.rt.hello() && s.attached) && !s.dead()) {
    Status polled = s.Pump(s.NextWake(), waiters);
    if (!polled.ok()) {
      s.failure_text = polled.error().ToString();
      s.failure = SyncMessage{SyncTag::kFailure, 0, 0, polled.error().sys_errno, -1, 0};
      s.Kill(std::nullopt);
      break;
    }
    if (!(s.rt.hello() && s.attached) && !s.dead() && Clock::now() >= s.setup_deadline) {
      s.failure = SyncMessage{
          SyncTag::kFailure, static_cast<uint8_t>(SetupStep::kStartProgram), 0, ETIMEDOUT, -1, 0};
      s.failure_text =
          "the sandbox did not become ready within " + std::to_string(kSetupTimeout.count()) + " s";
      s.Kill(std::nullopt);
    }
  }
  FinishCgroupWarmUp(s.warm_up);
  s.warm_up = 0;
  if (s.dead()) {
    s.Teardown();
    if (s.jail && !s.rt.hello() && !s.failure && !s.kill_reason && !s.protocol_error) {
      s.failure = SyncMessage{
          SyncTag::kFailure, static_cast<uint8_t>(SetupStep::kStartProgram), 0, 0, -1, 0};
      s.failure_text = s.jail->StartFailure();
    }
    death_reason_ = s.CellResult(false).reason;
    return false;
  }
  return true;
}

ExecutionResult Sandbox::RunCell(const CellSpec& spec, const Waiters& waiters,
                                 const EventSink& sink) {
  State& s = *s_;
  ++s.cells_started;
  s.cell.emplace(spec);
  s.rt.BeginCell(s.cells_started, s.pol->display_limits(), spec.last);
  s.cell->sink = &sink;
  s.command_start_emitted = false;
  s.emitted_outputs = 0;
  if (s.dead()) {
    ExecutionResult r = s.CellResult(false);
    s.cell->sink = nullptr;
    return r;
  }
  s.SendCell();
  const bool last = spec.last;
  // A cell ends with its reply (sessions) or with the sandbox (one-shot).
  while (!s.init_exited && !s.rt.exit_code() && (last || !s.rt.replied())) {
    Status polled = s.Pump(s.NextWake(), waiters);
    if (!polled.ok()) {
      s.Violate("the supervisor's poll failed: " + polled.error().ToString());
      break;
    }
    s.CheckCellLimits();
  }
  ExecutionResult r;
  if (last) {
    s.cell->sink = nullptr;
    return r;  // Finish() gives the final result
  }
  if (s.dead()) {
    s.Teardown();
    r = s.CellResult(false);
    death_reason_ = r.reason;
  } else {
    r = s.CellResult(false);
  }
  r.limits_backend = s.limits_backend;
  s.cell->sink = nullptr;
  return r;
}

bool Sandbox::Interrupt() {
  State& s = *s_;
  if (!s.cell || s.rt.replied() || s.dead()) return false;
  s.cell->interrupted = true;
  s.SignalWorker(SIGINT);
  return true;
}

void Sandbox::Cancel() { s_->Kill(Outcome::kCancelled); }

bool Sandbox::CheckAlive() {
  State& s = *s_;
  if (s.dead()) return false;
  pollfd pf{s.exit_fd(), POLLIN, 0};
  if (::poll(&pf, 1, 0) > 0) {
    s.init_exited = true;
    s.Teardown();
    s.cell.reset();
    s.rt.EndCell();
    ExecutionResult r = s.CellResult(false);
    death_reason_ = "the sandbox ended between cells: " + r.reason;
    return false;
  }
  return true;
}

std::vector<int> Sandbox::IdleFds() const { return {s_->exit_fd()}; }

bool Sandbox::alive() const { return !s_->dead(); }

int Sandbox::workspace_fd() const { return s_->workspace_fd ? s_->workspace_fd.get() : -1; }

uid_t Sandbox::outer_uid() const { return s_->slot ? s_->slot->outer_uid() : s_->adopted_uid; }
gid_t Sandbox::outer_gid() const { return s_->slot ? s_->slot->outer_gid() : s_->adopted_uid; }

std::optional<uint64_t> Sandbox::MemoryInUse() {
  if (!s_->cgroup) return std::nullopt;
  auto usage = s_->cgroup->Usage();
  if (!usage.ok() || !usage->has_memory_current) return std::nullopt;
  return usage->memory_current;
}

const policy::SandboxPolicy& Sandbox::policy() const { return *s_->pol; }

ExecutionResult Sandbox::Finish(const FinishOptions& options) {
  State& s = *s_;
  // Early: the runtime reported its exit code and its program's exit work is
  // done; what is left (the interpreter's own teardown, the processes' exit,
  // the cgroup's removal) need not delay the caller. Its accounting comes
  // from the cgroup, which still exists.
  // Files are read only from a dead sandbox (an `exiting` frame can be
  // forged while other processes still write): a run that collects files is
  // torn down (pid 1 reaped, so every process of its pid namespace is gone)
  // before the collection and the answer.
  const bool collects = options.collect_dir.has_value() || options.return_files.has_value();
  const bool early = options.on_result && s.rt.exit_code() && s.cgroup && !s.torn_down && !collects;
  if (early) {
    s.Kill(std::nullopt);
  } else {
    s.Teardown();
  }
  ExecutionResult r = s.CellResult(true);
  if (s.cgroup && !early) {
    Status killed_rest = s.cgroup->KillAll();
    if (!killed_rest.ok()) KILN_LOG_WARN("cgroup kill: {}", killed_rest.error().ToString());
  }
  if (collects && !s.dead_confirmed) {
    r.collect_error = "the sandbox's processes were not seen to exit: no file was collected";
  } else if (options.collect_dir && s.workspace_fd) {
    auto collected = CollectWorkspace(s.workspace_fd.get(), *options.collect_dir, CollectLimits{},
                                      options.collect_only);
    // A failed copy-out must not lose the run's result: report it beside it.
    if (!collected.ok()) {
      r.collect_error = collected.error().ToString();
    } else {
      r.files = std::move(collected->files);
      r.collect_skipped = std::move(collected->skipped);
    }
  }
  if (options.return_files && s.workspace_fd && s.dead_confirmed) {
    std::vector<FileContent> files;
    CollectLimits lim;
    lim.max_total_bytes = 64ULL << 20;
    auto got = CollectWorkspaceToMemory(s.workspace_fd.get(), lim, *options.return_files, &files);
    if (!got.ok()) {
      r.collect_error = got.error().ToString();
    } else {
      r.collect_skipped = std::move(got->skipped);
      for (auto& f : files) r.returned_files.push_back({std::move(f.path), std::move(f.content)});
    }
  }
  auto remove_cgroup = [&s] {
    if (!s.cgroup) return;
    Status removed = s.cgroup->Remove();
    if (!removed.ok()) KILN_LOG_WARN("cgroup remove: {}", removed.error().ToString());
    s.cgroup.reset();
  };
  if (!early) remove_cgroup();
  const auto t_end = Clock::now();
  auto since = [](Clock::time_point a, Clock::time_point b) {
    return a.time_since_epoch().count() && b.time_since_epoch().count() ? Ms(a, b) : 0.0;
  };
  PhaseTimes& ph = s.phases;
  ph.child_setup_ms = since(s.t_maps, s.t_workspace);
  ph.exec_ms = since(s.t_workspace, s.t_worker);
  ph.attach_ms = since(s.t_attach_asked, s.t_attached);
  const Clock::time_point t_sent = s.cell ? s.cell->t_sent : Clock::time_point{};
  ph.start_ms = since(s.t_worker, t_sent);
  ph.run_ms = since(t_sent, s.t_exit);
  ph.teardown_ms = Ms(s.t_exit, t_end);
  r.phases = ph;
  if (s.cell && s.cell->spec.last) {
    r.duration_ms = since(t_sent, s.t_exit);
  }
  if (death_reason_.empty()) death_reason_ = r.reason.empty() ? "finished" : r.reason;
  if (early) {
    options.on_result(r);
    s.Teardown();
    if (s.cgroup) {
      Status killed_rest = s.cgroup->KillAll();
      if (!killed_rest.ok()) KILN_LOG_WARN("cgroup kill: {}", killed_rest.error().ToString());
    }
    remove_cgroup();
  }
  return r;
}

Result<ExecutionResult> RunSandboxed(const HostContext& host, const policy::SandboxPolicy& policy,
                                     const Program& program, const RunOptions& options) {
  if (program.source.size() > kMaxProgramBytes) {
    return InvalidArgument("program: larger than " + FormatSize(kMaxProgramBytes));
  }
  LaunchOptions launch;
  launch.env = program.env;
  launch.warm_up_started = options.warm_up_started;
  std::unique_ptr<Sandbox> sandbox;
  if (options.adopt != nullptr) {
    if (!program.env.empty()) {
      return FailedPrecondition("a pooled sandbox's environment is its zygote's");
    }
    KILN_ASSIGN_OR_RETURN(sandbox, Sandbox::Adopt(host, policy, std::move(*options.adopt)));
  } else {
    KILN_ASSIGN_OR_RETURN(sandbox, Sandbox::Launch(host, policy, launch));
  }
  Waiters waiters;
  waiters.cancel_fd = options.cancel_fd;
  if (sandbox->WaitReady(waiters)) {
    CellSpec cell;
    cell.code = program.source;
    cell.filename = program.filename;
    cell.timeout_s = policy.limits().wall_timeout_s;
    cell.last = true;
    const EventSink sink = options.on_event ? EventSink(options.on_event) : EventSink();
    (void)sandbox->RunCell(cell, waiters, sink);
  }
  // A pooled sandbox that ended (not by our hand: no timeout, limit or
  // cancel) before its program reported anything was killed from outside,
  // most often with its zygote or the pool process: kiln's fault, not the
  // program's, and not a result to give as one. The caller retries, as when
  // a supervisor dies (503 with Retry-After).
  const bool pooled = options.adopt != nullptr;
  auto lost_unheard = [pooled](const ExecutionResult& r) {
    return pooled && r.outcome == Outcome::kSetupError && r.setup_error &&
           r.setup_error->step == SetupStep::kNone && r.stdout_data.empty() &&
           r.stderr_data.empty() && r.outputs.empty();
  };
  Sandbox::FinishOptions finish;
  finish.collect_dir = options.collect_dir;
  finish.collect_only = options.collect_only;
  finish.return_files = options.return_files;
  if (options.on_result) {
    finish.on_result = [&](const ExecutionResult& r) {
      if (!lost_unheard(r)) options.on_result(r);
    };
  }
  ExecutionResult result = sandbox->Finish(finish);
  if (lost_unheard(result)) {
    return MakeError(Code::kUnavailable,
                     "the pooled sandbox ended before its program reported anything (" +
                         result.reason + "); retry");
  }
  // A layer was missing when checked from outside: a fault of kiln's or the
  // host's, not a result of the program (none of it ran).
  if (result.setup_error && result.setup_error->step == SetupStep::kVerify) {
    return Internal(result.reason);
  }
  return result;
}

Status EnsureFontCache(const HostContext& host) {
  const fs::path dir = fs::path(host.cache_dir) / "matplotlib";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind("fontlist-", 0) == 0) return OkStatus();
  }
  fs::create_directories(dir, ec);
  if (ec) return ErrnoError("create font cache directory " + dir.string(), ec.value());
  policy::PolicyBuilder b;
  b.WallTimeout(120).Memory(1ULL << 30).CgroupRequirement(policy::Requirement::kBestEffort);
  KILN_ASSIGN_OR_RETURN(policy::SandboxPolicy pol, b.Build());
  Program prog{"<font-cache>",
               "import matplotlib.font_manager\n",
               {{"MPLCONFIGDIR", std::string(isolation::kWorkspacePath) + "/mpl"}}};
  const fs::path staging =
      fs::path(host.cache_dir) / ("matplotlib.tmp-" + std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  Cleanup remove_staging([&] { fs::remove_all(staging, ec); });
  RunOptions opts;
  opts.collect_dir = staging.string();
  opts.collect_only = {"mpl"};
  KILN_ASSIGN_OR_RETURN(ExecutionResult res, RunSandboxed(host, pol, prog, opts));
  if (res.outcome != Outcome::kOk) {
    return Internal("building the matplotlib font cache failed (" + res.reason +
                    "): " + res.stderr_data.substr(0, 2000));
  }
  bool found = false;
  for (const auto& e : fs::directory_iterator(staging / "mpl", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("fontlist-", 0) != 0) continue;
    fs::rename(e.path(), dir / name, ec);  // atomic: readers see all of it or nothing
    if (ec) return ErrnoError("install font cache " + name, ec.value());
    found = true;
  }
  if (!found) return Internal("matplotlib wrote no fontlist-*.json in the sandbox");
  return OkStatus();
}

}  // namespace kiln::supervisor
