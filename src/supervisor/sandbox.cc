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
#include "ipc/frame.h"
#include "supervisor/cell_outputs.h"
#include "supervisor/sync_channel.h"
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
// All frames of one cell together (rich outputs, tracebacks): past it, the
// sandbox is killed with output_limit. Images have their own, smaller caps.
constexpr uint64_t kCellFrameBudget = 64ULL << 20;
// stdout/stderr switches the runtime may ask to order (one round trip each).
constexpr uint64_t kMaxSyncsPerCell = 1000000;

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
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
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return ErrnoError("fcntl O_NONBLOCK");
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
  if (m.err > 0) s += ": " + std::string(std::strerror(m.err));
  if (step == SetupStep::kStageFiles && m.err == ENOSPC) s += " (the files exceed the workspace size)";
  return s;
}

// A pooled sandbox's environment and tmpfs sizes were fixed when its zygote
// started: the caller (the spawner, `kiln run --pool`) only adopts one for a
// request they fit (docs/adr/0009-zygote.md). The input files go in through
// its workspace fd, owned by its uid, before any line of the program runs.
Status PrepareAdopted(const AdoptedSandbox& a, const HostContext& host,
                      const policy::SandboxPolicy& policy, const Program& program,
                      ExecutionResult* r) {
  if (!program.env.empty()) {
    return FailedPrecondition("a pooled sandbox's environment is its zygote's");
  }
  if (!a.cgroup || !a.sync || !a.runtime || !a.out || !a.err || !a.workspace || !a.init_pidfd) {
    return InvalidArgument("an adopted sandbox needs its cgroup and every fd");
  }
  r->limits_backend = "cgroup " + std::string(isolation::ToString(host.cgroups->mode()));
  if (policy.input_files().empty()) return OkStatus();
  KILN_ASSIGN_OR_RETURN(ScopedFsIds ids, ScopedFsIds::Enter(a.host_uid, a.host_uid));
  const WorkspaceCaps caps{policy.limits().workspace_bytes, policy.limits().workspace_bytes};
  for (const auto& f : policy.input_files()) {
    std::string bytes;
    if (f.content) {
      bytes = *f.content;
    } else {
      UniqueFd fd(::open(f.host_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
      struct stat st {};
      if (!fd) return ErrnoError("file: cannot open '" + f.host_path + "'");
      if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return InvalidArgument("file: '" + f.host_path + "' is not a regular file");
      }
      char buf[65536];
      ssize_t n;
      while ((n = ::read(fd.get(), buf, sizeof buf)) > 0) bytes.append(buf, static_cast<size_t>(n));
      if (n < 0) return ErrnoError("read '" + f.host_path + "'");
    }
    KILN_TRY(WriteFileBeneath(a.workspace.get(), f.name, bytes, caps, a.host_uid, a.host_uid));
  }
  return OkStatus();
}

}  // namespace

