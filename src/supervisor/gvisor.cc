#include "supervisor/gvisor.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/base64.h"
#include "base/log.h"
#include "base/units.h"
#include "isolation/mount_ns.h"
#include "isolation/user_ns.h"
#include "supervisor/input_files.h"
#include "sys/fd_passing.h"
#include "sys/syscalls.h"

namespace kiln::supervisor {
namespace {

namespace fs = std::filesystem;

// Where the helper's private mount namespace keeps the bundle (config.json)
// and runsc's state: a tmpfs of its own over /run, seen by nothing else.
constexpr const char* kBundleDir = "/run";
constexpr const char* kStateDir = "/run/runsc";
constexpr uint64_t kBundleBytes = 8ULL << 20;
// runsc's own log (and the Sentry's, --log-fd), kept for a failed start.
constexpr size_t kLogTail = 4096;
constexpr int kHelperTimeoutMs = 20000;

std::string UniqueName(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return std::string(prefix) + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(rd() % 1000000);
}

std::string FindRunsc() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    size_t at = 0;
    while (at <= p.size()) {
      const size_t colon = p.find(':', at);
      dirs.push_back(p.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
      if (colon == std::string::npos) break;
      at = colon + 1;
    }
  }
  for (const char* d : {"/usr/bin", "/usr/sbin", "/usr/local/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    if (d.empty() || d[0] != '/') continue;
    const std::string candidate = d + "/runsc";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// What a command prints on stdout (runsc --version), bounded, or "".
std::string CommandOutput(const std::vector<std::string>& argv) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while (pid > 0 && (n = ::read(p[0], buf, sizeof buf)) > 0 && out.size() < 65536)
    out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return out;
}

std::string LastLines(std::string text, size_t max_bytes) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.size() > max_bytes) text = text.substr(text.size() - max_bytes);
  std::string clean;
  for (char c : text) clean += (c == '\n' || (c >= 0x20 && c < 0x7f)) ? c : '?';
  return clean;
}

// The mount plan's ops that make sense for a root served to gVisor: its
// /proc, /dev (but /dev/shm) and their masks are gVisor's own.
bool KeepOp(const isolation::MountOp& op, const std::string& root) {
  using K = isolation::MountOpKind;
  if (op.kind == K::kProc || op.kind == K::kMaskFile || op.kind == K::kMaskDir ||
      op.kind == K::kBindDev) {
    return false;
  }
  if (op.target == nullptr) return true;
  std::string t = op.target;
  if (t.rfind(root, 0) == 0) t = t.substr(root.size());
  if (t == "/dev" && op.kind != K::kMkdir) return false;  // its tmpfs and read-only remount
  if (t.rfind("/dev/", 0) == 0 && t != "/dev/shm") return false;
  return true;
}

int g_chown_uid = 0, g_chown_gid = 0;
int ChownEntry(const char* path, const struct stat*, int, FTW*) {
  return ::lchown(path, static_cast<uid_t>(g_chown_uid), static_cast<gid_t>(g_chown_gid)) == 0 ? 0
                                                                                               : -1;
}

// The helper, after fork (the supervisor is single-threaded): waits for its
// cgroup, builds the root in a mount namespace of its own, sends the
// workspace's fd, becomes runsc. Any failure: a text on `ctl`, exit 127.
[[noreturn]] void RunHelper(int ctl, const isolation::MountPlan& plan, const std::string& spec,
                            const std::vector<std::string>& runsc_argv, int rt, int out, int err,
                            int log, uid_t uid, gid_t gid) {
  auto fail = [ctl](const std::string& what) {
    const std::string msg = "E" + what + ": " + std::strerror(errno);
    (void)::send(ctl, msg.data(), msg.size(), MSG_NOSIGNAL);
    ::_exit(127);
  };
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  char go = 0;
  if (::recv(ctl, &go, 1, 0) != 1 || go != 'g') ::_exit(127);
  if (::unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)");
  size_t failed = 0;
  if (isolation::PrepareMountSourcesInChild(plan.ops().data(), plan.ops().size(), &failed) != 0)
    fail("preparing the extra mounts");
  // ApplyMountOpsInChild makes "/" recursively private first: nothing of
  // what follows reaches the host's namespace.
  if (isolation::ApplyMountOpsInChild(plan.ops().data(), plan.ops().size(), &failed) != 0) {
    const char* target = failed < plan.ops().size() ? plan.ops()[failed].target : "?";
    fail(std::string("building the root (") + (target ? target : "?") + ")");
  }
  const std::string root = plan.new_root();
  g_chown_uid = static_cast<int>(uid);
  g_chown_gid = static_cast<int>(gid);
  for (const char* d : {"/workspace", "/tmp"}) {
    if (::nftw((root + d).c_str(), ChownEntry, 16, FTW_PHYS) != 0) fail("chown of the workspace");
  }
  const std::string opts = "size=" + std::to_string(kBundleBytes) + ",mode=0700";
  if (::mount("tmpfs", kBundleDir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts.c_str()) != 0)
    fail("mounting the bundle's tmpfs");
  if (::mkdir(kStateDir, 0700) != 0) fail("mkdir of runsc's state");
  {
    const std::string path = std::string(kBundleDir) + "/config.json";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || sys::WriteAll(fd, spec.data(), spec.size()) != 0) fail("writing config.json");
    ::close(fd);
  }
  const int ws = ::open((root + "/workspace").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (ws < 0) fail("open of the workspace");
  const char ok = 'W';
  if (sys::SendWithFds(ctl, &ok, 1, &ws, 1, MSG_NOSIGNAL) != 1) ::_exit(127);
  ::close(ws);
  // runsc's fds: the channel on 0, the capture pipes on 1 and 2, its log on 3.
  if (::dup2(rt, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0 || ::dup2(log, 3) < 0)
    fail("dup2");
  ::close_range(4, ~0U, 0);
  if (::chdir(kBundleDir) != 0) fail("chdir to the bundle");
  std::vector<char*> args;
  for (const auto& a : runsc_argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
  ::execve(args[0], args.data(), envp);
  ::_exit(127);
}

class GvisorJail final : public Jail {
 public:
  GvisorJail(pid_t pid, UniqueFd pidfd, UniqueFd mntns, UniqueFd log, std::string runsc,
             std::string id)
      : pid_(pid),
        pidfd_(std::move(pidfd)),
        mntns_(std::move(mntns)),
        log_(std::move(log)),
        runsc_(std::move(runsc)),
        id_(std::move(id)) {}
  ~GvisorJail() override {
    if (!reaped_) {
      Kill();
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::string_view backend() const override { return "gvisor"; }
  int exit_fd() const override { return pidfd_.get(); }

  // `runsc kill ID SIG` in the helper's mount namespace (where its state
  // is): runsc delivers it to the program, the container's init.
  bool Signal(int sig) override {
    if (reaped_ || killed_) return false;
    const pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) {
      if (::setns(mntns_.get(), CLONE_NEWNS) != 0) ::_exit(126);
      const int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      const std::string root = std::string("--root=") + kStateDir;
      const std::string signal = std::to_string(sig);
      const char* args[] = {runsc_.c_str(), root.c_str(),   "kill",
                            id_.c_str(),    signal.c_str(), nullptr};
      char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
      ::execve(args[0], const_cast<char* const*>(args), envp);
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  // runsc's sandbox and gofer die with it (runsc starts them attached:
  // PR_SET_PDEATHSIG); the cgroup's kill takes whatever is left.
  void Kill() override {
    if (killed_ || reaped_) return;
    killed_ = true;
    sys::PidfdSendSignal(pidfd_.get(), SIGKILL);
  }

  std::optional<int> Reap(rusage* ru) override {
    if (reaped_) return status_;
    int status = 0;
    if (::wait4(pid_, &status, 0, ru) != pid_) return std::nullopt;
    reaped_ = true;
    status_ = status;
    return status_;
  }

  // runsc run exits with the program's exit code, or 128 + the signal that
  // killed it.
  std::optional<int> ProgramStatus() const override {
    if (!status_ || !WIFEXITED(*status_)) return std::nullopt;
    const int code = WEXITSTATUS(*status_);
    if (code > 128 && code < 128 + 65) return code - 128;  // W_STOPCODE-free: a signal number
    return (code & 0xff) << 8;
  }

  std::string StartFailure() const override {
    std::string text;
    if (log_) {
      char buf[4096];
      ssize_t n;
      off_t off = 0;
      while ((n = ::pread(log_.get(), buf, sizeof buf, off)) > 0 && text.size() < (1u << 20)) {
        text.append(buf, static_cast<size_t>(n));
        off += n;
      }
    }
    std::string why = "runsc ended before the runtime started";
    if (status_ && WIFEXITED(*status_))
      why += " (exit " + std::to_string(WEXITSTATUS(*status_)) + ")";
    if (status_ && WIFSIGNALED(*status_))
      why += " (signal " + std::to_string(WTERMSIG(*status_)) + ")";
    const std::string tail = LastLines(text, kLogTail);
    if (!tail.empty()) {
      const size_t nl = tail.rfind('\n');
      why += ": " + (nl == std::string::npos ? tail : tail.substr(nl + 1));
    }
    return why;
  }

 private:
  pid_t pid_;
  UniqueFd pidfd_, mntns_, log_;
  std::string runsc_, id_;
  bool killed_ = false, reaped_ = false;
  std::optional<int> status_;
};

Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return ErrnoError("fcntl O_NONBLOCK");
  return OkStatus();
}

}  // namespace

const GvisorHost& ProbeGvisorHost(const HostContext& host) {
  static const GvisorHost probed = [&host] {
    GvisorHost g;
    if (!host.seccomp.empty()) {
      // The native jail's filter, but memfd_create refused: gVisor has no
      // vm.memfd_noexec, so code written to a memfd would run (docs/adr/0021).
      isolation::SeccompOptions options;
      options.refuse_memfd = true;
      Result<isolation::BpfProgram> program = isolation::CompileSeccompFilter(options);
      if (!program.ok()) {
        g.missing = "the gVisor backend's seccomp filter: " + program.error().ToString();
        return g;
      }
      // struct sock_filter as the kernel reads it, byte for byte (native order).
      std::string bytes(program->size() * sizeof(sock_filter), '\0');
      std::memcpy(bytes.data(), program->data(), bytes.size());
      g.seccomp_env = "KILN_SECCOMP_BPF=" + HexEncode(bytes);
    }
    if (const char* named = std::getenv("KILN_RUNSC"); named != nullptr && *named != '\0') {
      // The operator's choice, used as given: never another runsc instead.
      if (named[0] != '/' || ::access(named, X_OK) != 0) {
        g.missing =
            std::string("KILN_RUNSC=") + named + " is not an executable file (an absolute path)";
        return g;
      }
      g.runsc = named;
    } else {
      g.runsc = FindRunsc();
    }
    if (g.runsc.empty()) {
      g.missing =
          "runsc (gVisor) was not found on PATH nor in /usr/bin, /usr/sbin "
          "(Debian: apt-get install runsc)";
      return g;
    }
    const std::string v = CommandOutput({g.runsc, "--version"});
    g.version = v.substr(0, v.find('\n'));
    if (g.version.rfind("runsc version", 0) != 0) {
      g.missing = g.runsc +
                  " --version did not print \"runsc version ...\": it is not runsc, or "
                  "it does not run here";
    } else if (::geteuid() != 0) {
      g.missing =
          "the gVisor backend needs kiln to run as root (runsc's rootful mode: its "
          "gofer and the sandbox's private mount namespace)";
    } else if (host.cgroups == nullptr || host.cgroups->mode() == isolation::CgroupMode::kNone) {
      g.missing = "the gVisor backend needs cgroups around the runsc sandbox: " +
                  (host.cgroups ? host.cgroups->reason() : std::string("not detected"));
    }
    return g;
  }();
  return probed;
}

nlohmann::json GvisorSpec(const GvisorSpecInputs& in) {
  using nlohmann::json;
  const json no_caps = json::array();
  auto rw_bind = [](const std::string& dest, const std::string& src) {
    return json{{"destination", dest},
                {"type", "bind"},
                {"source", src},
                {"options", {"rbind", "rw", "nosuid", "nodev", "noexec"}}};
  };
  json rlimits = json::array();
  auto rl = [&rlimits](const char* name, uint64_t soft, uint64_t hard) {
    rlimits.push_back({{"type", name}, {"soft", soft}, {"hard", hard}});
  };
  rl("RLIMIT_NOFILE", in.open_files, in.open_files);
  rl("RLIMIT_CORE", 0, 0);
  if (in.tasks > 0) rl("RLIMIT_NPROC", in.tasks, in.tasks);
  if (in.file_size > 0) rl("RLIMIT_FSIZE", in.file_size, in.file_size);
  const auto cpu = static_cast<uint64_t>(std::ceil(in.cpu_seconds));
  rl("RLIMIT_CPU", cpu, cpu + 1);
  return json{{"ociVersion", "1.0.2"},
              {"process",
               {{"terminal", false},
                {"user", {{"uid", in.uid}, {"gid", in.gid}, {"additionalGids", json::array()}}},
                {"args", in.argv},
                {"env", in.env},
                {"cwd", isolation::kWorkspacePath},
                {"noNewPrivileges", true},
                {"capabilities",
                 {{"bounding", no_caps},
                  {"effective", no_caps},
                  {"inheritable", no_caps},
                  {"permitted", no_caps},
                  {"ambient", no_caps}}},
                {"rlimits", rlimits}}},
              {"root", {{"path", in.root}, {"readonly", true}}},
              {"hostname", in.hostname},
              {"mounts",
               {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
                rw_bind(isolation::kWorkspacePath, in.workspace),
                // The workspace again at E2B's home directory, as on the
                // native path (isolation::kE2bHomePath, docs/e2b.md).
                rw_bind(isolation::kE2bHomePath, in.workspace),
                rw_bind(isolation::kTmpPath, in.tmp),
                rw_bind(isolation::kShmPath, in.shm)}},
              // No network namespace path: a new, empty one (--network=none as well).
              {"linux",
               {{"namespaces",
                 {{{"type", "pid"}},
                  {{"type", "network"}},
                  {{"type", "ipc"}},
                  {{"type", "uts"}},
                  {{"type", "mount"}}}}}}};
}

Result<GvisorLaunch> LaunchGvisor(const HostContext& host, const policy::SandboxPolicy& policy,
                                  const std::vector<std::pair<std::string, std::string>>& env,
                                  double rlimit_cpu_s) {
  const GvisorHost& g = ProbeGvisorHost(host);
  if (g.missing) {
    return FailedPrecondition(
        "the profile asks for the gVisor backend and this host cannot run "
        "it: " +
        *g.missing + " (see `kiln doctor`)");
  }
  const policy::Limits& limits = policy.limits();
  const uid_t uid = isolation::kInsideUid;
  const gid_t gid = isolation::kInsideGid;

  // The root: the native jail's plan (its allow-list of host paths, the
  // runtime's copy, the tmpfs mounts made here by root, the input files),
  // without the /proc and /dev that gVisor provides itself.
  std::vector<UniqueFd> keep;
  isolation::MountLayout layout;
  layout.inside_uid = uid;
  layout.inside_gid = gid;
  layout.workspace_bytes = limits.workspace_bytes;
  layout.tmp_bytes = limits.tmp_bytes;
  layout.shm_bytes = limits.shm_bytes;
  layout.tmpfs_owner.emplace(uid, gid);
  KILN_ASSIGN_OR_RETURN(std::vector<OpenInput> inputs,
                        OpenInputs(policy, limits.workspace_bytes, &keep));
  for (const auto& in : inputs) layout.workspace_files.push_back({in.fd, in.name});
  for (auto& fd : OpenFontCache(host, &layout.mpl_cache_files)) keep.push_back(std::move(fd));
  layout.runtime_dir = host.runtime_dir;
  layout.extra_ro_paths = policy.extra_ro_mounts();
  KILN_ASSIGN_OR_RETURN(isolation::MountPlan full, isolation::BuildMountPlan(layout));
  const std::string root = full.new_root();
  isolation::MountPlan plan;
  plan.set_new_root(full.new_root());
  for (const auto& op : full.ops())
    if (KeepOp(op, root)) plan.Add(op);

  // The OCI spec: the same interpreter, runtime and environment.
  GvisorSpecInputs in;
  in.argv = {policy.interpreter(),
             "-I",
             "-S",
             "-B",
             std::string(isolation::kRuntimeMountPath) + "/kiln_runtime/launch.py",
             "--channel-on-stdin"};
  if (!policy.preload().empty()) {
    std::string list;
    for (const auto& m : policy.preload()) list += (list.empty() ? "" : ",") + m;
    in.argv.push_back("--preload");
    in.argv.push_back(list);
  }
  in.env = SandboxEnvironment(limits.cpus, env);
  // kiln's own seccomp filter, the program the native jail installs, applied
  // by the Sentry (which implements seccomp) to the program: the launcher
  // installs it first and drops the variable (launch.py, --seccomp-from-env).
  if (g.seccomp_env.empty()) {
    return MakeError(Code::kInternal, "the gVisor backend needs the compiled seccomp filter");
  }
  in.env.push_back(g.seccomp_env);
  in.argv.push_back("--seccomp-from-env");
  in.uid = uid;
  in.gid = gid;
  in.hostname = policy.hostname();
  in.root = root;
  in.workspace = root + isolation::kWorkspacePath;
  in.tmp = root + isolation::kTmpPath;
  in.shm = root + isolation::kShmPath;
  in.open_files = limits.open_files;
  in.tasks = limits.pids;
  in.file_size = limits.workspace_bytes;
  in.cpu_seconds = rlimit_cpu_s;
  const std::string spec = GvisorSpec(in).dump();

  GvisorLaunch out;
  out.t_planned = std::chrono::steady_clock::now();
  out.uid = uid;
  out.gid = gid;
  // The cgroup around all of runsc: the policy's limits plus what gVisor's
  // own processes use (kGvisor*Overhead).
  policy::Limits cg = limits;
  cg.memory_bytes += kGvisorMemoryOverhead;
  cg.pids = cg.pids * kGvisorPidsPerTask + kGvisorPidsOverhead;
  out.cgroup_name = UniqueName("gv-");
  KILN_ASSIGN_OR_RETURN(
      out.cgroup,
      host.cgroups->Create(out.cgroup_name, SandboxCgroupLimits(cg, SandboxIoDevices(full))));
  out.t_cgroup = std::chrono::steady_clock::now();

  const std::string id = UniqueName("kiln-");
  const std::vector<std::string> runsc_argv = {g.runsc,
                                               std::string("--root=") + kStateDir,
                                               "--network=none",
                                               "--ignore-cgroups",
                                               std::string("--platform=") + kGvisorPlatform,
                                               "--overlay2=none",
                                               "--log-fd=3",
                                               "run",
                                               std::string("--bundle=") + kBundleDir,
                                               id};
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  UniqueFd ctl(sp[0]), ctl_child(sp[1]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  out.runtime.Reset(sp[0]);
  UniqueFd rt_child(sp[1]);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  out.out.Reset(p[0]);
  UniqueFd out_w(p[1]);
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  out.err.Reset(p[0]);
  UniqueFd err_w(p[1]);
  // Charged to the sandbox's cgroup by whoever writes it (runsc, the Sentry).
  UniqueFd log(::memfd_create("kiln-runsc-log", MFD_CLOEXEC));
  if (!log) return ErrnoError("memfd_create");
  KILN_TRY(SetNonBlocking(out.runtime.get()));
  KILN_TRY(SetNonBlocking(out.out.get()));
  KILN_TRY(SetNonBlocking(out.err.get()));

  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork of the gVisor helper", errno, SetupStep::kClone);
  if (pid == 0) {
    ctl.Reset();
    RunHelper(ctl_child.get(), plan, spec, runsc_argv, rt_child.get(), out_w.get(), err_w.get(),
              log.get(), uid, gid);
  }
  UniqueFd pidfd(sys::PidfdOpen(pid, 0));
  auto abandon = [pid] {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  };
  if (!pidfd) {
    const int e = errno;
    abandon();
    return ErrnoError("pidfd_open of the gVisor helper", e);
  }
  ctl_child.Reset();
  rt_child.Reset();
  out_w.Reset();
  err_w.Reset();
  keep.clear();
  full.CloseFds();
  // In the cgroup before anything of runsc runs: all it starts inherits it.
  if (Status attached = out.cgroup->Attach(pid); !attached.ok()) {
    abandon();
    return attached.error();
  }
  out.t_cloned = std::chrono::steady_clock::now();
  const char go = 'g';
  if (::send(ctl.get(), &go, 1, MSG_NOSIGNAL) != 1) {
    abandon();
    return ErrnoError("the gVisor helper's channel");
  }
  pollfd pf{ctl.get(), POLLIN, 0};
  if (::poll(&pf, 1, kHelperTimeoutMs) <= 0) {
    abandon();
    return Internal("the gVisor helper did not build the sandbox's root in time");
  }
  char msg[512];
  int ws = -1;
  const sys::Received got = sys::ReceiveWithFds(ctl.get(), msg, sizeof msg - 1, &ws, 1, 0);
  if (got.bytes <= 0 || msg[0] != 'W' || got.nfds != 1) {
    if (ws >= 0) ::close(ws);
    std::string why = got.bytes > 1 && msg[0] == 'E'
                          ? std::string(msg + 1, static_cast<size_t>(got.bytes - 1))
                          : std::string("it exited");
    abandon();
    return MakeError(Code::kInternal, "the gVisor helper failed: " + LastLines(why, 400),
                     SetupStep::kMountRoot);
  }
  out.workspace.Reset(ws);
  out.t_root = std::chrono::steady_clock::now();
  // Its mount namespace (runsc's state) for `runsc kill`: opened before the
  // exec can end it.
  UniqueFd mntns(
      ::open(("/proc/" + std::to_string(pid) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  if (!mntns) {
    const int e = errno;
    abandon();
    return ErrnoError("the gVisor helper's mount namespace", e);
  }
  out.jail = std::make_unique<GvisorJail>(pid, std::move(pidfd), std::move(mntns), std::move(log),
                                          g.runsc, id);
  return out;
}

}  // namespace kiln::supervisor
