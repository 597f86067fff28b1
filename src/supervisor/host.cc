#include "supervisor/host.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "isolation/caps.h"

namespace kiln::supervisor {

namespace fs = std::filesystem;

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

Result<HostContext> LoadHostContext() {
  HostContext ctx;
  KILN_ASSIGN_OR_RETURN(ctx.runtime_dir, FindRuntimeDir());
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
  ctx.slot_lock_dir = ::geteuid() == 0 ? "/run/kiln-uid-slots" : "";
  return ctx;
}

}  // namespace kiln::supervisor