Result<ExecutionResult> RunSandboxed(const HostContext& host, const policy::SandboxPolicy& policy,
                                     const Program& program, const RunOptions& options) {
  const auto t_start = Clock::now();
  ExecutionResult r;
  const policy::Limits& limits = policy.limits();

  // --- Requirements: refuse, with doctor's reason, rather than run unprotected.
  const bool have_cgroup =
      host.cgroups != nullptr && host.cgroups->mode() != isolation::CgroupMode::kNone;
  if (!have_cgroup && policy.cgroup() == policy::Requirement::kRequired) {
    return FailedPrecondition("the policy requires cgroup limits and this host gives none: " +
                              (host.cgroups ? host.cgroups->reason() : std::string("not detected")) +
                              " (see `kiln doctor`)");
  }
  if (!host.landlock && policy.landlock() == policy::Requirement::kRequired) {
    return FailedPrecondition("the policy requires Landlock: " + host.landlock_error +
                              " (see `kiln doctor`)");
  }
  if (program.source.size() > kMaxProgramBytes) {
    return InvalidArgument("program: larger than " + FormatSize(kMaxProgramBytes));
  }

  // What the event loop drives: a sandbox launched here (the cold path), or
  // one adopted from the warm pool (src/zygote), set up by then, in its
  // cgroup, with its runtime's hello waiting.
  pid_t warm_up = 0;
  Cleanup reap_warm_up([&warm_up] { FinishCgroupWarmUp(warm_up); });
  std::vector<UniqueFd> keep_fds;
  isolation::MountPlan mounts;
  std::optional<isolation::UidSlot> slot;
  UniqueFd sync_parent, rt_parent, out_r, err_r, pidfd_owner, adopted_workspace;
  std::unique_ptr<isolation::Cgroup> cgroup;
  pid_t pid = -1;
  int pidfd = -1;
  bool reaped = false;
  Clock::time_point t_maps{};
  // Whatever happens from here, the sandbox dies (and, ours, is reaped)
  // before we return.
  Cleanup reap([&] {
    if (pid > 0 && !reaped) {
      sys::PidfdSendSignal(pidfd, SIGKILL);
      if (options.adopt == nullptr) ::waitpid(pid, nullptr, 0);
    }
  });
  if (options.adopt == nullptr) {
    // v1: begin the slow first cgroup attach now, so its RCU grace period
    // overlaps planning, clone and the child's setup (host.h).
    warm_up = !options.warm_up_started && host.cgroups &&
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
    uint64_t input_total = 0;
    for (const auto& f : policy.input_files()) {
      if (f.content) {
        // Given by content (API requests): the child copies from a memfd.
        UniqueFd fd(::memfd_create("kiln-input", MFD_CLOEXEC));
        if (!fd) return ErrnoError("memfd_create");
        if (sys::WriteAll(fd.get(), f.content->data(), f.content->size()) != 0) {
          return ErrnoError("write input file " + f.name);
        }
        input_total += f.content->size();
        layout.workspace_files.push_back({fd.get(), f.name});
        keep_fds.push_back(std::move(fd));
        continue;
      }
      UniqueFd fd(::open(f.host_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
      if (!fd) return ErrnoError("file: cannot open '" + f.host_path + "'");
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return InvalidArgument("file: '" + f.host_path + "' is not a regular file");
      }
      input_total += static_cast<uint64_t>(st.st_size);
      layout.workspace_files.push_back({fd.get(), f.name});
      keep_fds.push_back(std::move(fd));
    }
    if (input_total > limits.workspace_bytes) {
      return InvalidArgument("file: the input files (" + FormatSize(input_total) +
                             ") do not fit the workspace (--disk " +
                             FormatSize(limits.workspace_bytes) + ")");
    }
    {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(fs::path(host.cache_dir) / "matplotlib", ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("fontlist-", 0) != 0 || e.path().extension() != ".json") continue;
        UniqueFd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
        if (!fd) continue;
        layout.mpl_cache_files.push_back({fd.get(), name});
        keep_fds.push_back(std::move(fd));
      }
    }
    // The runtime directory is detached by open_tree in the child before the
    // staging root covers /tmp, so it may live anywhere (mount_ns.h).
    layout.runtime_dir = host.runtime_dir;
    layout.extra_ro_paths = policy.extra_ro_mounts();
    KILN_ASSIGN_OR_RETURN(mounts, isolation::BuildMountPlan(layout));

    KILN_ASSIGN_OR_RETURN(slot, isolation::UidSlot::Acquire(host.slot_lock_dir));

    CStringArray argv;
    argv.Add(policy.interpreter());
    argv.Add("-I");  // isolated: no PYTHON* variables, no user site, no cwd on sys.path
    // No site: half of the interpreter's start (.pth files run code, and some
    // are host-specific); the launcher sets Debian's dist-packages path itself.
    argv.Add("-S");
    argv.Add("-B");  // the tree is read-only; never try to write .pyc files
    argv.Add(std::string(isolation::kRuntimeMountPath) + "/kiln_runtime/launch.py");
    if (!policy.preload().empty()) {
      std::string list;
      for (const auto& m : policy.preload()) list += (list.empty() ? "" : ",") + m;
      argv.Add("--preload");
      argv.Add(list);
    }
    CStringArray envp;
    for (auto& e : SandboxEnvironment(limits.cpus, program.env)) envp.Add(std::move(e));

    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) return ErrnoError("socketpair");
    sync_parent.Reset(sp[0]);
    UniqueFd sync_child(sp[1]);
    const int one = 1;
    if (::setsockopt(sync_parent.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
      return ErrnoError("setsockopt SO_PASSCRED");
    }
    // The runtime channel (docs/protocol.md section 2): fd 3 of the worker.
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) return ErrnoError("socketpair");
    rt_parent.Reset(sp[0]);
    UniqueFd rt_child(sp[1]);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
    out_r.Reset(p[0]);
    UniqueFd out_w(p[1]);
    if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
    err_r.Reset(p[0]);
    UniqueFd err_w(p[1]);
    KILN_TRY(SetNonBlocking(rt_parent.get()));
    KILN_TRY(SetNonBlocking(out_r.get()));
    KILN_TRY(SetNonBlocking(err_r.get()));

    child::ChildPlan plan;
    plan.sync_fd = sync_child.get();
    plan.code_fd = rt_child.get();
    plan.stdout_fd = out_w.get();
    plan.stderr_fd = err_w.get();
    plan.drop_groups = slot->privileged();
    plan.mount_ops = mounts.ops().data();
    plan.mount_count = mounts.ops().size();
    plan.new_root = mounts.new_root();
    plan.hostname = policy.hostname().c_str();
    plan.last_cap = host.last_cap;
    if (host.landlock) plan.landlock = *host.landlock;
    plan.seccomp = host.seccomp.data();
    plan.seccomp_length = host.seccomp.size();
    plan.exec_path = policy.interpreter().c_str();
    plan.argv = argv.Finish();
    plan.envp = envp.Finish();
    plan.cwd = isolation::kWorkspacePath;
    const auto t_planned = Clock::now();
    r.phases.plan_ms = Ms(t_start, t_planned);

    // --- cgroup. v2: before clone, which starts the child inside it. v1 (when
    // required): after clone, while the child builds its root; the worker is
    // attached later (ADR 0004). Best effort: a cgroup we may not create means
    // the rlimit fallback, said out loud.
    const bool required = policy.cgroup() == policy::Requirement::kRequired;
    const bool create_after_clone =
        have_cgroup && required && host.cgroups->mode() == isolation::CgroupMode::kV1;
    bool use_cgroup = have_cgroup;
    auto create_cgroup = [&]() -> Status {
      KILN_ASSIGN_OR_RETURN(cgroup, host.cgroups->Create(
                                        UniqueCgroupName(),
                                        {limits.memory_bytes, limits.pids, limits.cpus}));
      return OkStatus();
    };
    if (have_cgroup && !create_after_clone) {
      Status created = create_cgroup();
      if (!created.ok()) {
        if (required) return std::move(created).error();
        use_cgroup = false;
        KILN_LOG_WARN("cannot create a cgroup here ({}); using rlimits (RLIMIT_DATA, RLIMIT_NPROC)",
                      created.error().ToString());
      }
    } else if (!have_cgroup) {
      KILN_LOG_WARN("no cgroup limits on this host ({}); using rlimits (RLIMIT_DATA, RLIMIT_NPROC)",
                    host.cgroups ? host.cgroups->reason() : "not detected");
    }
    r.limits_backend = use_cgroup ? std::string("cgroup ") +
                                        std::string(isolation::ToString(host.cgroups->mode()))
                                  : "rlimits";
    plan.rlimits = isolation::BuildRlimitPlan({limits.open_files, limits.workspace_bytes,
                                               limits.cpu_time_s, !use_cgroup, limits.memory_bytes,
                                               limits.pids});
    const auto t_cgroup = Clock::now();
    r.phases.cgroup_ms = Ms(t_planned, t_cgroup);

    // --- clone3 into every namespace at once.
    clone_args args{};
    args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                 CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD;
    args.pidfd = sys::PointerToU64(&pidfd);
    args.exit_signal = SIGCHLD;
    if (cgroup && cgroup->clone_into_fd() >= 0) {
      args.flags |= CLONE_INTO_CGROUP;
      args.cgroup = static_cast<uint64_t>(cgroup->clone_into_fd());
    }
    pid = sys::Clone3(&args);
    if (pid == 0) child::RunChild(plan);  // never returns
    if (pid < 0) {
      const int e = errno;
      std::string hint;
      if (e == EPERM || e == ENOSPC || e == EUSERS) {
        hint = " (user namespaces may be disabled or exhausted: see `kiln doctor`)";
      }
      return ErrnoError("clone3 into new namespaces" + hint, e, SetupStep::kClone);
    }
    pidfd_owner.Reset(pidfd);
    sync_child.Reset();
    rt_child.Reset();
    out_w.Reset();
    err_w.Reset();
    const auto t_cloned = Clock::now();
    r.phases.clone_ms = Ms(t_cgroup, t_cloned);

    KILN_TRY(isolation::WriteIdMapsFromParent(pid, *slot));
    {
      SyncMessage go{};
      go.tag = SyncTag::kMapsWritten;
      if (::send(sync_parent.get(), &go, sizeof go, MSG_NOSIGNAL) != sizeof go) {
        return ErrnoError("send to the sandbox's setup channel", errno, SetupStep::kUserMaps);
      }
    }
    t_maps = Clock::now();
    r.phases.maps_ms = Ms(t_cloned, t_maps);
    if (create_after_clone) {
      const auto t0 = Clock::now();
      KILN_TRY(create_cgroup());
      r.phases.cgroup_ms = Ms(t0, Clock::now());
    }
  } else {
    KILN_TRY(PrepareAdopted(*options.adopt, host, policy, program, &r));
    AdoptedSandbox& a = *options.adopt;
    sync_parent = std::move(a.sync);
    rt_parent = std::move(a.runtime);
    out_r = std::move(a.out);
    err_r = std::move(a.err);
    adopted_workspace = std::move(a.workspace);
    pidfd_owner = std::move(a.init_pidfd);
    pidfd = pidfd_owner.get();
    pid = a.init_pid;
    cgroup = std::move(a.cgroup);
    t_maps = Clock::now();
    r.phases.plan_ms = Ms(t_start, t_maps);
  }

  // --- Event loop: setup records, capture, program delivery, limits.
  ipc::FrameReader frames;
  std::string to_runtime;  // encoded frames not yet written
  bool hello = false, attached = options.adopt != nullptr, program_sent = false,
       shutdown_sent = false;
  CellOutputs cell(1, policy.display_limits(), kCellFrameBudget);
  std::optional<std::string> protocol_error;
  uint64_t syncs = 0;
  bool sync_open = true, out_open = true, err_open = true, rt_open = true, init_exited = false;
  UniqueFd workspace_fd = std::move(adopted_workspace);
  std::optional<int> worker_status;
  std::optional<SyncMessage> failure;
  std::string failure_text;
  std::optional<Outcome> kill_reason;
  bool killed = false;
  Clock::time_point t_workspace{}, t_worker{}, t_attached{}, t_sent{}, t_exit{};
  const auto setup_deadline = t_maps + kSetupTimeout;
  Clock::time_point run_deadline = Clock::time_point::max();
  auto next_cpu_poll = Clock::time_point::max();
  const uint64_t cpu_limit_usec = static_cast<uint64_t>(limits.cpu_time_s * 1e6);

  auto kill_sandbox = [&](std::optional<Outcome> why) {
    if (why && !kill_reason && !failure && !protocol_error) kill_reason = why;
    if (!killed) {
      killed = true;
      sys::PidfdSendSignal(pidfd, SIGKILL);
    }
  };
  auto violate = [&](std::string why) {
    if (!protocol_error && !kill_reason && !failure) protocol_error = std::move(why);
    kill_sandbox(std::nullopt);
  };
  // Output written before a frame is already in the pipes when the frame
  // arrives (the runtime flushes first): drain them so outputs keep order.
  auto drain_streams = [&] {
    bool over = false;
    if (out_open) {
      const size_t before = r.stdout_data.size();
      out_open = ReadCapped(out_r.get(), &r.stdout_data, limits.output_bytes, &over);
      cell.AddStream("stdout", std::string_view(r.stdout_data).substr(before));
      if (over) {
        r.stdout_truncated = true;
        out_open = false;
        kill_sandbox(Outcome::kOutputLimit);
      }
    }
    over = false;
    if (err_open) {
      const size_t before = r.stderr_data.size();
      err_open = ReadCapped(err_r.get(), &r.stderr_data, limits.output_bytes, &over);
      cell.AddStream("stderr", std::string_view(r.stderr_data).substr(before));
      if (over) {
        r.stderr_truncated = true;
        err_open = false;
        kill_sandbox(Outcome::kOutputLimit);
      }
    }
  };
  auto maybe_start = [&] {
    if (!hello || !attached || program_sent || killed) return;
    nlohmann::json modules = policy.import_policy().modules;
    to_runtime += ipc::EncodeMessage(
        {{"type", "execute"},
         {"cell", 1},
         {"code", program.source},
         {"filename", program.filename},
         {"import_policy",
          {{"mode", std::string(policy::ToString(policy.import_policy().mode))},
           {"modules", modules}}},
         {"limits",
          {{"max_images", policy.display_limits().max_images},
           {"max_image_bytes", policy.display_limits().max_image_bytes}}}});
    program_sent = true;
    t_sent = Clock::now();
    run_deadline = t_sent + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(limits.wall_timeout_s));
    if (cgroup) next_cpu_poll = t_sent + kCpuPollInterval;
  };
  auto handle_frames = [&] {
    for (;;) {
      auto next = frames.Next();
      if (!next.ok()) {
        violate("the runtime sent an oversized frame: " + next.error().message);
        return;
      }
      if (!next->has_value()) return;
      const std::string& payload = **next;
      drain_streams();
      auto parsed = ipc::ParseFrame(payload);
      if (!parsed.ok()) {
        violate("the runtime sent a malformed frame: " + parsed.error().message);
        return;
      }
      const std::string type = (*parsed)["type"].get<std::string>();
      if (type == "hello") {
        auto version = ipc::GetInt(*parsed, "protocol");
        if (hello || program_sent) {
          violate("the runtime said hello twice");
        } else if (!version.ok() || *version != ipc::kProtocolVersion) {
          violate("the runtime speaks protocol " +
                  (version.ok() ? std::to_string(*version) : std::string("?")) + ", kiln speaks " +
                  std::to_string(ipc::kProtocolVersion));
        } else {
          hello = true;
          maybe_start();
        }
        continue;
      }
      if (!program_sent) {
        violate("the runtime sent '" + type + "' before any cell");
        return;
      }
      if (type == "sync") {
        // The pipes were drained up to this frame (above): stdout and stderr
        // written before it are in order; let the runtime go on.
        if (cell.replied()) {
          violate("the runtime sent 'sync' after the cell's execute_reply");
          return;
        }
        if (++syncs > kMaxSyncsPerCell) {
          r.outputs_truncated = true;
          kill_sandbox(Outcome::kOutputLimit);
          return;
        }
        to_runtime += ipc::EncodeMessage({{"type", "synced"}});
        continue;
      }
      auto verdict = cell.OnFrame(*parsed, payload.size() + 4);
      if (!verdict.ok()) {
        violate("the runtime broke the protocol: " + verdict.error().message);
        return;
      }
      if (*verdict == CellOutputs::FrameVerdict::kOverBudget) {
        r.outputs_truncated = true;
        kill_sandbox(Outcome::kOutputLimit);
        return;
      }
      if (cell.replied() && !shutdown_sent) {
        // One-shot: the cell is done; the runtime exits with its status.
        to_runtime += ipc::EncodeMessage({{"type", "shutdown"}});
        shutdown_sent = true;
      }
    }
  };
  auto read_runtime = [&] {
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
      frames.Feed(chunk, static_cast<size_t>(n));
      handle_frames();
      if (protocol_error) break;
    }
  };

  while (!init_exited) {
    pollfd fds[6];
    int n = 0;
    int idx_sync = -1, idx_out = -1, idx_err = -1, idx_rt = -1;
    if (sync_open) { idx_sync = n; fds[n++] = {sync_parent.get(), POLLIN, 0}; }
    if (out_open) { idx_out = n; fds[n++] = {out_r.get(), POLLIN, 0}; }
    if (err_open) { idx_err = n; fds[n++] = {err_r.get(), POLLIN, 0}; }
    const int idx_pid = n;
    fds[n++] = {pidfd, POLLIN, 0};
    int idx_cancel = -1;
    if (options.cancel_fd >= 0 && !killed) {
      idx_cancel = n;
      fds[n++] = {options.cancel_fd, POLLIN, 0};
    }
    if (rt_open) {
      idx_rt = n;
      fds[n++] = {rt_parent.get(),
                  static_cast<short>(POLLIN | (to_runtime.empty() ? 0 : POLLOUT)), 0};
    }

    auto now = Clock::now();
    auto wake = program_sent ? std::min(run_deadline, next_cpu_poll) : setup_deadline;
    int timeout_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1, 0, 1000));
    int rc = ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
    if (rc < 0 && errno != EINTR) return ErrnoError("poll");
    now = Clock::now();

    if (idx_sync >= 0 && fds[idx_sync].revents != 0) {
      for (;;) {
        Received m = ReceiveSync(sync_parent.get());
        if (m.eof) { sync_open = false; break; }
        if (m.again) break;
        if (m.garbage) {
          failure_text = "the sandbox sent a malformed setup record";
          if (!failure) failure = SyncMessage{SyncTag::kFailure, 0, 0, EPROTO, -1, 0};
          kill_sandbox(std::nullopt);
          continue;
        }
        switch (m.msg.tag) {
          case SyncTag::kWorkspaceFd:
            if (!workspace_fd && m.fd) {
              workspace_fd = std::move(m.fd);
              t_workspace = now;
            }
            break;
          case SyncTag::kWorkerStarted:
            if (attached || m.sender <= 0) break;  // only the first counts
            t_worker = now;
            if (cgroup && cgroup->clone_into_fd() < 0) {
              // v1: move the worker now, while its interpreter starts; the
              // launcher runs nothing of the program before it arrives.
              Status moved = cgroup->Attach(m.sender);
              if (!moved.ok()) {
                failure = SyncMessage{SyncTag::kFailure,
                                      static_cast<uint8_t>(SetupStep::kCgroupAttach), 0,
                                      moved.error().sys_errno, -1, 0};
                failure_text = "attaching the sandbox to its cgroup failed: " +
                               moved.error().ToString();
                kill_sandbox(std::nullopt);
                break;
              }
            }
            t_attached = Clock::now();
            attached = true;
            maybe_start();
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
            kill_sandbox(std::nullopt);
            break;
          case SyncTag::kMapsWritten:
          case SyncTag::kAttachMe:
          case SyncTag::kAttached:
          default:
            failure_text = "the sandbox sent an unexpected setup record";
            if (!failure) failure = SyncMessage{SyncTag::kFailure, 0, 0, EPROTO, -1, 0};
            kill_sandbox(std::nullopt);
            break;
        }
      }
    }
    if (idx_rt >= 0 && (fds[idx_rt].revents & POLLOUT) != 0 && !to_runtime.empty()) {
      ssize_t w = ::send(rt_parent.get(), to_runtime.data(), to_runtime.size(), MSG_NOSIGNAL);
      if (w > 0) {
        to_runtime.erase(0, static_cast<size_t>(w));
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        to_runtime.clear();  // the runtime is gone; its exit status will tell
      }
    }
    if (idx_rt >= 0 && (fds[idx_rt].revents & (POLLIN | POLLHUP | POLLERR)) != 0) read_runtime();
    if ((idx_out >= 0 && fds[idx_out].revents != 0) || (idx_err >= 0 && fds[idx_err].revents != 0)) {
      drain_streams();
    }
    if (fds[idx_pid].revents != 0) init_exited = true;
    if (idx_cancel >= 0 && fds[idx_cancel].revents != 0) kill_sandbox(Outcome::kCancelled);

    if (!init_exited && !killed) {
      if (!program_sent && now >= setup_deadline) {
        failure = SyncMessage{SyncTag::kFailure, static_cast<uint8_t>(SetupStep::kStartProgram), 0,
                              ETIMEDOUT, -1, 0};
        failure_text = "the sandbox did not become ready within " +
                       std::to_string(kSetupTimeout.count()) + " s";
        kill_sandbox(std::nullopt);
      } else if (program_sent && now >= run_deadline) {
        kill_sandbox(Outcome::kTimeout);
      } else if (program_sent && now >= next_cpu_poll) {
        next_cpu_poll = now + kCpuPollInterval;
        auto usage = cgroup->Usage();
        if (usage.ok() && usage->has_cpu && usage->cpu_usec > cpu_limit_usec) {
          kill_sandbox(Outcome::kCpuLimit);
        }
      }
    }
  }
  if (!t_exit.time_since_epoch().count()) t_exit = Clock::now();

  // --- Teardown. pid 1's exit took the whole pid namespace with it.
  int init_status = 0;
  rusage ru{};
  // (An adopted sandbox's pid 1 is not our child: no rusage; the cgroup's
  // accounting below is what counts.)
  if (options.adopt == nullptr && ::wait4(pid, &init_status, 0, &ru) == pid) reaped = true;
  // Late records (the worker's status can race pid 1's exit) and the rest of
  // the output: every writer is dead, so these reach EOF quickly.
  const auto drain_deadline = Clock::now() + kDrainTimeout;
  while ((out_open || err_open || sync_open || (rt_open && !protocol_error)) &&
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
    if (rt_open && !protocol_error) read_runtime();
    drain_streams();
    if (out_open || err_open || rt_open) {
      pollfd pf[3] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}, {rt_parent.get(), POLLIN, 0}};
      ::poll(pf, 3, 20);
    }
  }

  if (frames.pending() > 0 && !protocol_error && !kill_reason && !failure) {
    protocol_error = "the runtime's channel ended inside a frame (" +
                     std::to_string(frames.pending()) + " bytes of a truncated frame)";
  }

  // Accounting, then make sure nothing is left in the cgroup and remove it.
  r.cpu_ms = (static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
              static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3);
  r.peak_memory_bytes = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
  if (cgroup) {
    auto usage = cgroup->Usage();
    if (usage.ok()) {
      if (usage->has_cpu) r.cpu_ms = static_cast<double>(usage->cpu_usec) / 1e3;
      if (usage->has_memory_peak) r.peak_memory_bytes = usage->memory_peak;
      r.oom_kills = usage->oom_kills;
    }
    Status killed_rest = cgroup->KillAll();
    if (!killed_rest.ok()) KILN_LOG_WARN("cgroup kill: {}", killed_rest.error().ToString());
  }

  if (options.collect_dir && workspace_fd) {
    auto collected = CollectWorkspace(workspace_fd.get(), *options.collect_dir, CollectLimits{},
                                      options.collect_only);
    // A failed copy-out must not lose the run's result: report it beside it.
    if (!collected.ok()) {
      r.collect_error = collected.error().ToString();
    } else {
      r.files = std::move(collected->files);
      r.collect_skipped = std::move(collected->skipped);
    }
  }
  if (options.return_files && workspace_fd) {
    std::vector<FileContent> files;
    CollectLimits lim;
    lim.max_total_bytes = 64ULL << 20;
    auto got = CollectWorkspaceToMemory(workspace_fd.get(), lim, *options.return_files, &files);
    if (!got.ok()) {
      r.collect_error = got.error().ToString();
    } else {
      r.collect_skipped = std::move(got->skipped);
      for (auto& f : files) r.returned_files.push_back({std::move(f.path), std::move(f.content)});
    }
  }
  if (cgroup) {
    Status removed = cgroup->Remove();
    if (!removed.ok()) KILN_LOG_WARN("cgroup remove: {}", removed.error().ToString());
  }

  r.outputs = cell.outputs();
  r.error = cell.error();
  r.execution_count = cell.execution_count();
  r.outputs_dropped = cell.dropped();
  r.policy_violation = cell.policy_violation();

  // --- The outcome: the first terminal cause wins.
  r.duration_ms = program_sent ? Ms(t_sent, t_exit) : 0;
  if (failure && !kill_reason) {
    r.outcome = Outcome::kSetupError;
    r.setup_error = SetupErrorInfo{static_cast<SetupStep>(failure->step), failure->err, failure_text};
    r.reason = failure_text;
  } else if (kill_reason) {
    r.outcome = *kill_reason;
    r.signal = SIGKILL;
    if (*kill_reason == Outcome::kTimeout) {
      r.reason = "wall-clock timeout of " + FormatSeconds(limits.wall_timeout_s);
    } else if (*kill_reason == Outcome::kCpuLimit) {
      r.reason = "cpu-time limit of " + FormatSeconds(limits.cpu_time_s);
    } else if (*kill_reason == Outcome::kCancelled) {
      r.reason = "cancelled: the caller went away";
    } else if (*kill_reason == Outcome::kOutputLimit) {
      r.reason = r.outputs_truncated
                     ? "rich outputs passed " + FormatSize(kCellFrameBudget) + " or " +
                           std::to_string(kMaxOutputsPerCell) + " outputs"
                     : "output passed " + FormatSize(limits.output_bytes) + " on " +
                           (r.stdout_truncated ? "stdout" : "stderr");
    }
  } else if (protocol_error) {
    r.outcome = Outcome::kProtocolError;
    r.signal = SIGKILL;
    r.reason = *protocol_error;
  } else if (cell.reply_status() == "policy_violation" && cell.policy_violation()) {
    const auto& v = *cell.policy_violation();
    r.outcome = Outcome::kPolicyViolation;
    r.exit_code = worker_status && WIFEXITED(*worker_status) ? WEXITSTATUS(*worker_status) : -1;
    r.reason = v.message;
  } else if (worker_status) {
    const int ws = *worker_status;
    if (WIFEXITED(ws)) {
      r.exit_code = WEXITSTATUS(ws);
      r.outcome = r.exit_code == 0 ? Outcome::kOk : Outcome::kError;
      r.reason = r.exit_code == 0 ? "exited 0" : "exited " + std::to_string(r.exit_code);
      if (r.exit_code != 0 && cell.error()) {
        r.reason = cell.error()->name + ": " + cell.error()->value;
      }
    } else if (WIFSIGNALED(ws)) {
      r.signal = WTERMSIG(ws);
      const bool cpu_spent = r.cpu_ms >= limits.cpu_time_s * 1e3;
      if (r.signal == SIGSYS) {
        r.outcome = Outcome::kPolicyViolation;
        r.reason = "killed by seccomp (a forbidden system call ABI)";
      } else if (r.signal == SIGKILL && r.oom_kills > 0) {
        r.outcome = Outcome::kMemoryLimit;
        r.reason = "out of memory: limit " + FormatSize(limits.memory_bytes);
      } else if (r.signal == SIGXCPU || (r.signal == SIGKILL && cpu_spent)) {
        r.outcome = Outcome::kCpuLimit;
        r.reason = "cpu-time limit of " + FormatSeconds(limits.cpu_time_s) + " (RLIMIT_CPU)";
      } else {
        r.outcome = Outcome::kSignaled;
        r.reason = std::string("killed by signal ") + std::to_string(r.signal);
      }
    }
  } else if (r.oom_kills > 0) {
    r.outcome = Outcome::kMemoryLimit;
    r.signal = SIGKILL;
    r.reason = "out of memory: limit " + FormatSize(limits.memory_bytes);
  } else {
    r.outcome = Outcome::kSetupError;
    std::string why = WIFSIGNALED(init_status)
                          ? "killed by signal " + std::to_string(WTERMSIG(init_status))
                          : "exited " + std::to_string(WEXITSTATUS(init_status));
    r.setup_error = SetupErrorInfo{SetupStep::kNone, 0, "the sandbox's pid 1 " + why +
                                                            " without reporting the program's status"};
    r.reason = r.setup_error->message;
  }

  const auto t_end = Clock::now();
  auto since = [](Clock::time_point a, Clock::time_point b) {
    return a.time_since_epoch().count() && b.time_since_epoch().count() ? Ms(a, b) : 0.0;
  };
  r.phases.child_setup_ms = since(t_maps, t_workspace);
  r.phases.exec_ms = since(t_workspace, t_worker);
  r.phases.attach_ms = since(t_worker, t_attached);
  r.phases.start_ms = since(t_worker, t_sent);
  r.phases.run_ms = since(t_sent, t_exit);
  r.phases.teardown_ms = Ms(t_exit, t_end);
  return r;
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
  Program prog{"<font-cache>", "import matplotlib.font_manager\n",
               {{"MPLCONFIGDIR", std::string(isolation::kWorkspacePath) + "/mpl"}}};
  const fs::path staging = fs::path(host.cache_dir) / ("matplotlib.tmp-" + std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  Cleanup remove_staging([&] { fs::remove_all(staging, ec); });
  RunOptions opts;
  opts.collect_dir = staging.string();
  opts.collect_only = {"mpl"};
  KILN_ASSIGN_OR_RETURN(ExecutionResult res, RunSandboxed(host, pol, prog, opts));
  if (res.outcome != Outcome::kOk) {
    return Internal("building the matplotlib font cache failed (" + res.reason + "): " +
                    res.stderr_data.substr(0, 2000));
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
