// cgroup limits for one sandbox: memory (swap off), pids, cpu quota, I/O
// throttling of the block devices it can read, and the accounting read back
// after the run (cpu time, peak memory, OOM kills).
//
// Two implementations behind one interface (P16): cgroup v2, what production
// hosts have, and cgroup v1 with the memory, pids, cpu(, cpuacct, freezer)
// controllers, what the development machines have (docs/adr/0002). When neither
// gives the three limit controllers, CgroupManager::Detect reports mode kNone
// with the reason, and the caller falls back to rlimits and says so: never
// silently. I/O limits (v2 io.max, v1 blkio.throttle.*) are best effort: the
// io/blkio controller is used where the host has it, and its absence is
// reported (io_support(), `kiln doctor`), never a refusal.
//
// Everything here runs in the supervisor. File access goes through CgroupFs so
// that both implementations can be tested against a fake tree in a temporary
// directory (cgroup_test.cc).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace kiln::isolation {

enum class CgroupMode { kNone, kV1, kV2 };
std::string_view ToString(CgroupMode mode);

// The file operations cgroup code needs. The real one makes system calls on
// cgroupfs; tests derive a fake that also populates the control files a new
// cgroup directory would have. Errors carry errno and name the path.
class CgroupFs {
 public:
  virtual ~CgroupFs() = default;
  virtual Status MakeDir(const std::string& path);  // mode 0755
  virtual Status RemoveDir(const std::string& path);
  // Opens without O_CREAT: writing to a control file that does not exist is an
  // error, as on cgroupfs. `content` goes in one write(2), no newline added.
  virtual Status WriteFile(const std::string& path, std::string_view content);
  // The whole file (control files and /proc files are small; capped at 4 MiB).
  virtual Result<std::string> ReadFile(const std::string& path);
  virtual bool Exists(const std::string& path);
  // O_PATH|O_DIRECTORY fd of a cgroup directory, for CLONE_INTO_CGROUP.
  virtual Result<UniqueFd> OpenDir(const std::string& path);
  // v2 memory.peak (6.12+): opens it read-write and writes "reset"; reads
  // through the returned fd then see the high-water mark since the reset
  // (the kernel keeps one per open file). Before 6.12 the file is read-only:
  // an error.
  virtual Result<UniqueFd> OpenAndResetPeak(const std::string& path);
  // The whole content of an open control file, read from offset 0.
  virtual Result<std::string> ReadAt(int fd);
};

// Throttling of the block I/O a sandbox causes, per device; 0 = no limit.
// Only I/O that reaches a block device is throttled: page-cache hits are
// free, and v1 cannot throttle buffered writes (writeback is not charged to
// the writer's blkio cgroup); v2 can.
struct IoLimits {
  uint64_t read_bps = 0;  // bytes per second
  uint64_t write_bps = 0;
  uint64_t read_iops = 0;  // operations per second
  uint64_t write_iops = 0;
  bool any() const { return read_bps != 0 || write_bps != 0 || read_iops != 0 || write_iops != 0; }
};

// A whole disk with a request queue, as io.max and blkio.throttle.* want it
// (a partition's limits must be set on its disk).
struct BlockDevice {
  unsigned major = 0;
  unsigned minor = 0;
  std::string name;  // the disk's sysfs name, e.g. "vda", "nvme0n1", "dm-0"
  bool operator==(const BlockDevice& o) const { return major == o.major && minor == o.minor; }
};
std::string ToString(const BlockDevice& d);  // "254:0 (vda)"

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0 = no limit; swap is always off
  uint64_t pids = 0;          // 0 = no limit
  double cpus = 0;            // 0 = no quota; 1.5 = 150 ms per 100 ms period
  IoLimits io;                // applied to each of io_devices, where the host can
  std::vector<BlockDevice> io_devices;
};

// Whether sandboxes get I/O limits here, and why (not).
struct IoSupport {
  bool available = false;
  std::string why;  // e.g. "cgroup v1 blkio", "cgroup v2 does not delegate io to /sys/..."
};

struct CgroupUsage {
  bool has_cpu = false;
  uint64_t cpu_usec = 0;  // user + system of every process that ran in it
  bool has_memory_peak = false;
  uint64_t memory_peak = 0;  // bytes; v2 memory.peak (5.19+), v1 max_usage_in_bytes
  bool has_memory_current = false;
  uint64_t memory_current = 0;  // bytes now; v2 memory.current, v1 memory.usage_in_bytes
  uint64_t oom_kills = 0;       // v2 memory.events oom_kill, v1 memory.oom_control oom_kill
  uint64_t pids_max_hits = 0;   // pids.events max: forks refused at pids.max (a fork bomb)
};

