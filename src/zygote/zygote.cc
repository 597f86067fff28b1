#include "zygote/zygote.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/log.h"
#include "child/child_plan.h"
#include "child/sync_message.h"
#include "isolation/mount_ns.h"
#include "isolation/rlimits.h"
#include "isolation/user_ns.h"
#include "supervisor/sync_channel.h"
#include "sys/fd_passing.h"
#include "sys/syscalls.h"
#include "zygote/wire.h"

namespace kiln::zygote {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

static_assert(kPoolUidBase == isolation::kSlotUidBase + isolation::kSlotCount);
static_assert(kPoolUidBase + kBlockCount * kBlockSize < (1u << 31));

Status WriteProc(pid_t pid, const char* name, const std::string& content) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd ||
      ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return ErrnoError("write '" + content + "' to " + path, errno, SetupStep::kUserMaps);
  }
  return OkStatus();
}

Status SendRecord(int fd, const void* data, size_t size, const int* fds = nullptr,
                  size_t nfds = 0) {
  const ssize_t n = sys::SendWithFds(fd, data, size, fds, nfds, 0);
  if (n != static_cast<ssize_t>(size))
    return ErrnoError("send to the zygote", errno, SetupStep::kZygote);
  return OkStatus();
}

}  // namespace

Result<UidBlock> UidBlock::Acquire(const std::string& lock_dir) {
  if (::geteuid() != 0 || lock_dir.empty()) {
    return FailedPrecondition("the warm pool needs root: each sandbox gets its own host uid");
  }
  ::mkdir(lock_dir.c_str(), 0700);
  std::random_device rd;
  const unsigned start = rd() % kBlockCount;
  for (unsigned i = 0; i < kBlockCount; ++i) {
    const unsigned n = (start + i) % kBlockCount;
    const std::string path = lock_dir + "/pool-" + std::to_string(n);
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return ErrnoError("open uid block lock " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
      UidBlock b;
      b.base_ = kPoolUidBase + n * kBlockSize;
      b.lock_ = std::move(fd);
      return b;
    }
  }
  return MakeError(Code::kResourceExhausted, "no free pool uid block in " + lock_dir);
}

Result<std::string> FindZygoteLibrary() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("KILN_ZYGOTE_LIB"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back(exe.parent_path() / "libexec" / "kiln" / "libkiln_zygote.so");
      candidates.push_back(exe.parent_path().parent_path() / "libexec" / "kiln" /
                           "libkiln_zygote.so");
    }
#ifdef KILN_ZYGOTE_LIB_BUILD_PATH
    candidates.emplace_back(KILN_ZYGOTE_LIB_BUILD_PATH);
#endif
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return c.string();
  }
  return FailedPrecondition("libkiln_zygote.so not found (set KILN_ZYGOTE_LIB)");
}

