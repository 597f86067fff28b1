// HostContext: the facts about this host and installation that every sandbox
// of this process shares, computed once (cgroup hierarchy, Landlock ABI,
// compiled seccomp filter, where the runtime and the font cache live).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "isolation/cgroup.h"
#include "isolation/landlock.h"
#include "isolation/seccomp.h"

namespace kiln::supervisor {

struct HostContext {
  std::unique_ptr<isolation::CgroupManager> cgroups;
  std::optional<isolation::LandlockPlan> landlock;  // nullopt: unavailable
  std::string landlock_error;                       // why, when unavailable
  isolation::BpfProgram seccomp;
  int last_cap = 40;
  std::string runtime_dir;   // host directory holding kiln_runtime/
  std::string cache_dir;     // font cache etc.
  std::string slot_lock_dir; // uid slot locks (root mode)
};

// Builds the context. Fails only when a piece kiln cannot work without is
// missing (the runtime directory, a seccomp filter).
Result<HostContext> LoadHostContext();

// The runtime directory: $KILN_RUNTIME_DIR, else next to the binary
// (<exe>/../runtime for a build tree, <exe>/../share/kiln/runtime installed).
Result<std::string> FindRuntimeDir();
// $KILN_CACHE_DIR, else /var/cache/kiln (root) or $XDG_CACHE_HOME/kiln.
std::string DefaultCacheDir();

}  // namespace kiln::supervisor
