#include "policy/policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

std::string_view ToString(ImportPolicy::Mode mode) {
  switch (mode) {
    case ImportPolicy::Mode::kOpen: return "open";
    case ImportPolicy::Mode::kDenylist: return "denylist";
    case ImportPolicy::Mode::kAllowlist: return "allowlist";
  }
  return "open";
}

const std::vector<std::string>& StrictDenylist() {
  static const std::vector<std::string> kList = {"os",     "subprocess", "socket",  "sys",
                                                 "ctypes", "importlib",  "pkgutil", "shutil"};
  return kList;
}

bool IsSafeRelativePath(const std::string& path) {
  if (path.empty() || path.size() >= 4096 || path[0] == '/') return false;
  if (path.find('\0') != std::string::npos) return false;
  size_t start = 0;
  int depth = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (!IsSafeFileName(path.substr(start, end - start))) return false;
    if (++depth > 16) return false;
    start = end + 1;
  }
  return true;
}

bool IsModuleName(const std::string& name) {
  if (name.empty() || name.size() > 200) return false;
  bool start = true;
  for (char c : name) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (c == '.') {
      if (start) return false;
      start = true;
    } else if (alpha || (digit && !start)) {
      start = false;
    } else {
      return false;
    }
  }
  return !start;
}

void PolicyBuilder::Fail(std::string field, std::string message) {
  if (error_) return;
  // The request calls both "file" (one of them) and "files" (all) `files`.
  std::string api_field = field == "file" ? "files" : field;
  error_ = InvalidField(std::move(api_field), field + ": " + message);
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
  if (!std::isfinite(cpus) || cpus < 0.01 ||
      cpus > static_cast<double>(cores > 0 ? cores : 1) * 4) {
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

namespace {

// One I/O cap: 0 is "max" (no limit); anything else at least `min`.
bool SetIoCap(uint64_t value, uint64_t min, uint64_t* cap) {
  if (value != 0 && value < min) return false;
  *cap = value;
  return true;
}

constexpr const char* kIoBpsRule =
    "must be at least 1 MiB per second (\"1m\"), or \"max\" for no limit";
constexpr const char* kIoIopsRule =
    "must be at least 16 operations per second, or \"max\" for no limit";

}  // namespace

PolicyBuilder& PolicyBuilder::IoReadBps(uint64_t bytes_per_s) {
  if (!SetIoCap(bytes_per_s, kMinIoBps, &policy_.limits_.io.read_bps))
    Fail("io.read_bps", kIoBpsRule);
  return *this;
}

PolicyBuilder& PolicyBuilder::IoWriteBps(uint64_t bytes_per_s) {
  if (!SetIoCap(bytes_per_s, kMinIoBps, &policy_.limits_.io.write_bps))
    Fail("io.write_bps", kIoBpsRule);
  return *this;
}

PolicyBuilder& PolicyBuilder::IoReadIops(uint64_t iops) {
  if (!SetIoCap(iops, kMinIoIops, &policy_.limits_.io.read_iops)) Fail("io.read_iops", kIoIopsRule);
  return *this;
}

PolicyBuilder& PolicyBuilder::IoWriteIops(uint64_t iops) {
  if (!SetIoCap(iops, kMinIoIops, &policy_.limits_.io.write_iops))
    Fail("io.write_iops", kIoIopsRule);
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
    policy_.input_files_.push_back(
        {std::move(host_path), std::move(name), std::nullopt, nullptr, 0});
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::AddFileContent(std::string path, std::string content) {
  if (!IsSafeRelativePath(path)) {
    Fail("files", "'" + path.substr(0, 200) +
                      "' is not a safe relative path (no '..', no absolute path, no NUL, "
                      "components of at most 255 bytes, at most 4095 bytes in all)");
  } else {
    policy_.input_files_.push_back({"", std::move(path), std::move(content), nullptr, 0});
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::AddFileFd(std::string path, std::shared_ptr<const UniqueFd> fd,
                                        uint64_t size) {
  if (fd == nullptr || !fd->valid()) {
    Fail("files", "'" + path.substr(0, 200) + "' has no open file");
  } else if (!IsSafeRelativePath(path)) {
    Fail("files", "'" + path.substr(0, 200) +
                      "' is not a safe relative path (no '..', no absolute path, no NUL, "
                      "components of at most 255 bytes, at most 4095 bytes in all)");
  } else {
    policy_.input_files_.push_back({"", std::move(path), std::nullopt, std::move(fd), size});
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::CgroupRequirement(Requirement r) {
  policy_.cgroup_ = r;
  return *this;
}

PolicyBuilder& PolicyBuilder::JailBackend(Backend backend) {
  policy_.backend_ = backend;
  return *this;
}

std::string_view ToString(Backend backend) {
  return backend == Backend::kGvisor ? "gvisor" : "native";
}

PolicyBuilder& PolicyBuilder::Imports(ImportPolicy policy) {
  for (const auto& m : policy.modules) {
    if (!IsModuleName(m)) {
      Fail("import_policy", "'" + m + "' is not a module name");
      return *this;
    }
  }
  if (policy.mode == ImportPolicy::Mode::kOpen && !policy.modules.empty()) {
    Fail("import_policy", "an open policy takes no module list");
    return *this;
  }
  policy_.import_policy_ = std::move(policy);
  return *this;
}

PolicyBuilder& PolicyBuilder::Preload(std::vector<std::string> modules) {
  for (const auto& m : modules) {
    if (!IsModuleName(m)) {
      Fail("preload", "'" + m + "' is not a module name");
      return *this;
    }
  }
  policy_.preload_ = std::move(modules);
  return *this;
}

PolicyBuilder& PolicyBuilder::MaxImages(uint64_t n) {
  if (n > 1000) {
    Fail("max_images", "must be at most 1000");
  } else {
    policy_.display_limits_.max_images = n;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::MaxImageBytes(uint64_t bytes) {
  if (bytes > (16ULL << 20)) {
    Fail("max_image_bytes", "must be at most 16 MiB (the channel's frames are at most 32 MiB)");
  } else {
    policy_.display_limits_.max_image_bytes = bytes;
  }
  return *this;
}

PolicyBuilder& PolicyBuilder::AddReadOnlyMount(std::string path) {
  if (path.empty() || path[0] != '/' || path.find("/..") != std::string::npos ||
      path.find("/./") != std::string::npos) {
    Fail("mounts", "'" + path + "' must be an absolute, normalized path");
    return *this;
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  for (const char* reserved : {"/proc", "/dev", "/tmp", "/workspace", "/etc", "/opt/kiln"}) {
    const std::string r = reserved;
    if (path == r || path.rfind(r + "/", 0) == 0) {
      Fail("mounts", "'" + path + "' is inside " + r + ", which the sandbox builds itself");
      return *this;
    }
  }
  if (path == "/" || path == "/usr" || path.rfind("/usr/", 0) == 0) {
    Fail("mounts", "'" + path + "' is / or already visible (/usr)");
    return *this;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    Fail("mounts", "'" + path + "' is not an existing directory");
    return *this;
  }
  policy_.extra_ro_mounts_.push_back(std::move(path));
  return *this;
}

Result<SandboxPolicy> PolicyBuilder::Build() {
  if (built_) return Internal("PolicyBuilder::Build called twice");
  built_ = true;
  if (error_) return *error_;
  if (!cpu_time_set_) policy_.limits_.cpu_time_s = policy_.limits_.wall_timeout_s;
  policy_.limits_.cpu_time_explicit = cpu_time_set_;
  std::set<std::string> names;
  uint64_t content_bytes = 0;
  for (const auto& f : policy_.input_files_) {
    if (!names.insert(f.name).second) {
      return InvalidField("files", "file: '" + f.name + "' is given twice");
    }
    if (f.content) content_bytes += f.content->size();
    if (f.fd) content_bytes += f.size;
  }
  // A path that is also a directory of another ("a" and "a/b") cannot exist.
  for (const auto& n : names) {
    for (size_t pos = n.find('/'); pos != std::string::npos; pos = n.find('/', pos + 1)) {
      if (names.count(n.substr(0, pos)) != 0) {
        return InvalidField("files",
                            "files: '" + n.substr(0, pos) + "' is both a file and a directory");
      }
    }
  }
  if (content_bytes > policy_.limits_.workspace_bytes) {
    return InvalidField("files", "files: the files (" + std::to_string(content_bytes) +
                                     " bytes) do not fit the workspace (" +
                                     std::to_string(policy_.limits_.workspace_bytes) + " bytes)");
  }
  return policy_;
}

double CpuBackstopSeconds(const Limits& limits, double wall_s, bool cpu_quota) {
  if (limits.cpu_time_explicit) return limits.cpu_time_s;
  double cpus = std::max(1.0, limits.cpus);
  if (!cpu_quota) {
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    cpus = std::max(cpus, online > 0 ? static_cast<double>(online) : 1.0);
  }
  return wall_s * cpus + 1;
}

double SessionCpuBudgetSeconds(double max_lifetime_s, const Limits& limits) {
  return max_lifetime_s * std::max(1.0, limits.cpus) + 1;
}

}  // namespace kiln::policy