Result<std::unique_ptr<Zygote>> Zygote::Start(const supervisor::HostContext& host,
                                              const ZygoteOptions& options) {
  const auto t0 = Clock::now();
  const policy::SandboxPolicy& pol = options.policy;
  const policy::Limits& limits = pol.limits();
  if (!host.landlock && pol.landlock() == policy::Requirement::kRequired) {
    return FailedPrecondition("the policy requires Landlock: " + host.landlock_error);
  }
  if (host.cgroups == nullptr || host.cgroups->mode() == isolation::CgroupMode::kNone) {
    return FailedPrecondition("the warm pool needs cgroups (each sandbox is put into its own)");
  }
  const std::string lib_dir = fs::path(options.library).parent_path().string();
  for (const char* f : {"libkiln_zygote.so", "kiln-sandbox-init"}) {
    if (::access((lib_dir + "/" + f).c_str(), R_OK) != 0) {
      return ErrnoError("zygote: " + lib_dir + "/" + f, errno, SetupStep::kZygote);
    }
  }
  KILN_ASSIGN_OR_RETURN(UidBlock block, UidBlock::Acquire(host.slot_lock_dir));

  // The jail: the cold path's mount plan, small tmpfs of its own (each child
  // mounts fresh ones over them), /proc unmasked (mount_ns.h, mask_proc).
  std::vector<UniqueFd> keep_fds;
  isolation::MountLayout layout;
  layout.inside_uid = isolation::kInsideUid;
  layout.inside_gid = isolation::kInsideGid;
  layout.workspace_bytes = 1 << 20;
  layout.tmp_bytes = 16 << 20;
  layout.shm_bytes = 1 << 20;
  layout.runtime_dir = host.runtime_dir;
  layout.extra_ro_paths = pol.extra_ro_mounts();
  layout.mask_proc = false;
  layout.zygote_lib_dir = lib_dir;
  // The jail's tmpfs, made here and owned by the zygote's host ids (the first
  // of its block): no mountinfo line of the jail names a host id.
  layout.tmpfs_owner.emplace(block.base(), block.base());
  for (auto& fd : supervisor::OpenFontCache(host, &layout.mpl_cache_files))
    keep_fds.push_back(std::move(fd));
  KILN_ASSIGN_OR_RETURN(isolation::MountPlan mounts, isolation::BuildMountPlan(layout));

  std::vector<std::string> argv_s = {
      pol.interpreter(), "-I", "-S", "-B",
      std::string(isolation::kRuntimeMountPath) + "/kiln_runtime/zygote.py"};
  if (!options.preload.empty()) {
    std::string list;
    for (const auto& m : options.preload) list += (list.empty() ? "" : ",") + m;
    argv_s.push_back("--preload");
    argv_s.push_back(list);
  }
  std::vector<std::string> envp_s = supervisor::SandboxEnvironment(limits.cpus, {});
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : envp_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  UniqueFd setup_parent(sp[0]), setup_child(sp[1]);
  const int one = 1;
  if (::setsockopt(setup_parent.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
    return ErrnoError("setsockopt SO_PASSCRED");
  }
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  UniqueFd control_parent(sp[0]), control_child(sp[1]);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd log_r(p[0]), log_w(p[1]);
  if (::fcntl(log_r.get(), F_SETFL, O_NONBLOCK) != 0) return ErrnoError("fcntl");

  child::ChildPlan plan;
  plan.sync_fd = setup_child.get();
  plan.code_fd = control_child.get();
  plan.stdout_fd = log_w.get();
  plan.stderr_fd = log_w.get();
  plan.drop_groups = true;
  plan.mount_ops = mounts.ops().data();
  plan.mount_count = mounts.ops().size();
  plan.new_root = mounts.new_root();
  plan.hostname = pol.hostname().c_str();
  plan.last_cap = host.last_cap;
  plan.rlimits.Add(RLIMIT_CORE, 0, 0);  // children lower the rest; none may exceed ours
  plan.seccomp = host.seccomp.data();
  plan.seccomp_length = host.seccomp.size();
  plan.exec_path = pol.interpreter().c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.cwd = isolation::kWorkspacePath;
  plan.zygote = true;

  int pidfd = -1;
  clone_args args{};
  args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
               CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD;
  args.pidfd = sys::PointerToU64(&pidfd);
  args.exit_signal = SIGCHLD;
  const pid_t pid = sys::Clone3(&args);
  if (pid == 0) child::RunChild(plan);  // never returns
  if (pid < 0) return ErrnoError("clone3 the zygote", errno, SetupStep::kClone);
  auto z = std::unique_ptr<Zygote>(new Zygote(std::move(block)));
  z->init_pid_ = pid;
  z->io_devices_ = supervisor::SandboxIoDevices(mounts);
  z->init_pidfd_.Reset(pidfd);
  z->setup_ = std::move(setup_parent);
  z->control_ = std::move(control_parent);
  z->log_ = std::move(log_r);
  z->profile_ = options.profile;
  z->started_ = t0;
  setup_child.Reset();
  control_child.Reset();
  log_w.Reset();

  // Z's user namespace: inside 1000 (the zygote) .. 1000 + kBlockSize - 1
  // (its children) onto the block. As root the zygote drops its groups itself.
  const std::string map = std::to_string(kZygoteUid) + " " + std::to_string(z->block_.base()) +
                          " " + std::to_string(kBlockSize) + "\n";
  KILN_TRY(WriteProc(pid, "uid_map", map));
  KILN_TRY(WriteProc(pid, "gid_map", map));
  // Before Z's pid 1 forks the zygote, which inherits it (and so do its
  // forks): refills below executions.
  if (options.nice != 0 && ::setpriority(PRIO_PROCESS, static_cast<id_t>(pid), options.nice) != 0) {
    return ErrnoError("setpriority of the zygote", errno, SetupStep::kClone);
  }
  child::SyncMessage go{};
  go.tag = child::SyncTag::kMapsWritten;
  if (::send(z->setup_.get(), &go, sizeof go, MSG_NOSIGNAL) != sizeof go) {
    return ErrnoError("send to the zygote's setup channel", errno, SetupStep::kUserMaps);
  }

  ZygoteConfig config;
  config.seccomp_length = static_cast<uint32_t>(host.seccomp.size());
  config.workspace_bytes = limits.workspace_bytes;
  config.tmp_bytes = limits.tmp_bytes;
  config.shm_bytes = limits.shm_bytes;
  z->workspace_bytes_ = limits.workspace_bytes;
  z->tmp_bytes_ = limits.tmp_bytes;
  z->shm_bytes_ = limits.shm_bytes;
  config.first_child_id = kFirstChildUid;
  config.max_slots = z->max_slots();
  config.last_cap = host.last_cap;
  // Pooled sandboxes always have a cgroup (and so a cpu quota); the
  // supervisor polls an explicit cpu-time limit, RLIMIT_CPU is the backstop.
  // The adopter lowers RLIMIT_CPU to its own (ZygoteOptions::rlimit_cpu_s).
  const double backstop = policy::CpuBackstopSeconds(limits, limits.wall_timeout_s, true);
  config.rlimits = isolation::BuildRlimitPlan({limits.open_files, limits.workspace_bytes,
                                               std::max(backstop, options.rlimit_cpu_s.value_or(0)),
                                               false, limits.memory_bytes, limits.pids});
  if (host.landlock) config.landlock = *host.landlock;
  std::snprintf(config.hostname, sizeof config.hostname, "%s", pol.hostname().c_str());
  KILN_TRY(SendRecord(z->control_.get(), &config, sizeof config));
  KILN_TRY(SendRecord(z->control_.get(), host.seccomp.data(),
                      host.seccomp.size() * sizeof(sock_filter)));
  return z;
}

Zygote::~Zygote() {
  if (init_pid_ > 0 && !reaped_) {
    sys::PidfdSendSignal(init_pidfd_.get(), SIGKILL);
    ::waitpid(init_pid_, nullptr, 0);
  }
}

Status Zygote::OnControl() {
  ZygoteReady r;
  ssize_t n;
  do {
    n = ::recv(control_.get(), &r, sizeof r, MSG_DONTWAIT | MSG_TRUNC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return OkStatus();
  if (n != sizeof r || r.magic != kWireMagic || ready_ || r.spawn > 1) {
    exited_ = true;
    return MakeError(Code::kInternal, "zygote " + profile_ + ": bad or missing ready record");
  }
  ready_ = true;
  preload_failures_ = r.preload_failures;
  spawns_ = r.spawn == 1;
  start_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
  return OkStatus();
}

Status Zygote::OnSetup() {
  for (;;) {
    supervisor::Received m = supervisor::ReceiveSync(setup_.get());
    if (m.again) return OkStatus();
    if (m.eof || m.garbage) {
      exited_ = true;
      return m.eof ? OkStatus()
                   : MakeError(Code::kInternal, "zygote " + profile_ + ": malformed setup record");
    }
    switch (m.msg.tag) {
      case child::SyncTag::kWorkerStarted:
        if (zygote_pid_ == 0) zygote_pid_ = m.sender;
        break;
      case child::SyncTag::kWorkerExited:
        exited_ = true;
        return MakeError(Code::kUnavailable, "zygote " + profile_ + " exited (wait status " +
                                                 std::to_string(m.msg.status) + ")");
      case child::SyncTag::kFailure:
        exited_ = true;
        return MakeError(Code::kInternal,
                         "zygote " + profile_ + ": setup failed at step " +
                             std::string(ToString(static_cast<SetupStep>(m.msg.step))) + ": " +
                             std::strerror(m.msg.err));
      case child::SyncTag::kWorkspaceFd:  // its workspace: not needed
      case child::SyncTag::kMapsWritten:
      case child::SyncTag::kAttachMe:
      case child::SyncTag::kAttached:
      default: break;
    }
  }
}

void Zygote::DrainLog() {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(log_.get(), buf, sizeof buf);
    if (n <= 0) break;
    log_buf_.append(buf, static_cast<size_t>(n));
    if (log_buf_.size() > 65536) log_buf_.erase(0, log_buf_.size() - 65536);
  }
  size_t nl;
  while ((nl = log_buf_.find('\n')) != std::string::npos) {
    KILN_LOG_WARN("zygote {}: {}", profile_, log_buf_.substr(0, nl));
    log_buf_.erase(0, nl + 1);
  }
}

bool Zygote::ReapIfExited() {
  if (reaped_) return true;
  if (::waitpid(init_pid_, nullptr, WNOHANG) == init_pid_) {
    reaped_ = true;
    exited_ = true;
  }
  return reaped_;
}

Status Zygote::Fork(unsigned slot, int sync, int runtime, int out, int err) {
  if (!ready()) return MakeError(Code::kUnavailable, "zygote " + profile_ + " is not ready");
  if (slot >= max_slots()) return InvalidArgument("zygote: no uid slot " + std::to_string(slot));
  ForkRequest req;
  req.slot = slot;
  const uid_t id = child_host_uid(slot);
  const unsigned attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  UniqueFd shm(sys::MakeTmpfs(shm_bytes_, 01777, id, id, attr));
  UniqueFd tmp(sys::MakeTmpfs(tmp_bytes_, 01777, id, id, attr));
  UniqueFd workspace(sys::MakeTmpfs(workspace_bytes_, 0755, id, id, attr));
  if (!shm || !tmp || !workspace) {
    return ErrnoError("zygote " + profile_ + ": make a child's tmpfs (fsopen/fsmount)", errno,
                      SetupStep::kMountTmpfs);
  }
  const int fds[kForkRequestFds] = {sync, runtime, out, err, shm.get(), tmp.get(), workspace.get()};
  return SendRecord(control_.get(), &req, sizeof req, fds, kForkRequestFds);
}

void Zygote::Retire() {
  control_.Reset();
  ready_ = false;
}

}  // namespace kiln::zygote
