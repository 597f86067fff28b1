// SandboxPolicy: everything one sandboxed run is allowed, as an immutable value.
// PolicyBuilder is the only way to make one (P9): the CLI's flags, and later the
// HTTP API's JSON and the config's profiles, all become builder calls, so every
// field is validated in exactly one place. Defaults are the strict ones (P10):
// no network, read-only root, no new privileges, tight limits.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace kiln::policy {

// A file copied into the workspace before the program starts: a host path
// (the CLI), its bytes, or an open file (API requests: a sealed memfd the
// server filled once, passed to the supervisor beside the job, docs/protocol.md
// section 5).
struct InputFile {
  std::string host_path;               // opened by the supervisor with its own privileges (CLI)
  std::string name;                    // relative path inside the workspace (IsSafeRelativePath)
  std::optional<std::string> content;  // the bytes themselves; no host path
  std::shared_ptr<const UniqueFd> fd;  // an open regular file, read from offset 0; no host path
  uint64_t size = 0;                   // fd's size
};

// The import policy the runtime applies to user code (a layer on top of the
// jail, never the boundary): open, or a deny/allow list of module names. An
// entry "os" also covers "os.path".
struct ImportPolicy {
  enum class Mode { kOpen, kDenylist, kAllowlist };
  Mode mode = Mode::kOpen;
  std::vector<std::string> modules;
};
std::string_view ToString(ImportPolicy::Mode mode);
// The reference design's denylist, the `strict` profile's.
const std::vector<std::string>& StrictDenylist();

// Caps on rich outputs (images) per cell; what is dropped is flagged.
struct DisplayLimits {
  uint64_t max_images = 16;
  uint64_t max_image_bytes = 8ULL << 20;  // total, decoded PNG bytes
};

// How a layer the policy wants must be present on the host.
// Which jail runs a sandbox (docs/adr/0021): kiln's own (namespaces,
// seccomp, Landlock) or gVisor's `runsc`, whose Sentry answers the program's
// system calls in user space. Chosen per profile (`backend` in kiln.toml).
enum class Backend { kNative, kGvisor };
std::string_view ToString(Backend backend);

enum class Requirement {
  kRequired,    // missing: the run refuses to start (kFailedPrecondition)
  kBestEffort,  // missing: the run goes on with the fallback, and says so
};

// Block I/O throttling (cgroup v2 io.max, v1 blkio.throttle.*) of the block
// devices behind the sandbox's read-only files; 0 = no limit. Set per profile
// ([profiles.NAME.io]), never per request. Generous by default: a cold import
// of the scientific stack reads about 100 MB; the caps stop one sandbox from
// taking the whole disk from the host and the other sandboxes, not normal
// work. Best effort: a host without the io/blkio controller runs without them
// (kiln doctor says so). The sandbox's writable mounts are all tmpfs, so the
// write caps only matter if a profile ever binds something writable.
struct IoLimits {
  uint64_t read_bps = 256ULL << 20;   // bytes per second
  uint64_t write_bps = 128ULL << 20;  // bytes per second
  uint64_t read_iops = 8000;
  uint64_t write_iops = 4000;
};
inline constexpr uint64_t kMinIoBps = 1ULL << 20;  // 1 MiB/s: python must still start
inline constexpr uint64_t kMinIoIops = 16;

// Limits, with their defaults. Every one is enforced by the supervisor or the
// kernel, never trusted to the sandbox.
struct Limits {
  double wall_timeout_s = 30;  // --timeout; 124 exit / status "timeout"
  // --cpu-time; total of every process. Only a limit the caller set is
  // enforced as one (status "cpu_limit"); without it the wall clock bounds
  // the cpu time, and RLIMIT_CPU is a backstop above what the wall clock
  // allows (CpuBackstopSeconds), so that a busy loop ends as a "timeout".
  double cpu_time_s = 30;
  bool cpu_time_explicit = false;
  uint64_t memory_bytes = 512ULL << 20;     // --memory; cgroup memory, swap off
  double cpus = 1.0;                        // --cpus; cgroup cpu quota
  uint64_t pids = 256;                      // --pids; processes + threads
  uint64_t output_bytes = 1ULL << 20;       // --output-limit; per stream
  uint64_t workspace_bytes = 128ULL << 20;  // --disk; tmpfs cap of the workspace
  uint64_t tmp_bytes = 64ULL << 20;         // tmpfs cap of /tmp
  uint64_t shm_bytes = 64ULL << 20;         // tmpfs cap of /dev/shm
  uint64_t open_files = 1024;               // RLIMIT_NOFILE
  IoLimits io;                              // [profiles.NAME.io]; best effort
};

// The per-process RLIMIT_CPU of a sandbox with these limits: the caller's
// cpu-time limit when it set one; otherwise a backstop that the wall clock
// always reaches first (`wall_s` of `cpus`, or of every online CPU when there
// is no cgroup quota, plus one second).
double CpuBackstopSeconds(const Limits& limits, double wall_s, bool cpu_quota);

// A session's per-process RLIMIT_CPU: all the cpu it could use in a lifetime
// of `max_lifetime_s` (cells are limited by the cgroup's accounting).
double SessionCpuBudgetSeconds(double max_lifetime_s, const Limits& limits);

