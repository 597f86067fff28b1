#include "isolation/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "base/cleanup.h"
#include "base/log.h"

namespace kiln::isolation {
namespace {

// cpu.max / cpu.cfs_period_us. 100 ms is the kernel default: quotas stay
// comparable between v1 and v2 and with what operators see elsewhere.
constexpr uint64_t kCpuPeriodUsec = 100000;
// The kernel rejects quotas below 1 ms (kernel/sched/core.c, min_cfs_quota_period).
constexpr uint64_t kMinCpuQuotaUsec = 1000;
constexpr double kMaxCpus = 1 << 20;
constexpr std::string_view kEnableV2Controllers = "+memory +pids +cpu";
// Enabled on its own after those: best effort (IoSupport), never a refusal.
constexpr std::string_view kEnableV2Io = "+io";
constexpr size_t kMaxReadBytes = 4 << 20;
constexpr auto kRemoveRetryFor = std::chrono::milliseconds(200);
constexpr auto kRemoveRetryStep = std::chrono::milliseconds(5);
// A frozen cgroup cannot fork, but a fork already past cgroup_can_fork when we
// froze lands after our read of cgroup.procs: re-read a few times.
constexpr int kKillRounds = 4;

const std::vector<std::string>& LimitControllers() {
  static const std::vector<std::string> kList = {"memory", "pids", "cpu"};
  return kList;
}

// Every v1 controller the kernel knows (cgroup_subsys.h); anything else in the
// super options of a "cgroup" mount (rw, name=systemd, xattr, release_agent=,
// clone_children, cpuset_v2_mode, noprefix, none) is not a controller.
bool IsV1Controller(std::string_view opt) {
  static constexpr std::string_view kKnown[] = {
      "cpuset",  "cpu",        "cpuacct",  "io",      "blkio", "memory", "devices", "freezer",
      "net_cls", "perf_event", "net_prio", "hugetlb", "pids",  "rdma",   "misc"};
  return std::find(std::begin(kKnown), std::end(kKnown), opt) != std::end(kKnown);
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<uint64_t> ParseU64(std::string_view s) {
  s = Trim(s);
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "key value" lines (cpu.stat, memory.events, memory.oom_control).
std::optional<uint64_t> FindKeyedValue(std::string_view text, std::string_view key) {
  for (std::string_view line : Split(text, '\n')) {
    size_t space = line.find(' ');
    if (space == std::string_view::npos || line.substr(0, space) != key) continue;
    return ParseU64(line.substr(space + 1));
  }
  return std::nullopt;
}

// Joins with exactly one '/' between the parts; an empty or "/" tail is a no-op.
std::string JoinPath(std::string_view a, std::string_view b) {
  while (!b.empty() && b.front() == '/') b.remove_prefix(1);
  while (!b.empty() && b.back() == '/') b.remove_suffix(1);
  std::string out(a);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (b.empty()) return out;
  if (out.empty() || out.back() != '/') out += '/';
  out += b;
  return out;
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Unescape(std::string_view s) {
  // mountinfo escapes space, tab, newline and backslash as \ooo (fs/proc_namespace.c).
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      auto is_oct = [](char c) { return c >= '0' && c <= '7'; };
      if (is_oct(s[i + 1]) && is_oct(s[i + 2]) && is_oct(s[i + 3])) {
        out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::string JoinNames(const std::vector<std::string>& names, std::string_view sep) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}

// Controller names in cgroup.controllers / cgroup.subtree_control ("cpu memory
// pids"); a leading '+' is dropped so a fake tree may store what was written.
std::set<std::string> ControllerSet(std::string_view text) {
  std::set<std::string> out;
  for (std::string_view tok : Split(text, ' ')) {
    for (std::string_view t : Split(tok, '\n')) {
      if (!t.empty() && t.front() == '+') t.remove_prefix(1);
      if (!t.empty()) out.emplace(t);
    }
  }
  return out;
}

std::vector<std::string> Missing(const std::set<std::string>& have) {
  std::vector<std::string> out;
  for (const auto& c : LimitControllers()) {
    if (have.count(c) == 0) out.push_back(c);
  }
  return out;
}

// Maps a cgroup path from /proc/self/cgroup to a directory under `m`, or
// nullopt when the path is outside the subtree mounted there.
std::optional<std::string> MapCgroupPath(const MountinfoCgroup& m, std::string_view path) {
  std::string_view root = m.root;
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  if (root == "/") return JoinPath(m.mount_point, path);
  if (path.substr(0, root.size()) != root ||
      (path.size() > root.size() && path[root.size()] != '/')) {
    return std::nullopt;
  }
  return JoinPath(m.mount_point, path.substr(root.size()));
}

// An explicit parent is a path in the hierarchy, like those in /proc/self/cgroup.
std::string MapParent(const MountinfoCgroup& m, const std::string& parent) {
  auto mapped = MapCgroupPath(m, parent);
  return mapped ? *mapped : JoinPath(m.mount_point, parent);
}

Error WithStep(Error e, SetupStep step) {
  if (e.step == SetupStep::kNone) e.step = step;
  return e;
}

Status Tag(Status s, SetupStep step) {
  if (s.ok()) return s;
  return WithStep(std::move(s).error(), step);
}

Status WriteControl(CgroupFs& fs, const std::string& dir, std::string_view file,
                    std::string_view value, SetupStep step = SetupStep::kCgroupCreate) {
  return Tag(fs.WriteFile(JoinPath(dir, file), value), step);
}

// Creates `dir` and any missing ancestors (the parents made on demand). EEXIST
// is fine: another kiln may be creating the same parent concurrently.
Status MakeDirs(CgroupFs& fs, const std::string& dir) {
  std::vector<std::string> missing;
  for (std::string d = dir; d.size() > 1 && !fs.Exists(d); d = DirName(d)) missing.push_back(d);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    Status s = fs.MakeDir(*it);
    if (!s.ok() && s.error().sys_errno != EEXIST)
      return Tag(std::move(s), SetupStep::kCgroupCreate);
  }
  return OkStatus();
}

std::vector<pid_t> ParsePids(std::string_view text) {
  std::vector<pid_t> out;
  for (std::string_view line : Split(text, '\n')) {
    auto v = ParseU64(line);
    if (v && *v > 0 && *v <= static_cast<uint64_t>(INT32_MAX))
      out.push_back(static_cast<pid_t>(*v));
  }
  return out;
}

// SIGKILLs every pid listed in `procs_file` until a re-read shows none we have
// not signalled. The pids are in our pid namespace (we read the file), and the
// caller has frozen the cgroup where it can, so a listed pid cannot exit and be
// reused before the kill.
Status KillListed(CgroupFs& fs, const std::string& procs_file) {
  std::set<pid_t> signalled;
  Status first_error;
  for (int round = 0; round < kKillRounds; ++round) {
    auto text = fs.ReadFile(procs_file);
    if (!text.ok()) {
      if (text.error().sys_errno == ENOENT) return OkStatus();  // already removed
      return std::move(text).error();
    }
    bool any_new = false;
    for (pid_t pid : ParsePids(*text)) {
      if (!signalled.insert(pid).second) continue;
      any_new = true;
      if (::kill(pid, SIGKILL) != 0 && errno != ESRCH && first_error.ok()) {
        first_error =
            ErrnoError("kill(" + std::to_string(pid) + ", SIGKILL) listed in " + procs_file);
      }
    }
    if (!any_new) break;
  }
  return first_error;
}

// rmdir, retrying on EBUSY: a killed task leaves the cgroup only once it has
// finished exiting (cgroup_exit), which can lag the SIGKILL by milliseconds.
Status RemoveDirRetrying(CgroupFs& fs, const std::string& dir) {
  auto deadline = std::chrono::steady_clock::now() + kRemoveRetryFor;
  for (;;) {
    Status s = fs.RemoveDir(dir);
    if (s.ok()) return s;
    int err = s.error().sys_errno;
    if (err == ENOENT) return OkStatus();
    if (err != EBUSY || std::chrono::steady_clock::now() >= deadline) return s;
    std::this_thread::sleep_for(kRemoveRetryStep);
  }
}

Status ValidateName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return InvalidArgument("cgroup name \"" + std::string(name) + "\" is not one path component");
  }
  return OkStatus();
}

Result<uint64_t> CpuQuotaUsec(double cpus) {
  if (!(cpus > 0) || cpus > kMaxCpus) {
    return InvalidArgument("cgroup cpu limit " + std::to_string(cpus) + " is out of range");
  }
  auto quota = static_cast<uint64_t>(std::llround(cpus * static_cast<double>(kCpuPeriodUsec)));
  if (quota < kMinCpuQuotaUsec) {
    return InvalidArgument("cgroup cpu limit " + std::to_string(cpus) +
                           " is below the kernel's 1 ms quota (minimum 0.01 cpus)");
  }
  return quota;
}

// ---------------------------------------------------------------------------

class CgroupV2 final : public Cgroup {
 public:
  CgroupV2(std::shared_ptr<CgroupFs> fs, std::string dir)
      : fs_(std::move(fs)), dir_(std::move(dir)) {}
  ~CgroupV2() override {
    if (removed_) return;
    // Destruction must not fail: whatever is left is logged for the operator.
    if (Status s = KillAll(); !s.ok())
      KILN_LOG_WARN("cgroup {}: kill: {}", Describe(), s.error().ToString());
    if (Status s = Remove(); !s.ok())
      KILN_LOG_WARN("cgroup {}: remove: {}", Describe(), s.error().ToString());
  }

  void set_dir_fd(UniqueFd fd) { dir_fd_ = std::move(fd); }
  const std::string& dir() const { return dir_; }

  int clone_into_fd() const override { return dir_fd_.get(); }

  Status Attach(pid_t pid) override {
    if (removed_) return FailedPrecondition("cgroup " + dir_ + " was removed");
    return WriteControl(*fs_, dir_, "cgroup.procs", std::to_string(pid), SetupStep::kCgroupAttach);
  }

  Result<CgroupUsage> Usage() override {
    if (removed_) return FailedPrecondition("cgroup " + dir_ + " was removed");
    CgroupUsage u;
    KILN_ASSIGN_OR_RETURN(std::string cpu_stat, fs_->ReadFile(JoinPath(dir_, "cpu.stat")));
    if (auto v = FindKeyedValue(cpu_stat, "usage_usec")) {
      u.has_cpu = true;
      u.cpu_usec = *v;
    }
    // memory.peak appeared in 5.19; older kernels have no v2 high-water mark.
    // After ResetMemoryPeak it is read through the descriptor that reset it.
    std::string peak_path = JoinPath(dir_, "memory.peak");
    if (peak_fd_ || fs_->Exists(peak_path)) {
      KILN_ASSIGN_OR_RETURN(std::string peak,
                            peak_fd_ ? fs_->ReadAt(peak_fd_.get()) : fs_->ReadFile(peak_path));
      if (auto v = ParseU64(peak)) {
        u.has_memory_peak = true;
        u.memory_peak = *v;
      }
    }
    std::string current_path = JoinPath(dir_, "memory.current");
    if (fs_->Exists(current_path)) {
      KILN_ASSIGN_OR_RETURN(std::string current, fs_->ReadFile(current_path));
      if (auto v = ParseU64(current)) {
        u.has_memory_current = true;
        u.memory_current = *v;
      }
    }
    std::string events_path = JoinPath(dir_, "memory.events");
    if (fs_->Exists(events_path)) {
      KILN_ASSIGN_OR_RETURN(std::string events, fs_->ReadFile(events_path));
      u.oom_kills = FindKeyedValue(events, "oom_kill").value_or(0);
    }
    std::string pids_events_path = JoinPath(dir_, "pids.events");
    if (fs_->Exists(pids_events_path)) {
      KILN_ASSIGN_OR_RETURN(std::string events, fs_->ReadFile(pids_events_path));
      u.pids_max_hits = FindKeyedValue(events, "max").value_or(0);
    }
    return u;
  }

  bool ResetMemoryPeak() override {
    if (removed_) return false;
    const std::string peak_path = JoinPath(dir_, "memory.peak");
    if (!fs_->Exists(peak_path)) return false;
    auto fd = fs_->OpenAndResetPeak(peak_path);
    if (!fd.ok()) return false;  // before 6.12: read-only, the lifetime's peak
    peak_fd_ = std::move(*fd);
    return true;
  }

  Status KillAll() override {
    if (removed_) return OkStatus();
    // cgroup.kill (5.14) kills every task atomically, forks in flight included.
    std::string kill_path = JoinPath(dir_, "cgroup.kill");
    if (fs_->Exists(kill_path)) return fs_->WriteFile(kill_path, "1");
    std::string freeze_path = JoinPath(dir_, "cgroup.freeze");
    bool frozen = fs_->Exists(freeze_path) && fs_->WriteFile(freeze_path, "1").ok();
    // Thawing is required: SIGKILL wakes v2-frozen tasks, but the cgroup would
    // stay frozen for nothing and a later reuse of the name would inherit it.
    Cleanup thaw([&] {
      if (frozen) (void)fs_->WriteFile(freeze_path, "0");
    });
    return KillListed(*fs_, JoinPath(dir_, "cgroup.procs"));
  }

  Status Remove() override {
    if (removed_) return OkStatus();
    dir_fd_.Reset();
    peak_fd_.Reset();
    KILN_TRY(RemoveDirRetrying(*fs_, dir_));
    removed_ = true;
    return OkStatus();
  }

  std::string Describe() const override { return "v2:" + dir_ + " (memory,pids,cpu)"; }
  void Disown() override {
    dir_fd_.Reset();
    removed_ = true;
  }

 private:
  std::shared_ptr<CgroupFs> fs_;
  std::string dir_;
  UniqueFd dir_fd_;
  UniqueFd peak_fd_;  // memory.peak, reset through it (ResetMemoryPeak)
  bool removed_ = false;
};

// One directory per v1 hierarchy; co-mounted controllers (cpu,cpuacct) share one.
struct V1Dir {
  std::string path;
  std::vector<std::string> controllers;
};

// The directory of `name` in each v1 hierarchy; co-mounted controllers share one.
std::vector<V1Dir> PlanV1Dirs(const std::vector<std::pair<std::string, std::string>>& parents,
                              const std::string& name) {
  std::vector<V1Dir> planned;
  for (const auto& [controller, parent] : parents) {
    std::string dir = JoinPath(parent, name);
    auto same =
        std::find_if(planned.begin(), planned.end(), [&](const V1Dir& d) { return d.path == dir; });
    if (same != planned.end()) {
      same->controllers.push_back(controller);
    } else {
      planned.push_back(V1Dir{dir, {controller}});
    }
  }
  return planned;
}

class CgroupV1 final : public Cgroup {
 public:
  explicit CgroupV1(std::shared_ptr<CgroupFs> fs) : fs_(std::move(fs)) {}
  ~CgroupV1() override {
    if (dirs_.empty()) return;
    if (Status s = KillAll(); !s.ok())
      KILN_LOG_WARN("cgroup {}: kill: {}", Describe(), s.error().ToString());
    if (Status s = Remove(); !s.ok())
      KILN_LOG_WARN("cgroup {}: remove: {}", Describe(), s.error().ToString());
  }

  // Records a directory once it exists, so a failure later removes it.
  void AddDir(V1Dir dir) { dirs_.push_back(std::move(dir)); }

  // Directory of `controller`, or nullptr if it is not used.
  const std::string* DirOf(std::string_view controller) const {
    for (const auto& d : dirs_) {
      if (std::find(d.controllers.begin(), d.controllers.end(), controller) !=
          d.controllers.end()) {
        return &d.path;
      }
    }
    return nullptr;
  }

  int clone_into_fd() const override { return -1; }

  Status Attach(pid_t pid) override {
    if (dirs_.empty()) return FailedPrecondition("cgroup was removed");
    std::string text = std::to_string(pid);
    for (const auto& d : dirs_) {
      KILN_TRY(WriteControl(*fs_, d.path, "cgroup.procs", text, SetupStep::kCgroupAttach));
    }
    return OkStatus();
  }

  Result<CgroupUsage> Usage() override {
    if (dirs_.empty()) return FailedPrecondition("cgroup was removed");
    CgroupUsage u;
    if (const std::string* dir = DirOf("cpuacct")) {
      KILN_ASSIGN_OR_RETURN(std::string ns, fs_->ReadFile(JoinPath(*dir, "cpuacct.usage")));
      if (auto v = ParseU64(ns)) {
        u.has_cpu = true;
        u.cpu_usec = *v / 1000;
      }
    }
    if (const std::string* dir = DirOf("memory")) {
      KILN_ASSIGN_OR_RETURN(std::string peak,
                            fs_->ReadFile(JoinPath(*dir, "memory.max_usage_in_bytes")));
      if (auto v = ParseU64(peak)) {
        u.has_memory_peak = true;
        u.memory_peak = *v;
      }
      const std::string current_path = JoinPath(*dir, "memory.usage_in_bytes");
      if (fs_->Exists(current_path)) {
        KILN_ASSIGN_OR_RETURN(std::string current, fs_->ReadFile(current_path));
        if (auto v = ParseU64(current)) {
          u.has_memory_current = true;
          u.memory_current = *v;
        }
      }
      // The "oom_kill N" line is 4.13+; older kernels only say under_oom.
      KILN_ASSIGN_OR_RETURN(std::string oom, fs_->ReadFile(JoinPath(*dir, "memory.oom_control")));
      u.oom_kills = FindKeyedValue(oom, "oom_kill").value_or(0);
    }
    if (const std::string* dir = DirOf("pids")) {
      const std::string events_path = JoinPath(*dir, "pids.events");
      if (fs_->Exists(events_path)) {
        KILN_ASSIGN_OR_RETURN(std::string events, fs_->ReadFile(events_path));
        u.pids_max_hits = FindKeyedValue(events, "max").value_or(0);
      }
    }
    return u;
  }

  bool ResetMemoryPeak() override {
    const std::string* dir = DirOf("memory");
    if (dir == nullptr) return false;
    return fs_->WriteFile(JoinPath(*dir, "memory.max_usage_in_bytes"), "0").ok();
  }

  Status KillAll() override {
    if (dirs_.empty()) return OkStatus();
    // v1 has no cgroup.kill. Freezing first stops fork races; frozen v1 tasks
    // only act on the SIGKILL once thawed, hence the thaw on every path.
    const std::string* freezer = DirOf("freezer");
    bool frozen = freezer != nullptr &&
                  WriteControl(*fs_, *freezer, "freezer.state", "FROZEN", SetupStep::kNone).ok();
    Cleanup thaw([&] {
      if (frozen) (void)fs_->WriteFile(JoinPath(*freezer, "freezer.state"), "THAWED");
    });
    // Every hierarchy lists the same processes once Attach has run; a partial
    // Attach leaves a process in the first hierarchies, so read them all.
    Status first_error;
    for (const auto& d : dirs_) {
      Status s = KillListed(*fs_, JoinPath(d.path, "cgroup.procs"));
      if (!s.ok() && first_error.ok()) first_error = std::move(s);
    }
    return first_error;
  }

  Status Remove() override {
    // Reverse order of creation; stop at the first failure so that a retry
    // (the destructor's) still knows what is left.
    if (!dirs_.empty() && removed_description_.empty()) removed_description_ = Describe();
    while (!dirs_.empty()) {
      KILN_TRY(RemoveDirRetrying(*fs_, dirs_.back().path));
      dirs_.pop_back();
    }
    return OkStatus();
  }

  void Disown() override {
    removed_description_ = Describe();
    dirs_.clear();
  }

  std::string Describe() const override {
    if (dirs_.empty()) return removed_description_.empty() ? "v1:(none)" : removed_description_;
    // The memory directory names the cgroup; the others are the same name in
    // their hierarchies.
    const V1Dir* main = &dirs_.front();
    for (const auto& d : dirs_) {
      if (std::find(d.controllers.begin(), d.controllers.end(), "memory") != d.controllers.end())
        main = &d;
    }
    std::vector<std::string> others;
    for (const auto& d : dirs_) {
      for (const auto& c : d.controllers) {
        if (c != "memory") others.push_back(c);
      }
    }
    std::string out = "v1:" + main->path;
    if (!others.empty()) out += " (+" + JoinNames(others, ",") + ")";
    return out;
  }

 private:
  std::shared_ptr<CgroupFs> fs_;
  std::vector<V1Dir> dirs_;
  std::string removed_description_;
};

// ---------------------------------------------------------------------------
// Detection

struct Probe {
  bool usable = false;
  std::string why;  // one clause, no trailing punctuation
};

const std::string* OwnPath(const std::vector<std::pair<std::string, std::string>>& paths,
                           std::string_view controller) {
  for (const auto& [c, p] : paths) {
    if (c == controller) return &p;
  }
  return nullptr;
}

}  // namespace

std::string_view ToString(CgroupMode mode) {
  switch (mode) {
    case CgroupMode::kNone: return "none";
    case CgroupMode::kV1: return "v1";
    case CgroupMode::kV2: return "v2";
  }
  return "none";
}

// --- CgroupFs: the real file operations -------------------------------------

Status CgroupFs::MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) return ErrnoError("mkdir " + path);
  return OkStatus();
}

