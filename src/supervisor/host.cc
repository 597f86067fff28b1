#include "supervisor/host.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "base/log.h"
#include "isolation/caps.h"
#include "isolation/mount_ns.h"

namespace kiln::supervisor {

namespace fs = std::filesystem;

std::vector<isolation::BlockDevice> SandboxIoDevices(const isolation::MountPlan& mounts) {
  std::vector<std::string> sources;
  std::set<std::string> seen;
  for (const isolation::MountOp& op : mounts.ops()) {
    const bool readable =
        op.kind == isolation::MountOpKind::kBindRo || op.kind == isolation::MountOpKind::kOpenTree;
    if (readable && op.source != nullptr && seen.insert(op.source).second)
      sources.emplace_back(op.source);
  }
  isolation::IoDeviceScan scan = isolation::ScanIoDevices(sources);
  // Once per process and set of reasons: the same binds come back every run.
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& why : scan.skipped) {
    if (logged.insert(why).second) KILN_LOG_INFO("no io limits for {}", why);
  }
  return std::move(scan.devices);
}

isolation::CgroupLimits SandboxCgroupLimits(const policy::Limits& limits,
                                            std::vector<isolation::BlockDevice> io_devices) {
  isolation::CgroupLimits c;
  c.memory_bytes = limits.memory_bytes;
  c.pids = limits.pids;
  c.cpus = limits.cpus;
  c.io = {limits.io.read_bps, limits.io.write_bps, limits.io.read_iops, limits.io.write_iops};
  c.io_devices = std::move(io_devices);
  return c;
}

std::vector<std::string> SandboxEnvironment(
    double cpus, const std::vector<std::pair<std::string, std::string>>& extra) {
  const int threads = std::max(1, static_cast<int>(std::ceil(cpus)));
  std::vector<std::pair<std::string, std::string>> env = {
      {"PATH", "/usr/local/bin:/usr/bin:/bin"},
      {"HOME", "/tmp"},
      {"TMPDIR", "/tmp"},
      {"LANG", "C.UTF-8"},
      // Agg underneath; show() and open figures become display_data.
      {"MPLBACKEND", "module://kiln_runtime.mpl_backend"},
      {"MPLCONFIGDIR", isolation::kMplConfigPath},
      {"OPENBLAS_NUM_THREADS", std::to_string(threads)},
      {"OMP_NUM_THREADS", std::to_string(threads)},
      {"MKL_NUM_THREADS", std::to_string(threads)},
  };
  for (const auto& [k, v] : extra) {
    bool replaced = false;
    for (auto& e : env) {
      if (e.first == k) {
        e.second = v;
        replaced = true;
      }
    }
    if (!replaced) env.emplace_back(k, v);
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<UniqueFd> OpenFontCache(const HostContext& host,
                                    std::vector<isolation::MountLayout::Staged>* staged) {
  std::vector<UniqueFd> fds;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(host.cache_dir) / "matplotlib", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("fontlist-", 0) != 0 || e.path().extension() != ".json") continue;
    UniqueFd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) continue;
    staged->push_back({fd.get(), name});
    fds.push_back(std::move(fd));
  }
  return fds;
}

Result<std::string> FindRuntimeDir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("KILN_RUNTIME_DIR"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back(exe.parent_path().parent_path() / "runtime");
      candidates.push_back(exe.parent_path().parent_path() / "share" / "kiln" / "runtime");
    }
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c / "kiln_runtime" / "launch.py", ec)) {
      return fs::canonical(c, ec).string();
    }
  }
  std::string tried;
  for (const auto& c : candidates) tried += " " + c.string();
  return FailedPrecondition("kiln's runtime directory (kiln_runtime/launch.py) not found; tried" +
                            tried + " (set KILN_RUNTIME_DIR)");
}

Result<std::string> FindLibexecDir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("KILN_ZYGOTE_LIB"); env != nullptr && *env != '\0') {
    candidates.push_back(fs::path(env).parent_path());
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back(exe.parent_path() / "libexec" / "kiln");
      candidates.push_back(exe.parent_path().parent_path() / "libexec" / "kiln");
    }
