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

// The keeper's records on its control socket (SOCK_SEQPACKET), both ways.
// To the keeper: 'K' (kill runsc now), 'I' + a signal number (`runsc kill`).
// From it: 'i' + 0/1 (the signal was delivered), then, once, KeeperExit.
struct KeeperExit {
  char tag = 'X';
  int32_t status = 0;  // runsc's wait status
  rusage ru{};         // what wait4 reaped of it
};

// `runsc kill ID SIG` from the keeper (in the mount namespace that holds
// runsc's state): runsc delivers it to the program, the container's init.
bool RunscKill(const std::string& runsc, const std::string& id, int sig) {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::close_range(3, ~0U, 0);
    const std::string root = std::string("--root=") + kStateDir;
    const std::string signal = std::to_string(sig);
    const char* args[] = {runsc.c_str(), root.c_str(), "kill", id.c_str(), signal.c_str(), nullptr};
    char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
    ::execve(args[0], const_cast<char* const*>(args), envp);
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The keeper: what is left of the helper once runsc runs, its parent. It
// reports runsc's wait status on `ctl`, so that whoever holds that socket
// (the supervisor that launched it, or the one a pooled sandbox was handed
// to, which is nobody's parent) learns how the program ended; it runs the
// `runsc kill` of interrupts where runsc's state is; and it ends runsc when
// the socket's last holder is gone. runsc dies with it (PR_SET_PDEATHSIG).
[[noreturn]] void RunKeeper(int ctl, pid_t runsc_pid, const std::string& runsc,
                            const std::string& id) {
  const int pidfd = sys::PidfdOpen(runsc_pid, 0);
  auto finish = [&](bool kill_first) {
    if (kill_first) {
      if (pidfd >= 0)
        sys::PidfdSendSignal(pidfd, SIGKILL);
      else
        ::kill(runsc_pid, SIGKILL);
    }
    KeeperExit x;
    int status = 0;
    while (::wait4(runsc_pid, &status, 0, &x.ru) < 0 && errno == EINTR) {
    }
    x.status = status;
    (void)::send(ctl, &x, sizeof x, MSG_NOSIGNAL);
    ::_exit(0);
  };
  if (pidfd < 0) finish(false);  // nothing to watch: wait for it
  for (;;) {
    pollfd pf[2] = {{ctl, POLLIN, 0}, {pidfd, POLLIN, 0}};
    if (::poll(pf, 2, -1) < 0) {
      if (errno == EINTR) continue;
      finish(true);
    }
    if (pf[1].revents != 0) finish(false);
    if (pf[0].revents == 0) continue;
    char msg[8];
    const ssize_t n = ::recv(ctl, msg, sizeof msg, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) finish(true);  // every holder of the socket is gone
    if (msg[0] == 'K') {
      sys::PidfdSendSignal(pidfd, SIGKILL);
    } else if (msg[0] == 'I' && n == 2 && msg[1] > 0 && msg[1] < 65) {
      const char reply[2] = {'i', RunscKill(runsc, id, msg[1]) ? '1' : '0'};
      (void)::send(ctl, reply, sizeof reply, MSG_NOSIGNAL);
    }
  }
}

// The helper, after fork (of a single-threaded supervisor or pool process):
// waits for its cgroup, builds the root in a mount namespace of its own,
// sends the workspace's fd, starts runsc and becomes its keeper. Any
// failure: a text on `ctl`, exit 127.
[[noreturn]] void RunHelper(int ctl, const isolation::MountPlan& plan, const std::string& spec,
                            const std::vector<std::string>& runsc_argv, const std::string& id,
                            int rt, int out, int err, int log, uid_t uid, gid_t gid, int nice) {
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
  if (::chdir(kBundleDir) != 0) fail("chdir to the bundle");
  if (nice > 0) (void)::setpriority(PRIO_PROCESS, 0, nice);
  const pid_t keeper = ::getpid();
  const pid_t runsc = ::fork();
  if (runsc < 0) fail("fork of runsc");
  if (runsc == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != keeper) ::_exit(127);
    // runsc's fds: the channel on 0, the capture pipes on 1 and 2, its log on 3.
    if (::dup2(rt, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0 || ::dup2(log, 3) < 0)
      ::_exit(127);
    ::close_range(4, ~0U, 0);
    std::vector<char*> args;
    for (const auto& a : runsc_argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
    ::execve(args[0], args.data(), envp);
    ::_exit(127);
  }
  // The workspace's fd and runsc's host pid: the launch is done.
  struct {
    char tag = 'W';
    int32_t runsc_pid = 0;
  } started;
  started.runsc_pid = runsc;
  if (sys::SendWithFds(ctl, &started, sizeof started, &ws, 1, MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof started)) {
    ::kill(runsc, SIGKILL);
    ::_exit(127);
  }
  ::close(ws);
  // Nothing of the sandbox's but the control socket: the keeper holds no end
  // of the channel or the pipes, so their EOFs are runsc's.
  for (int fd : {rt, out, err, log}) ::close(fd);
  RunKeeper(ctl, runsc, runsc_argv[0], id);
}

// The gVisor sandbox as its supervisor sees it: everything goes through the
// keeper's control socket (runsc is the keeper's child, not ours).
class GvisorJail final : public Jail {
 public:
  GvisorJail(UniqueFd ctl, UniqueFd keeper_pidfd, pid_t our_child, UniqueFd log)
      : ctl_(std::move(ctl)),
        keeper_(std::move(keeper_pidfd)),
        our_child_(our_child),
        log_(std::move(log)) {}
  ~GvisorJail() override {
    if (!status_) {
      Kill();
      rusage ru{};
      (void)Reap(&ru);
    }
    if (our_child_ > 0) ::waitpid(our_child_, nullptr, 0);
  }
  std::string_view backend() const override { return "gvisor"; }
  // The keeper exits right after it sent runsc's status.
  int exit_fd() const override { return keeper_.get(); }

  bool Signal(int sig) override {
    if (status_ || killed_ || sig <= 0 || sig >= 65) return false;
    const char msg[2] = {'I', static_cast<char>(sig)};
    if (::send(ctl_.get(), msg, sizeof msg, MSG_NOSIGNAL) != sizeof msg) return false;
    // Its answer, after `runsc kill` ran; runsc's status may come first.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd pf{ctl_.get(), POLLIN, 0};
      if (::poll(&pf, 1, 100) <= 0) continue;
      char buf[sizeof(KeeperExit)];
      const ssize_t n = ::recv(ctl_.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return false;
      if (n == 2 && buf[0] == 'i') return buf[1] == '1';
      if (TakeExit(buf, n)) return false;
    }
    return false;
  }

  // The keeper kills runsc (its sandbox and gofer die with it: attached);
  // a keeper that cannot be told is killed itself (runsc dies with it).
  void Kill() override {
    if (killed_ || status_) return;
    killed_ = true;
    const char k = 'K';
    if (::send(ctl_.get(), &k, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
      sys::PidfdSendSignal(keeper_.get(), SIGKILL);
  }

  std::optional<int> Reap(rusage* ru) override {
    if (!status_) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!status_ && std::chrono::steady_clock::now() < deadline) {
        pollfd pf{ctl_.get(), POLLIN, 0};
        if (::poll(&pf, 1, 100) <= 0) continue;
        char buf[sizeof(KeeperExit)];
        const ssize_t n = ::recv(ctl_.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;  // the keeper died
        if (n > 0) (void)TakeExit(buf, n);
      }
      if (!status_) {
        // Not seen to end: the keeper goes, runsc with it (PR_SET_PDEATHSIG).
        sys::PidfdSendSignal(keeper_.get(), SIGKILL);
        return std::nullopt;
      }
    }
    if (ru != nullptr) *ru = ru_;
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
  bool TakeExit(const char* buf, ssize_t n) {
    if (n != static_cast<ssize_t>(sizeof(KeeperExit)) || buf[0] != 'X') return false;
    KeeperExit x;
    std::memcpy(&x, buf, sizeof x);
    status_ = x.status;
    ru_ = x.ru;
    return true;
  }

  UniqueFd ctl_, keeper_;
  pid_t our_child_;  // the keeper, when we forked it (cold); 0 for a pooled one
  UniqueFd log_;
  bool killed_ = false;
  std::optional<int> status_;
  rusage ru_{};
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

std::unique_ptr<Jail> GvisorJailOf(GvisorLaunch& launch) {
  return std::make_unique<GvisorJail>(std::move(launch.ctl), std::move(launch.keeper_pidfd),
                                      launch.keeper_pid, std::move(launch.log));
}

std::unique_ptr<Jail> AdoptGvisorJail(UniqueFd ctl, UniqueFd keeper_pidfd) {
  return std::make_unique<GvisorJail>(std::move(ctl), std::move(keeper_pidfd), 0, UniqueFd());
}

Result<GvisorLaunch> LaunchGvisor(const HostContext& host, const policy::SandboxPolicy& policy,
                                  const GvisorLaunchOptions& options) {
  const double rlimit_cpu_s = options.rlimit_cpu_s;
  const auto& env = options.env;
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
    // A pool's sandbox waits for its job with the preloads imported.
    if (options.preload_before_hello) in.argv.push_back("--preload-before-hello");
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
    RunHelper(ctl_child.get(), plan, spec, runsc_argv, id, rt_child.get(), out_w.get(), err_w.get(),
              log.get(), uid, gid, options.nice);
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
  if (got.bytes != static_cast<ssize_t>(sizeof(int32_t) * 2) || msg[0] != 'W' || got.nfds != 1) {
    if (ws >= 0) ::close(ws);
    std::string why = got.bytes > 1 && msg[0] == 'E'
                          ? std::string(msg + 1, static_cast<size_t>(got.bytes - 1))
                          : std::string("it exited");
    abandon();
    return MakeError(Code::kInternal, "the gVisor helper failed: " + LastLines(why, 400),
                     SetupStep::kMountRoot);
  }
  std::memcpy(&out.runsc_pid, msg + sizeof(int32_t), sizeof(int32_t));
  out.workspace.Reset(ws);
  out.t_root = std::chrono::steady_clock::now();
  out.keeper_pid = pid;
  out.keeper_pidfd = std::move(pidfd);
  out.ctl = std::move(ctl);
  out.log = std::move(log);
  return out;
}

}  // namespace kiln::supervisor