Status CgroupFs::RemoveDir(const std::string& path) {
  if (::rmdir(path.c_str()) != 0) return ErrnoError("rmdir " + path);
  return OkStatus();
}

Status CgroupFs::WriteFile(const std::string& path, std::string_view content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path + " for writing");
  // One write(2): cgroupfs parses each write as a whole command, so a short
  // write would be a different value, not a partial one.
  ssize_t n;
  do {
    n = ::write(fd.get(), content.data(), content.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoError("write \"" + std::string(content) + "\" to " + path);
  if (static_cast<size_t>(n) != content.size()) return Internal("short write to " + path);
  return OkStatus();
}

Result<std::string> CgroupFs::ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxReadBytes) return Internal(path + " is larger than expected");
  }
  return out;
}

Result<UniqueFd> CgroupFs::OpenAndResetPeak(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path + " for writing");
  static constexpr std::string_view kReset = "reset\n";
  if (::write(fd.get(), kReset.data(), kReset.size()) != static_cast<ssize_t>(kReset.size())) {
    return ErrnoError("write reset to " + path);
  }
  return fd;
}

Result<std::string> CgroupFs::ReadAt(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), static_cast<off_t>(out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("pread a cgroup file");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxReadBytes) return Internal("a cgroup file is larger than expected");
  }
  return out;
}

