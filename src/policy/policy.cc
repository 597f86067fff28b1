#include "policy/policy.h"

#include <unistd.h>

#include <cmath>
#include <set>

namespace kiln::policy {

bool IsSafeFileName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (char c : name) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

void PolicyBuilder::Fail(std::string field, std::string message) {
  if (error_) return;
  Error e = InvalidArgument(field + ": " + message);
  error_ = std::move(e);
}

PolicyBuilder& PolicyBuilder::WallTimeout(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0 || seconds > 86400) {
    Fail("timeout", "must be between 0 and 86400 seconds");
  } else {
    policy_.limits_.wall_timeout_s = seconds;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::CpuTime(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0 || seconds > 86400) {
    Fail("cpu_time", "must be between 0 and 86400 seconds");
  } else {
    policy_.limits_.cpu_time_s = seconds;
    cpu_time_set_ = true;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::Memory(uint64_t bytes) {
  if (bytes < (16ULL << 20)) {
    Fail("memory", "must be at least 16 MiB (the interpreter alone needs about 10)");
  } else {
    policy_.limits_.memory_bytes = bytes;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::Cpus(double cpus) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (!std::isfinite(cpus) || cpus < 0.01 || cpus > static_cast<double>(cores > 0 ? cores : 1) * 4) {
    Fail("cpus", "must be between 0.01 and 4x the host's cores");
  } else {
    policy_.limits_.cpus = cpus;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::Pids(uint64_t pids) {
  if (pids < 4 || pids > 65536) {
    Fail("pids", "must be between 4 and 65536");
  } else {
    policy_.limits_.pids = pids;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::OutputLimit(uint64_t bytes) {
  if (bytes < 1 || bytes > (1ULL << 30)) {
    Fail("output_limit", "must be between 1 byte and 1 GiB");
  } else {
    policy_.limits_.output_bytes = bytes;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::Disk(uint64_t bytes) {
  if (bytes < (1ULL << 20) || bytes > (64ULL << 30)) {
    Fail("disk", "must be between 1 MiB and 64 GiB");
  } else {
    policy_.limits_.workspace_bytes = bytes;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::Interpreter(std::string path) {
  if (path.empty() || path[0] != '/') {
    Fail("interpreter", "must be an absolute path (never looked up through PATH)");
  } else if (::access(path.c_str(), X_OK) != 0) {
    Fail("interpreter", "'" + path + "' is not an executable file");
  } else {
    policy_.interpreter_ = std::move(path);
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::AddFile(std::string host_path, std::string name) {
  if (name.empty()) {
    const auto slash = host_path.find_last_of('/');
    name = slash == std::string::npos ? host_path : host_path.substr(slash + 1);
  }
  if (host_path.empty()) {
    Fail("file", "empty host path");
  } else if (!IsSafeFileName(name)) {
    Fail("file", "'" + name + "' is not a valid workspace file name (one path component, no '/')");
  } else {
    policy_.input_files_.push_back({std::move(host_path), std::move(name)});
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::CgroupRequirement(Requirement r) {
  policy_.cgroup_ = r;
  return *this;
}

Result<SandboxPolicy> PolicyBuilder::Build() {
  if (built_) return Internal("PolicyBuilder::Build called twice");
  built_ = true;
  if (error_) return *error_;
  if (!cpu_time_set_) policy_.limits_.cpu_time_s = policy_.limits_.wall_timeout_s;
  std::set<std::string> names;
  for (const auto& f : policy_.input_files_) {
    if (!names.insert(f.name).second) {
      return InvalidArgument("file: '" + f.name + "' is given twice");
    }
  }
  return policy_;
}

}  // namespace kiln::policy