// One sandbox's cgroup: a directory in each hierarchy (one for v2, one per
// v1 hierarchy: co-mounted controllers such as cpu,cpuacct share one).
// Destruction kills what is left and removes it unless Remove() already did;
// failures there are logged, never thrown. Not thread-safe.
class Cgroup {
 public:
  virtual ~Cgroup() = default;
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // v2: an O_PATH fd of the directory, for clone3's CLONE_INTO_CGROUP, so the
  // child starts inside it with no attach at all. v1: -1.
  virtual int clone_into_fd() const = 0;
  // Moves `pid` into the cgroup (every hierarchy; step kCgroupAttach on
  // error). v1 costs 5-20 ms on the first attach after a quiet period (an RCU
  // grace period in cgroup_threadgroup_rwsem): callers overlap it with other work.
  virtual Status Attach(pid_t pid) = 0;
  // Reads the accounting; valid until Remove(). Missing optional files
  // (memory.peak before 5.19, v1 without cpuacct) leave has_* false.
  virtual Result<CgroupUsage> Usage() = 0;
  // Sessions: the memory high-water mark of Usage() starts again from the
  // usage now, so that it is one cell's. v1: memory.max_usage_in_bytes written
  // 0; v2: memory.peak reset through a descriptor kept open (6.12+). false when
  // the host cannot (v2 before 6.12, no memory controller): the peak then stays
  // the cgroup's lifetime's.
  virtual bool ResetMemoryPeak() { return false; }
  // Kills every process in it: v2 cgroup.kill (5.14+), else freeze (v2
  // cgroup.freeze, v1 freezer.state when freezer is used), SIGKILL each pid in
  // cgroup.procs, thaw. Does not wait for them to exit. Idempotent, fine on an
  // empty or removed cgroup.
  virtual Status KillAll() = 0;
  // Removes the directories, retrying EBUSY for up to 200 ms while exiting
  // tasks drain. Call KillAll() first. Idempotent.
  virtual Status Remove() = 0;
  // Human-readable location, for logs and --json.
  virtual std::string Describe() const = 0;
  // What Create did about I/O limits: "io limits on 254:0 (vda)", or why none
  // ("no io limits: ..."). Empty for an adopted cgroup.
  const std::string& io_note() const { return io_note_; }
  void set_io_note(std::string note) { io_note_ = std::move(note); }
  // Forgets the directories without touching them: another process (the
  // supervisor that took a pooled sandbox, through CgroupManager::Adopt)
  // owns them now. Destruction then does nothing.
  virtual void Disown() = 0;

 protected:
  Cgroup() = default;

 private:
  std::string io_note_;
};

struct CgroupHostOptions {
  // Where the hierarchies are mounted (mountinfo) and where we are in them.
  // Tests point these at files describing a fake tree.
  std::string proc_self_mountinfo = "/proc/self/mountinfo";
  std::string proc_self_cgroup = "/proc/self/cgroup";
  // Parent (a cgroup path, like those in /proc/self/cgroup, i.e. relative to
  // the hierarchy root) under which sandboxes are made, in every hierarchy.
  // Empty: our own cgroup + "/kiln" (v1), or, for v2, our own cgroup's
  // "kiln" child with the controllers enabled (moving ourselves into a
  // "supervisor" leaf first if the no-internal-process rule requires it).
  std::string parent;
  CgroupMode force_mode = CgroupMode::kNone;  // kNone = detect
};

class CgroupManager {
 public:
  // Reads mountinfo and /proc/self/cgroup and picks v2 if it has memory, pids
  // and cpu available to us (listed in cgroup.controllers of the parent, or of
  // its nearest existing ancestor: normally our own cgroup), else v1 if all
  // three are mounted and our cgroup is visible in them (cpuacct and freezer
  // are added when mounted), else kNone. Changes nothing on the host; the
  // parent is prepared by the first Create(). Never fails: the reason for what
  // it picked is in reason(). `fs` null: the real CgroupFs.
  static std::unique_ptr<CgroupManager> Detect(const CgroupHostOptions& options,
                                               std::shared_ptr<CgroupFs> fs = nullptr);

  CgroupMode mode() const { return mode_; }
  // Why this mode, one line, e.g. "cgroup v2 is mounted but delegates no
  // memory/pids/cpu controllers; using cgroup v1 (memory, pids, cpu, cpuacct,
  // freezer)"; kNone reasons end in "; no cgroup limits".
  const std::string& reason() const { return reason_; }
  // Controllers usable for sandboxes, e.g. {"memory","pids","cpu","cpuacct","freezer","blkio"}.
  const std::vector<std::string>& controllers() const { return controllers_; }
  // Whether Create can apply I/O limits: v2 with io available at the
  // delegation point, v1 with a blkio hierarchy our cgroup is visible in.
  // Known for sure only after the first Create (v2 enables io on the way down
  // and may find it cannot).
  IoSupport io_support() const;

  // Creates `name` under the parent and writes `limits`. kNone: kFailedPrecondition.
  // I/O limits are best effort: without the controller, or when the kernel
  // refuses a device's limit, the cgroup is made without them, the reason is
  // in the cgroup's io_note() and logged once.
  // The first call also prepares the parent (creates it; v2: enables the
  // controllers on the way down, see EnsureV2Parent in cgroup.cc), so Detect()
  // itself changes nothing on the host. `name` must be one path component.
  // Errors name the directory or control file that failed (step kCgroupCreate);
  // a partly created cgroup is removed before returning. Thread-safe.
  Result<std::unique_ptr<Cgroup>> Create(std::string_view name, const CgroupLimits& limits);
  // A Cgroup for `name`, made (and maybe populated) by another process of
  // ours: the warm pool's, taken over by a supervisor. Nothing is created or
  // written; kNotFound when it does not exist. It is removed like a created one.
  Result<std::unique_ptr<Cgroup>> Adopt(std::string_view name);