bool CgroupFs::Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Result<UniqueFd> CgroupFs::OpenDir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path + " (O_PATH|O_DIRECTORY)");
  return fd;
}

// --- Parsers -----------------------------------------------------------------

std::vector<MountinfoCgroup> ParseCgroupMounts(std::string_view mountinfo) {
  // proc(5): "36 35 98:0 /root /mnt/point opts [optional...] - fstype source superopts"
  std::vector<MountinfoCgroup> out;
  for (std::string_view line : Split(mountinfo, '\n')) {
    size_t sep = line.find(" - ");
    if (sep == std::string_view::npos) continue;
    std::vector<std::string_view> pre = Split(line.substr(0, sep), ' ');
    std::vector<std::string_view> post = Split(line.substr(sep + 3), ' ');
    if (pre.size() < 5 || post.empty()) continue;
    if (post[0] != "cgroup" && post[0] != "cgroup2") continue;
    MountinfoCgroup m;
    m.root = Unescape(pre[3]);
    m.mount_point = Unescape(pre[4]);
    m.v2 = post[0] == "cgroup2";
    if (!m.v2 && post.size() >= 3) {
      for (std::string_view opt : Split(post[2], ',')) {
        if (IsV1Controller(opt)) m.controllers.emplace_back(opt);
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ParseProcCgroup(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view line : Split(text, '\n')) {
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    // A cgroup removed under us reads "/path (deleted)" (kernel/cgroup/cgroup.c).
    constexpr std::string_view kDeleted = " (deleted)";
    if (path.size() > kDeleted.size() && path.substr(path.size() - kDeleted.size()) == kDeleted) {
      path.remove_suffix(kDeleted.size());
    }
    if (controllers.empty()) {
      out.emplace_back("", std::string(path));
      continue;
    }
    for (std::string_view c : Split(controllers, ','))
      out.emplace_back(std::string(c), std::string(path));
  }
  return out;
}

// --- CgroupManager -------------------------------------------------------------

namespace {

struct V2Choice {
  Probe probe;
  std::string root, own_dir, parent;
  bool io = false;  // the parent (or its nearest existing ancestor) may have io
  std::string io_dir;
};

V2Choice ProbeV2(const std::vector<MountinfoCgroup>& mounts,
                 const std::vector<std::pair<std::string, std::string>>& paths,
                 const std::string& parent, CgroupFs& fs) {
  V2Choice c;
  const std::string* own = OwnPath(paths, "");
  std::string own_path = own != nullptr ? *own : "/";
  // If an earlier manager moved us into "<own>/supervisor" (see
  // MoveOwnProcessesToSupervisorLeaf), the cgroup we own is its parent.
  constexpr std::string_view kLeaf = "/supervisor";
  if (own_path.size() > kLeaf.size() && own_path.substr(own_path.size() - kLeaf.size()) == kLeaf) {
    own_path.resize(own_path.size() - kLeaf.size());
  }
  const MountinfoCgroup* mount = nullptr;
  bool any_v2 = false;
  for (const auto& m : mounts) {
    if (!m.v2) continue;
    any_v2 = true;
    if (auto dir = MapCgroupPath(m, own_path)) {
      mount = &m;
      c.own_dir = *dir;
      break;
    }
  }
  if (!any_v2) {
    c.probe.why = "cgroup v2 is not mounted";
    return c;
  }
  if (mount == nullptr) {
    c.probe.why = "cgroup v2 is mounted but our cgroup " + own_path + " is not visible in it";
    return c;
  }
  c.root = mount->mount_point;
  c.parent = parent.empty() ? JoinPath(c.own_dir, "kiln") : MapParent(*mount, parent);
  // What sandboxes can get is what the parent (or, before it exists, its
  // nearest existing ancestor) may enable: its cgroup.controllers.
  std::string probe_dir = c.parent;
  while (probe_dir.size() > c.root.size() && !fs.Exists(probe_dir)) probe_dir = DirName(probe_dir);
  auto text = fs.ReadFile(JoinPath(probe_dir, "cgroup.controllers"));
  if (!text.ok()) {
    c.probe.why = "cgroup v2 is mounted but " + text.error().ToString();
    return c;
  }
  const std::set<std::string> available = ControllerSet(*text);
  std::vector<std::string> missing = Missing(available);
  c.io = available.count("io") != 0;
  c.io_dir = probe_dir;
  if (missing.size() == LimitControllers().size()) {
    c.probe.why = "cgroup v2 is mounted but delegates no memory/pids/cpu controllers";
  } else if (!missing.empty()) {
    c.probe.why = "cgroup v2 is mounted but does not delegate " + JoinNames(missing, ", ") +
                  " to " + probe_dir;
  } else {
    c.probe.usable = true;
    c.probe.why = "cgroup v2 at " + c.root + " delegates memory, pids, cpu to " + probe_dir;
  }
  return c;
}

struct V1Choice {
  Probe probe;
  std::vector<std::pair<std::string, std::string>> parents;  // controller -> dir
  std::vector<std::string> controllers;
  std::string no_blkio;  // why blkio is not among them; empty when it is
};

V1Choice ProbeV1(const std::vector<MountinfoCgroup>& mounts,
                 const std::vector<std::pair<std::string, std::string>>& paths,
                 const std::string& parent, CgroupFs& fs) {
  V1Choice c;
  bool any_v1 = false;
  std::vector<std::string> missing;
  std::string invisible;  // our cgroup's directory in a required hierarchy, if absent
  std::vector<std::string> wanted = LimitControllers();
  wanted.emplace_back("cpuacct");  // cpu usage (the cpu controller has none in v1)
  wanted.emplace_back("freezer");  // race-free KillAll
  wanted.emplace_back("blkio");    // I/O limits (best effort)
  for (const auto& ctrl : wanted) {
    bool required = ctrl != "cpuacct" && ctrl != "freezer" && ctrl != "blkio";
    const std::string* own = OwnPath(paths, ctrl);
    // No line for it in /proc/self/cgroup: we are in that hierarchy's root.
    std::string own_path = own != nullptr ? *own : "/";
    const MountinfoCgroup* mount = nullptr;
    std::optional<std::string> own_dir;
    for (const auto& m : mounts) {
      if (m.v2) continue;
      any_v1 = true;
      if (std::find(m.controllers.begin(), m.controllers.end(), ctrl) == m.controllers.end())
        continue;
      own_dir = MapCgroupPath(m, own_path);
      if (own_dir) {
        mount = &m;
        break;
      }
    }
    if (mount == nullptr) {
      if (required) missing.push_back(ctrl);
      if (ctrl == "blkio") c.no_blkio = "cgroup v1 has no blkio hierarchy";
      continue;
    }
    if (!fs.Exists(*own_dir)) {
      if (required && invisible.empty()) invisible = *own_dir;
      if (ctrl == "blkio") c.no_blkio = "our cgroup directory " + *own_dir + " does not exist";
      continue;
    }
    c.controllers.push_back(ctrl);
    c.parents.emplace_back(ctrl,
                           parent.empty() ? JoinPath(*own_dir, "kiln") : MapParent(*mount, parent));
  }
  if (!any_v1) {
    c.probe.why = "cgroup v1 is not mounted";
  } else if (!missing.empty()) {
    c.probe.why = "cgroup v1 lacks the " + JoinNames(missing, ", ") +
                  (missing.size() == 1 ? " controller" : " controllers");
  } else if (!invisible.empty()) {
    c.probe.why = "cgroup v1 is mounted but our cgroup directory " + invisible + " does not exist";
  } else {
    c.probe.usable = true;
  }
  return c;
}

}  // namespace

std::unique_ptr<CgroupManager> CgroupManager::Detect(const CgroupHostOptions& options,
                                                     std::shared_ptr<CgroupFs> fs) {
  std::unique_ptr<CgroupManager> m(new CgroupManager());
  m->fs_ = fs != nullptr ? std::move(fs) : std::make_shared<CgroupFs>();
  constexpr std::string_view kNoLimits = "; no cgroup limits";
  auto mountinfo = m->fs_->ReadFile(options.proc_self_mountinfo);
  auto self = m->fs_->ReadFile(options.proc_self_cgroup);
  if (!mountinfo.ok() || !self.ok()) {
    m->reason_ =
        (!mountinfo.ok() ? mountinfo.error() : self.error()).ToString() + std::string(kNoLimits);
    m->io_ = {false, "no usable cgroup hierarchy"};
    return m;
  }
  std::vector<MountinfoCgroup> mounts = ParseCgroupMounts(*mountinfo);
  auto paths = ParseProcCgroup(*self);

  std::string v2_why = "cgroup v1 forced";
  if (options.force_mode != CgroupMode::kV1) {
    V2Choice v2 = ProbeV2(mounts, paths, options.parent, *m->fs_);
    if (v2.probe.usable) {
      m->mode_ = CgroupMode::kV2;
      m->reason_ = v2.probe.why + "; using cgroup v2";
      m->controllers_ = LimitControllers();
      m->v2_root_ = v2.root;
      m->v2_own_dir_ = v2.own_dir;
      m->v2_parent_ = v2.parent;
      m->io_ =
          v2.io ? IoSupport{true, "cgroup v2 io"}
                : IoSupport{false, "cgroup v2 does not delegate the io controller to " + v2.io_dir};
      return m;
    }
    v2_why = v2.probe.why;
  }
  if (options.force_mode == CgroupMode::kV2) {
    m->reason_ = v2_why + " (v2 forced)" + std::string(kNoLimits);
    m->io_ = {false, "no usable cgroup hierarchy"};
    return m;
  }
  V1Choice v1 = ProbeV1(mounts, paths, options.parent, *m->fs_);
  if (!v1.probe.usable) {
    m->reason_ = v2_why + "; " + v1.probe.why + std::string(kNoLimits);
    m->io_ = {false, "no usable cgroup hierarchy"};
    return m;
  }
  m->mode_ = CgroupMode::kV1;
  m->controllers_ = v1.controllers;
  m->v1_parents_ = std::move(v1.parents);
  m->io_ = v1.no_blkio.empty() ? IoSupport{true, "cgroup v1 blkio"} : IoSupport{false, v1.no_blkio};
  m->reason_ = v2_why + "; using cgroup v1 (" + JoinNames(m->controllers_, ", ") + ")";
  return m;
}

std::unique_ptr<CgroupManager> CgroupManager::ForV2(std::string hierarchy_root, std::string parent,
                                                    std::shared_ptr<CgroupFs> fs) {
  std::unique_ptr<CgroupManager> m(new CgroupManager());
  m->fs_ = fs != nullptr ? std::move(fs) : std::make_shared<CgroupFs>();
  m->mode_ = CgroupMode::kV2;
  m->controllers_ = LimitControllers();
  m->v2_parent_ = JoinPath(hierarchy_root, parent);
  m->v2_root_ = std::move(hierarchy_root);
  m->reason_ = "cgroup v2 at " + m->v2_root_ + " (explicit)";
  // Whether io is delegated is found by EnsureV2Parent at the first Create.
  m->io_ = {true, "cgroup v2 io"};
  return m;
}

std::unique_ptr<CgroupManager> CgroupManager::ForV1(
    std::vector<std::pair<std::string, std::string>> controller_parents,
    std::shared_ptr<CgroupFs> fs) {
  std::unique_ptr<CgroupManager> m(new CgroupManager());
  m->fs_ = fs != nullptr ? std::move(fs) : std::make_shared<CgroupFs>();
  m->mode_ = CgroupMode::kV1;
  for (const auto& [c, dir] : controller_parents) m->controllers_.push_back(c);
  m->v1_parents_ = std::move(controller_parents);
  m->reason_ = "cgroup v1 (" + JoinNames(m->controllers_, ", ") + ", explicit)";
  const bool blkio =
      std::find(m->controllers_.begin(), m->controllers_.end(), "blkio") != m->controllers_.end();
  m->io_ = blkio ? IoSupport{true, "cgroup v1 blkio"}
                 : IoSupport{false, "cgroup v1 has no blkio hierarchy"};
  return m;
}

Status CgroupManager::EnsureParent() {
  std::lock_guard<std::mutex> lock(parent_mu_);
  if (parent_ready_) return OkStatus();
  if (mode_ == CgroupMode::kV2) {
    KILN_TRY(EnsureV2Parent());
  } else {
    for (const auto& [c, dir] : v1_parents_) KILN_TRY(MakeDirs(*fs_, dir));
  }
  parent_ready_ = true;
  return OkStatus();
}

// In v2 a cgroup only gets a controller its parent lists in
// cgroup.subtree_control, so "+memory +pids +cpu" must be written on every
// cgroup from the deepest one that already has them available (its
// cgroup.controllers lists them: the delegation point) down to the parent of
// the sandboxes. The cgroups above the delegation point are not ours to touch.
// "+io" follows, on its own and best effort: where the delegation point does
// not have it, or a write is refused, sandboxes go without I/O limits (io_).
Status CgroupManager::EnsureV2Parent() {
  std::vector<std::string> chain;  // parent first, delegation point last
  for (std::string dir = v2_parent_;; dir = DirName(dir)) {
    chain.push_back(dir);
    if (fs_->Exists(dir)) {
      auto text = fs_->ReadFile(JoinPath(dir, "cgroup.controllers"));
      if (text.ok() && Missing(ControllerSet(*text)).empty()) break;
    }
    if (dir.size() <= v2_root_.size() || dir == "/") {
      return WithStep(FailedPrecondition("cgroup v2: no cgroup above " + v2_parent_ +
                                         " has the memory, pids and cpu controllers available"),
                      SetupStep::kCgroupCreate);
    }
  }
  // io rides along where the delegation point has it; best effort below.
  if (io_.available) {
    auto text = fs_->ReadFile(JoinPath(chain.back(), "cgroup.controllers"));
    if (!text.ok() || ControllerSet(*text).count("io") == 0) {
      io_ = {false, "cgroup v2 does not delegate the io controller to " + chain.back()};
    }
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const std::string& dir = *it;
    if (!fs_->Exists(dir)) {
      Status s = fs_->MakeDir(dir);
      if (!s.ok() && s.error().sys_errno != EEXIST)
        return Tag(std::move(s), SetupStep::kCgroupCreate);
    }
    std::string control = JoinPath(dir, "cgroup.subtree_control");
    KILN_ASSIGN_OR_RETURN(std::string enabled, fs_->ReadFile(control));
    KILN_TRY(EnableV2Required(dir, control, ControllerSet(enabled)));
    if (io_.available && ControllerSet(enabled).count("io") == 0) {
      if (Status s = fs_->WriteFile(control, kEnableV2Io); !s.ok()) {
        io_ = {false, "cannot enable the io controller: " + s.error().ToString()};
      }
    }
  }
  return OkStatus();
}

Status CgroupManager::EnableV2Required(const std::string& dir, const std::string& control,
                                       const std::set<std::string>& enabled) {
  if (Missing(enabled).empty()) return OkStatus();
  Status s = fs_->WriteFile(control, kEnableV2Controllers);
  if (!s.ok() && s.error().sys_errno == EBUSY && dir == v2_own_dir_ && !v2_own_dir_.empty()) {
    KILN_TRY(MoveOwnProcessesToSupervisorLeaf());
    s = fs_->WriteFile(control, kEnableV2Controllers);
  }
  if (!s.ok()) {
    Error e = WithStep(std::move(s).error(), SetupStep::kCgroupCreate);
    if (e.sys_errno == EBUSY) {
      e.message += " (the cgroup holds processes: cgroup v2's no-internal-process rule)";
    }
    return e;
  }
  return OkStatus();
}

// The delegated-subtree pattern systemd documents (systemd.io/CGROUP_DELEGATION):
// a v2 cgroup that holds processes cannot enable controllers for its children
// (EBUSY, the no-internal-process rule), so a service started with Delegate=yes
// moves its own processes into a leaf ("supervisor") and creates its other
// children beside it. Every process in our cgroup is the service's own (the
// cgroup was delegated to us), and all of them must move or the write still
// fails. This changes /proc/self/cgroup; Detect recognises the leaf later.
Status CgroupManager::MoveOwnProcessesToSupervisorLeaf() {
  std::string leaf = JoinPath(v2_own_dir_, "supervisor");
  if (!fs_->Exists(leaf)) {
    Status s = fs_->MakeDir(leaf);
    if (!s.ok() && s.error().sys_errno != EEXIST)
      return Tag(std::move(s), SetupStep::kCgroupCreate);
  }
  KILN_ASSIGN_OR_RETURN(std::string procs, fs_->ReadFile(JoinPath(v2_own_dir_, "cgroup.procs")));
  pid_t self = ::getpid();
  std::vector<pid_t> pids = {self};  // ourselves first: the one that must move
  for (pid_t pid : ParsePids(procs)) {
    if (pid != self) pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    Status s = fs_->WriteFile(JoinPath(leaf, "cgroup.procs"), std::to_string(pid));
    // A helper that exited since the read is fine.
    if (!s.ok() && s.error().sys_errno != ESRCH) return Tag(std::move(s), SetupStep::kCgroupCreate);
  }
  KILN_LOG_INFO(
      "cgroup v2: moved {} process(es) from {} to {} so controllers can be enabled below it",
      pids.size(), v2_own_dir_, leaf);
  return OkStatus();
}

Result<int> CgroupManager::RemoveStale(
    const std::function<bool(const std::string& name)>& is_stale) {
  std::vector<std::string> parents;
  if (mode_ == CgroupMode::kV2) parents.push_back(v2_parent_);
  if (mode_ == CgroupMode::kV1) {
    for (const auto& [controller, dir] : v1_parents_) parents.push_back(dir);
  }
  int removed = 0;
  for (const auto& parent : parents) {
    DIR* d = ::opendir(parent.c_str());
    if (d == nullptr) continue;  // no parent yet: nothing was ever made there
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (e->d_type == DT_DIR && name != "." && name != ".." && is_stale(name))
        names.push_back(name);
    }
    ::closedir(d);
    for (const auto& name : names) {
      const std::string dir = JoinPath(parent, name);
      (void)KillListed(*fs_, JoinPath(dir, "cgroup.procs"));
      if (RemoveDirRetrying(*fs_, dir).ok()) ++removed;
    }
  }
  return removed;
}

Result<std::unique_ptr<Cgroup>> CgroupManager::Create(std::string_view name,
                                                      const CgroupLimits& limits) {
  if (mode_ == CgroupMode::kNone) {
    return WithStep(FailedPrecondition("no usable cgroup hierarchy: " + reason_),
                    SetupStep::kCgroupCreate);
  }
  KILN_TRY(Tag(ValidateName(name), SetupStep::kCgroupCreate));
  if (limits.cpus != 0) {
    if (auto quota = CpuQuotaUsec(limits.cpus); !quota.ok()) {
      return WithStep(std::move(quota).error(), SetupStep::kCgroupCreate);
    }
  }
  KILN_TRY(EnsureParent());
  std::string n(name);
  return mode_ == CgroupMode::kV2 ? CreateV2(n, limits) : CreateV1(n, limits);
}

IoSupport CgroupManager::io_support() const {
  std::lock_guard<std::mutex> lock(parent_mu_);
  return io_;
}

// v2: one io.max line per device, "MAJ:MIN rbps=.. wbps=.. riops=.. wiops=..",
// "max" for no limit. v1: one "MAJ:MIN VALUE" write per device and limit to
// blkio.throttle.{read,write}_{bps,iops}_device (0 there would mean "remove
// the rule", so unset limits are not written). `dir`: the cgroup's directory
// in the io (v2) or blkio (v1) hierarchy; empty when v1 has no blkio.
std::string CgroupManager::ApplyIoLimits(const std::string& dir, const CgroupLimits& limits) {
  const IoLimits& io = limits.io;
  if (!io.any()) return "no io limits (none asked for)";
  IoSupport support = io_support();
  std::string why_none;
  if (!support.available || dir.empty()) {
    why_none = support.available ? "cgroup v1 has no blkio hierarchy" : support.why;
  } else if (limits.io_devices.empty()) {
    why_none = "no block device with a request queue behind the sandbox's files";
  }
  std::vector<std::string> applied, failed;
  if (why_none.empty()) {
    for (const BlockDevice& d : limits.io_devices) {
      const std::string dev = std::to_string(d.major) + ":" + std::to_string(d.minor);
      Status s;
      if (mode_ == CgroupMode::kV2) {
        auto v = [](uint64_t x) { return x == 0 ? std::string("max") : std::to_string(x); };
        s = fs_->WriteFile(JoinPath(dir, "io.max"),
                           dev + " rbps=" + v(io.read_bps) + " wbps=" + v(io.write_bps) +
                               " riops=" + v(io.read_iops) + " wiops=" + v(io.write_iops));
      } else {
        const std::pair<const char*, uint64_t> files[] = {
            {"blkio.throttle.read_bps_device", io.read_bps},
            {"blkio.throttle.write_bps_device", io.write_bps},
            {"blkio.throttle.read_iops_device", io.read_iops},
            {"blkio.throttle.write_iops_device", io.write_iops}};
        for (const auto& [file, value] : files) {
          if (value == 0 || !s.ok()) continue;
          s = fs_->WriteFile(JoinPath(dir, file), dev + " " + std::to_string(value));
        }
      }
      (s.ok() ? applied : failed)
          .push_back(s.ok() ? ToString(d) : ToString(d) + ": " + s.error().ToString());
    }
    if (applied.empty()) why_none = JoinNames(failed, "; ");
  }
  std::string note =
      why_none.empty() ? "io limits on " + JoinNames(applied, ", ") : "no io limits: " + why_none;
  if (why_none.empty() && !failed.empty()) note += "; not on " + JoinNames(failed, "; ");
  if (!why_none.empty() || !failed.empty()) {
    std::lock_guard<std::mutex> lock(parent_mu_);
    if (!io_note_logged_) {
      io_note_logged_ = true;
      KILN_LOG_WARN("cgroup {}: {} (logged once)", ToString(mode_), note);
    }
  }
  return note;
}

Result<std::unique_ptr<Cgroup>> CgroupManager::CreateV2(const std::string& name,
                                                        const CgroupLimits& limits) {
  std::string dir = JoinPath(v2_parent_, name);
  KILN_TRY(Tag(fs_->MakeDir(dir), SetupStep::kCgroupCreate));
  // From here on, returning an error destroys `cg`, which removes the directory.
  auto cg = std::make_unique<CgroupV2>(fs_, dir);
  if (limits.memory_bytes != 0) {
    KILN_TRY(WriteControl(*fs_, dir, "memory.max", std::to_string(limits.memory_bytes)));
  }
  // Swap off even without a memory limit: swap would otherwise let the sandbox
  // hold more than it appears to. memory.swap.max is absent without swap
  // accounting (CONFIG_MEMCG_SWAP off, or swapaccount=0), and then there is
  // nothing to set.
  if (fs_->Exists(JoinPath(dir, "memory.swap.max"))) {
    KILN_TRY(WriteControl(*fs_, dir, "memory.swap.max", "0"));
  } else {
    std::lock_guard<std::mutex> lock(parent_mu_);
    if (!swap_note_logged_) {
      swap_note_logged_ = true;
      KILN_LOG_INFO(
          "cgroup v2: {} has no memory.swap.max (no swap accounting); swap is not limited", dir);
    }
  }
  if (limits.pids != 0) KILN_TRY(WriteControl(*fs_, dir, "pids.max", std::to_string(limits.pids)));
  if (limits.cpus != 0) {
    KILN_ASSIGN_OR_RETURN(uint64_t quota, CpuQuotaUsec(limits.cpus));
    KILN_TRY(WriteControl(*fs_, dir, "cpu.max",
                          std::to_string(quota) + " " + std::to_string(kCpuPeriodUsec)));
  }
  // An OOM kills the whole sandbox (4.19+), not one process that the rest of
  // the program might survive in a half-broken state.
  KILN_TRY(WriteControl(*fs_, dir, "memory.oom.group", "1"));
  cg->set_io_note(ApplyIoLimits(dir, limits));
  KILN_ASSIGN_OR_RETURN(UniqueFd fd, fs_->OpenDir(dir));
  cg->set_dir_fd(std::move(fd));
  return std::unique_ptr<Cgroup>(std::move(cg));
}

Result<std::unique_ptr<Cgroup>> CgroupManager::Adopt(std::string_view name) {
  if (mode_ == CgroupMode::kNone)
    return FailedPrecondition("no usable cgroup hierarchy: " + reason_);
  KILN_TRY(ValidateName(name));
  const std::string n(name);
  if (mode_ == CgroupMode::kV2) {
    const std::string dir = JoinPath(v2_parent_, n);
    if (!fs_->Exists(dir)) return MakeError(Code::kNotFound, "cgroup " + dir + " does not exist");
    auto cg = std::make_unique<CgroupV2>(fs_, dir);
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, fs_->OpenDir(dir));
    cg->set_dir_fd(std::move(fd));
    return std::unique_ptr<Cgroup>(std::move(cg));
  }
  auto cg = std::make_unique<CgroupV1>(fs_);
  for (auto& d : PlanV1Dirs(v1_parents_, n)) {
    if (!fs_->Exists(d.path)) {
      cg->Disown();  // not ours to remove
      return MakeError(Code::kNotFound, "cgroup " + d.path + " does not exist");
    }
    cg->AddDir(std::move(d));
  }
  return std::unique_ptr<Cgroup>(std::move(cg));
}

Result<std::unique_ptr<Cgroup>> CgroupManager::CreateV1(const std::string& name,
                                                        const CgroupLimits& limits) {
  std::vector<V1Dir> planned = PlanV1Dirs(v1_parents_, name);
  auto cg = std::make_unique<CgroupV1>(fs_);
  for (auto& d : planned) {
    KILN_TRY(Tag(fs_->MakeDir(d.path), SetupStep::kCgroupCreate));
    cg->AddDir(std::move(d));
  }
  auto need = [&](std::string_view controller, bool wanted) -> Result<const std::string*> {
    const std::string* dir = cg->DirOf(controller);
    if (dir == nullptr && wanted) {
      return WithStep(FailedPrecondition("cgroup v1: a " + std::string(controller) +
                                         " limit was requested but that controller is not used"),
                      SetupStep::kCgroupCreate);
    }
    return dir;
  };
  KILN_ASSIGN_OR_RETURN(const std::string* memory, need("memory", limits.memory_bytes != 0));
  if (memory != nullptr) {
    bool memsw = fs_->Exists(JoinPath(*memory, "memory.memsw.limit_in_bytes"));
    if (limits.memory_bytes != 0) {
      std::string bytes = std::to_string(limits.memory_bytes);
      KILN_TRY(WriteControl(*fs_, *memory, "memory.limit_in_bytes", bytes));
      // memsw (memory + swap) must be written after limit_in_bytes: the kernel
      // refuses memsw < limit. Equal values mean no swap at all.
      if (memsw) KILN_TRY(WriteControl(*fs_, *memory, "memory.memsw.limit_in_bytes", bytes));
    }
    // Without memsw (no swap accounting) or without a limit to pin it to, the
    // best v1 offers is not to choose swap when reclaiming this cgroup.
    if (!memsw || limits.memory_bytes == 0) {
      KILN_TRY(WriteControl(*fs_, *memory, "memory.swappiness", "0"));
    }
  }
  KILN_ASSIGN_OR_RETURN(const std::string* pids, need("pids", limits.pids != 0));
  if (pids != nullptr && limits.pids != 0) {
    KILN_TRY(WriteControl(*fs_, *pids, "pids.max", std::to_string(limits.pids)));
  }
  KILN_ASSIGN_OR_RETURN(const std::string* cpu, need("cpu", limits.cpus != 0));
  if (cpu != nullptr && limits.cpus != 0) {
    KILN_ASSIGN_OR_RETURN(uint64_t quota, CpuQuotaUsec(limits.cpus));
    // Period first: the quota is validated against the current period.
    KILN_TRY(WriteControl(*fs_, *cpu, "cpu.cfs_period_us", std::to_string(kCpuPeriodUsec)));
    KILN_TRY(WriteControl(*fs_, *cpu, "cpu.cfs_quota_us", std::to_string(quota)));
  }
  const std::string* blkio = cg->DirOf("blkio");
  cg->set_io_note(ApplyIoLimits(blkio != nullptr ? *blkio : std::string(), limits));
  return std::unique_ptr<Cgroup>(std::move(cg));
}

std::string ToString(const BlockDevice& d) {
  return std::to_string(d.major) + ":" + std::to_string(d.minor) + " (" + d.name + ")";
}

IoDeviceScan ScanIoDeviceNumbers(const std::vector<std::pair<std::string, dev_t>>& sources,
                                 const std::string& sysfs) {
  IoDeviceScan out;
  std::set<dev_t> seen;
  for (const auto& [path, dev] : sources) {
    if (!seen.insert(dev).second) continue;
    const std::string num = std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
    if (major(dev) == 0) {
      out.skipped.push_back(path + ": device " + num +
                            " is not a block device (tmpfs, overlayfs, virtiofs, NFS, btrfs...)");
      continue;
    }
    const std::string link = JoinPath(sysfs, "dev/block/" + num);
    char resolved[PATH_MAX];
    if (::realpath(link.c_str(), resolved) == nullptr) {
      out.skipped.push_back(path + ": block device " + num + " is not in " + sysfs + " (" +
                            std::strerror(errno) + ")");
      continue;
    }
    std::string disk = resolved;
    unsigned maj = major(dev), min = minor(dev);
    struct stat st {};
    if (::stat(JoinPath(disk, "partition").c_str(), &st) == 0) {
      // A partition's directory sits in its disk's: limits go on the disk.
      disk = DirName(disk);
      UniqueFd fd(::open(JoinPath(disk, "dev").c_str(), O_RDONLY | O_CLOEXEC));
      char buf[32] = {};
      const ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf - 1) : -1;
      const std::string_view text = Trim(std::string_view(buf, n > 0 ? static_cast<size_t>(n) : 0));
      const size_t colon = text.find(':');
      auto dmaj = colon == std::string_view::npos ? std::nullopt : ParseU64(text.substr(0, colon));
      auto dmin = colon == std::string_view::npos ? std::nullopt : ParseU64(text.substr(colon + 1));
      if (!dmaj || !dmin) {
        out.skipped.push_back(path + ": partition " + num + " has no readable disk in " + disk);
        continue;
      }
      maj = static_cast<unsigned>(*dmaj);
      min = static_cast<unsigned>(*dmin);
    }
    const std::string name = disk.substr(disk.find_last_of('/') + 1);
    if (::stat(JoinPath(disk, "queue").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      out.skipped.push_back(path + ": block device " + num + " (" + name +
                            ") has no request queue to throttle");
      continue;
    }
    BlockDevice d{maj, min, name};
    if (std::find(out.devices.begin(), out.devices.end(), d) == out.devices.end())
      out.devices.push_back(d);
  }
  return out;
}

IoDeviceScan ScanIoDevices(const std::vector<std::string>& paths, const std::string& sysfs) {
  std::vector<std::pair<std::string, dev_t>> sources;
  IoDeviceScan failed;
  for (const auto& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      failed.skipped.push_back(p + ": stat: " + std::strerror(errno));
      continue;
    }
    sources.emplace_back(p, st.st_dev);
  }
  IoDeviceScan out = ScanIoDeviceNumbers(sources, sysfs);
  out.skipped.insert(out.skipped.begin(), failed.skipped.begin(), failed.skipped.end());
  return out;
}

}  // namespace kiln::isolation