class SandboxPolicy final {
 public:
  const Limits& limits() const { return limits_; }
  // Absolute path of the interpreter; never looked up through PATH.
  const std::string& interpreter() const { return interpreter_; }
  const std::vector<InputFile>& input_files() const { return input_files_; }
  // Whether the cgroup layer (memory/pids/cpu) must be present. Best effort
  // falls back to rlimits (RLIMIT_DATA, RLIMIT_NPROC, RLIMIT_CPU) and reports it.
  Requirement cgroup() const { return cgroup_; }
  Requirement landlock() const { return landlock_; }
  const std::string& hostname() const { return hostname_; }
  const ImportPolicy& import_policy() const { return import_policy_; }
  // Modules the runtime imports before the first cell (inside the cgroup).
  const std::vector<std::string>& preload() const { return preload_; }
  const DisplayLimits& display_limits() const { return display_limits_; }
  // Host directories bound read-only at the same path (absolute, existing).
  const std::vector<std::string>& extra_ro_mounts() const { return extra_ro_mounts_; }
  Backend backend() const { return backend_; }

 private:
  friend class PolicyBuilder;
  // A built policy travels to the supervisor as is (policy_codec.h).
  friend Result<SandboxPolicy> DecodePolicy(const nlohmann::json& j,
                                            std::vector<std::shared_ptr<const UniqueFd>> fds);
  SandboxPolicy() = default;
  Limits limits_;
  std::string interpreter_ = "/usr/bin/python3";
  std::vector<InputFile> input_files_;
  Requirement cgroup_ = Requirement::kRequired;
  Requirement landlock_ = Requirement::kRequired;
  std::string hostname_ = "kiln";
  ImportPolicy import_policy_;
  std::vector<std::string> preload_;
  DisplayLimits display_limits_;
  std::vector<std::string> extra_ro_mounts_;
  Backend backend_ = Backend::kNative;
};

// Fluent builder with a sticky first error: after one bad call the rest are
// ignored and Build() returns that error, naming the field.
class PolicyBuilder final {
 public:
  PolicyBuilder() = default;

  PolicyBuilder& WallTimeout(double seconds);
  PolicyBuilder& CpuTime(double seconds);
  PolicyBuilder& Memory(uint64_t bytes);
  PolicyBuilder& Cpus(double cpus);
  PolicyBuilder& Pids(uint64_t pids);
  PolicyBuilder& OutputLimit(uint64_t bytes);
  PolicyBuilder& Disk(uint64_t bytes);
  // I/O caps; 0 = no limit ("max" in kiln.toml), else at least kMinIoBps /
  // kMinIoIops. Errors name the field ("io.read_bps").
  PolicyBuilder& IoReadBps(uint64_t bytes_per_s);
  PolicyBuilder& IoWriteBps(uint64_t bytes_per_s);
  PolicyBuilder& IoReadIops(uint64_t iops);
  PolicyBuilder& IoWriteIops(uint64_t iops);
  PolicyBuilder& Interpreter(std::string path);
  // `name` empty: the basename of host_path.
  PolicyBuilder& AddFile(std::string host_path, std::string name);
  PolicyBuilder& CgroupRequirement(Requirement r);
  PolicyBuilder& JailBackend(Backend backend);
  // A file given by content (HTTP requests). `path` may have directories
  // ("data/a.csv"); IsSafeRelativePath decides. Sizes are checked at Build
  // against the workspace size.
  PolicyBuilder& AddFileContent(std::string path, std::string content);
  // The same, from an open regular file of `size` bytes (a sealed memfd).
  PolicyBuilder& AddFileFd(std::string path, std::shared_ptr<const UniqueFd> fd, uint64_t size);
  PolicyBuilder& Imports(ImportPolicy policy);
  PolicyBuilder& Preload(std::vector<std::string> modules);
  PolicyBuilder& MaxImages(uint64_t n);
  PolicyBuilder& MaxImageBytes(uint64_t bytes);
  // An absolute, existing directory, not one kiln builds itself (/, /proc,
  // /dev, /tmp, /workspace, /etc, /opt/kiln) nor beneath them.
  PolicyBuilder& AddReadOnlyMount(std::string path);

  // Checks across fields (cpu time defaults to the wall timeout when not set,
  // as a bound the wall clock enforces; input names are unique) and returns the policy, or the
  // first error.
  Result<SandboxPolicy> Build();

 private:
  void Fail(std::string field, std::string message);
  SandboxPolicy policy_;
  std::optional<Error> error_;
  bool cpu_time_set_ = false;
  bool built_ = false;
};

// True when `name` is a safe single component for the workspace: non-empty,
// at most 255 bytes, no '/', no NUL, not "." or "..".
bool IsSafeFileName(const std::string& name);
// A relative path for the workspace: 1-4095 bytes, no NUL, not absolute,
// components of 1-255 bytes that are not "." or "..", at most 16 deep.
bool IsSafeRelativePath(const std::string& path);

// A dotted Python module name: identifiers joined by '.'.
bool IsModuleName(const std::string& name);

}  // namespace kiln::policy
