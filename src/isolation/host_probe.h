// What this host gives kiln, layer by layer, for `kiln doctor` and /readyz.
// Every probe really tries the mechanism (a clone3 with the flag, a Landlock
// ABI query, a seccomp action list) rather than guessing from versions.
#pragma once

#include <string>
#include <vector>

namespace kiln::isolation {

enum class LayerState { kAvailable, kDegraded, kMissing };
std::string_view ToString(LayerState s);

struct LayerReport {
  std::string name;  // "user namespace", "cgroup", "landlock", ...
  LayerState state = LayerState::kMissing;
  std::string detail;    // why: the errno, the ABI, the controllers
  bool required = true;  // by the strict default policy
};

// Supervisor side. Forks short-lived probe children (clone3 with each
// namespace flag; they _exit at once), so call it from a single-threaded
// process.
std::vector<LayerReport> ProbeNamespacesAndKernel();

}  // namespace kiln::isolation