  // Removes leftover sandbox cgroups under the parent: the children whose name
  // `is_stale` accepts (e.g. "sbx-<pid>-..." of a dead kiln) are emptied
  // (every listed process SIGKILLed) and removed. Returns how many. Used at
  // server start, after a crash left cgroups behind.
  Result<int> RemoveStale(const std::function<bool(const std::string& name)>& is_stale);

  // For tests: a manager over explicit roots, no detection. `parent` is
  // relative to `hierarchy_root`; our own cgroup is unknown, so the
  // supervisor-leaf move never happens.
  static std::unique_ptr<CgroupManager> ForV2(std::string hierarchy_root, std::string parent,
                                              std::shared_ptr<CgroupFs> fs);
  // v1: controller name -> absolute directory of the parent cgroup in that
  // hierarchy; controllers sharing a hierarchy give the same directory.
  static std::unique_ptr<CgroupManager> ForV1(
      std::vector<std::pair<std::string, std::string>> controller_parents,
      std::shared_ptr<CgroupFs> fs);

 private:
  CgroupManager() = default;
  Status EnsureParent();
  Status EnsureV2Parent();
  Status EnableV2Required(const std::string& dir, const std::string& control,
                          const std::set<std::string>& enabled);
  std::string ApplyIoLimits(const std::string& dir, const CgroupLimits& limits);
  Status MoveOwnProcessesToSupervisorLeaf();
  Result<std::unique_ptr<Cgroup>> CreateV2(const std::string& name, const CgroupLimits& limits);
  Result<std::unique_ptr<Cgroup>> CreateV1(const std::string& name, const CgroupLimits& limits);

  CgroupMode mode_ = CgroupMode::kNone;
  std::string reason_;
  std::vector<std::string> controllers_;
  std::string v2_root_;     // absolute directory of the hierarchy root (mount point)
  std::string v2_parent_;   // absolute directory
  std::string v2_own_dir_;  // absolute directory of our own cgroup; empty if unknown
  std::vector<std::pair<std::string, std::string>> v1_parents_;  // controller -> absolute dir
  std::shared_ptr<CgroupFs> fs_;
  mutable std::mutex parent_mu_;
  bool parent_ready_ = false;      // guarded by parent_mu_
  bool swap_note_logged_ = false;  // guarded by parent_mu_
  IoSupport io_;                   // guarded by parent_mu_ (EnsureV2Parent may withdraw it)
  bool io_note_logged_ = false;    // guarded by parent_mu_
};

// The block devices behind paths a sandbox can read (its read-only binds), for
// CgroupLimits::io_devices: stat(2) each path, st_dev -> <sysfs>/dev/block/
// MAJ:MIN, a partition -> its disk (the parent directory in sysfs), kept only
// when the disk has a request queue (<disk>/queue). Paths on no block device
// (major 0: tmpfs, overlayfs, virtiofs, NFS, btrfs subvolumes), or whose
// device sysfs does not know, are listed in `skipped` with the reason.
struct IoDeviceScan {
  std::vector<BlockDevice> devices;  // distinct, in the order first met
  std::vector<std::string> skipped;  // "<path>: <why>", one per distinct device
};
IoDeviceScan ScanIoDevices(const std::vector<std::string>& paths,
                           const std::string& sysfs = "/sys");
// The same from device numbers already known (the seam for tests: `sysfs` a
// fake tree). `sources` pairs a path (for the messages) with its st_dev.
IoDeviceScan ScanIoDeviceNumbers(const std::vector<std::pair<std::string, dev_t>>& sources,
                                 const std::string& sysfs);

// Pure helpers, exposed for unit tests.
struct MountinfoCgroup {
  std::string mount_point;
  // The hierarchy path mounted there (mountinfo field 4): not "/" inside a
  // container that bind-mounts only its own subtree. A cgroup path from
  // /proc/self/cgroup maps to mount_point + (path - root).
  std::string root = "/";
  bool v2 = false;
  std::vector<std::string> controllers;  // v1: from super options; v2: empty here
};
// The "cgroup" and "cgroup2" mounts in /proc/self/mountinfo text, in order;
// \ooo escapes in paths are decoded. Lines of other file systems are skipped.
std::vector<MountinfoCgroup> ParseCgroupMounts(std::string_view mountinfo);
// /proc/self/cgroup: "0::/path" (v2) and "N:ctrl,ctrl:/path" (v1).
// Returns controller (or "" for v2) -> path, one entry per co-mounted
// controller ("name=systemd" kept as is); a " (deleted)" suffix is dropped.
std::vector<std::pair<std::string, std::string>> ParseProcCgroup(std::string_view text);

}  // namespace kiln::isolation