#ifdef KILN_LIBEXEC_BUILD_DIR
    candidates.emplace_back(KILN_LIBEXEC_BUILD_DIR);
#endif
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    const fs::path init = c / "kiln-sandbox-init";
    if (fs::is_regular_file(init, ec) && ::access(init.c_str(), X_OK) == 0) {
      return fs::canonical(c, ec).string();
    }
  }
  std::string tried;
  for (const auto& c : candidates) tried += " " + c.string();
  return FailedPrecondition("kiln-sandbox-init (the sandbox's pid 1) not found; tried" + tried +
                            " (set KILN_ZYGOTE_LIB to libkiln_zygote.so beside it)");
}

std::string DefaultCacheDir() {
  if (const char* env = std::getenv("KILN_CACHE_DIR"); env != nullptr && *env != '\0') return env;
  if (::geteuid() == 0) return "/var/cache/kiln";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/kiln";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    return std::string(home) + "/.cache/kiln";
  }
  return "/tmp/kiln-cache-" + std::to_string(::geteuid());
}

namespace {

// Our own cgroup.procs in the v1 pids hierarchy (any v1 hierarchy takes the
// same global rwsem).
std::string OwnV1Procs() {
  std::ifstream mi("/proc/self/mountinfo"), pc("/proc/self/cgroup");
  std::stringstream a, b;
  a << mi.rdbuf();
  b << pc.rdbuf();
  std::string own;
  for (const auto& [ctrl, path] : isolation::ParseProcCgroup(b.str())) {
    if (ctrl.find("pids") != std::string::npos) own = path;
  }
  if (own.empty()) return "";
  for (const auto& m : isolation::ParseCgroupMounts(a.str())) {
    for (const auto& c : m.controllers) {
      if (!m.v2 && c == "pids") return m.mount_point + (own == "/" ? "" : own) + "/cgroup.procs";
    }
  }
  return "";
}

}  // namespace

pid_t StartCgroupWarmUp(const HostContext& host) { return StartCgroupWarmUpAt(host.warm_up_procs); }

pid_t StartEarlyCgroupWarmUp() {
  if (::geteuid() != 0) return 0;  // unprivileged: no cgroup of ours to write
  return StartCgroupWarmUpAt(OwnV1Procs());
}

pid_t StartCgroupWarmUpAt(const std::string& procs) {
  if (procs.empty()) return 0;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[16];
      const int n = std::snprintf(buf, sizeof buf, "%d", static_cast<int>(::getpid()));
      (void)!::write(fd, buf, static_cast<size_t>(n));
    }
    ::_exit(0);
  }
  return pid > 0 ? pid : 0;
}

void FinishCgroupWarmUp(pid_t helper) {
  if (helper > 0) ::waitpid(helper, nullptr, 0);
}

Result<HostContext> LoadHostContext() {
  HostContext ctx;
  KILN_ASSIGN_OR_RETURN(ctx.runtime_dir, FindRuntimeDir());
  KILN_ASSIGN_OR_RETURN(ctx.libexec_dir, FindLibexecDir());
  ctx.cgroups = isolation::CgroupManager::Detect(isolation::CgroupHostOptions{});
  auto landlock = isolation::PlanLandlock();
  if (landlock.ok()) {
    ctx.landlock = *landlock;
  } else {
    ctx.landlock_error = landlock.error().ToString();
  }
  KILN_ASSIGN_OR_RETURN(ctx.seccomp, isolation::CompileSeccompFilter(isolation::SeccompOptions{}));
  ctx.last_cap = isolation::ReadLastCap();
  ctx.cache_dir = DefaultCacheDir();
  if (ctx.cgroups->mode() == isolation::CgroupMode::kV1) ctx.warm_up_procs = OwnV1Procs();
  ctx.slot_lock_dir = ::geteuid() == 0 ? "/run/kiln-uid-slots" : "";
  return ctx;
}

}  // namespace kiln::supervisor
