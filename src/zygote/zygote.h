// A zygote: one profile's fork server (docs/adr/0011-zygote.md).
//
// Processes (the zygote's own pid namespace "Z"):
//   pool owner --clone3(user, mnt, pid, net, ipc, uts, cgroup)--> Z pid 1 (RunChild, zygote mode)
//     `-- zygote: /usr/bin/python3 ... kiln_runtime/zygote.py (preloaded, gc.freeze()d)
//           `-- os.fork() -> unshare(user, mnt, pid, net, ipc, uts) -> sandbox pid 1 -> worker
//
// The zygote's jail is the cold path's (the same mount plan, namespaces, root
// and uid 1000 inside) except that /proc is not masked (each child mounts its
// own, masked, over it), the interpreter keeps CAP_SETUID/CAP_SETGID of Z's
// user namespace (ambient) and nothing else, and neither Landlock nor seccomp
// is installed: its children set themselves up and install both.
//
// Z's user namespace maps a block of kBlockSize host uids (UidBlock): inside
// uid 1000 is the zygote, 1001 + slot the child in `slot`, so no two live
// sandboxes of any zygote or cold run share a host uid.
//
// Everything here runs in the pool's owner (single-threaded: it clones).
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "policy/policy.h"
#include "supervisor/host.h"

namespace kiln::zygote {

// Host ids of the pools: right above the cold path's uid slots.
inline constexpr uid_t kPoolUidBase = 1879048192u + 65536u;  // isolation::kSlotUidBase + kSlotCount
inline constexpr unsigned kBlockSize = 1024;                 // the zygote + 1023 children
inline constexpr unsigned kBlockCount = 256;
inline constexpr uid_t kZygoteUid = 1000;      // inside Z's user namespace
inline constexpr uid_t kFirstChildUid = 1001;  // inside Z's user namespace

// kBlockSize consecutive host uids (and gids) reserved for one zygote while
// this lives: a lock file per block (flock, so a crashed kiln frees them).
class UidBlock final {
 public:
  static Result<UidBlock> Acquire(const std::string& lock_dir);
  uid_t base() const { return base_; }

 private:
  UidBlock() = default;
  uid_t base_ = 0;
  UniqueFd lock_;
};

struct ZygoteOptions {
  explicit ZygoteOptions(policy::SandboxPolicy p) : policy(std::move(p)) {}
  std::string profile;               // for logs
  policy::SandboxPolicy policy;      // the children's: limits, interpreter, mounts, layers
  std::vector<std::string> preload;  // what the zygote imports
  std::string library;               // libkiln_zygote.so (FindZygoteLibrary)
  // The children's RLIMIT_CPU (seconds) when above the policy's one-run
  // backstop: the most any adopter may keep. Each adopter lowers it to what
  // it runs (Sandbox::Adopt: a one-shot's backstop, a session's budget):
  // lowering needs no CAP_SYS_RESOURCE in the host's namespace, raising does,
  // and hosts' root may lack it (containers).
  std::optional<double> rlimit_cpu_s;
  // The zygote's nice value, and so its forks' and every process of their
  // sandboxes' until a supervisor adopts one (supervisor::Sandbox::Adopt sets
  // it back to 0): refills run below the executions they are made for.
  int nice = 0;
};

// $KILN_ZYGOTE_LIB, else libexec/kiln/libkiln_zygote.so beside the running
// binary, else <exe>/../libexec/kiln/, else the one this build made. Its
// directory also holds kiln-sandbox-init; the zygote's jail binds it.
Result<std::string> FindZygoteLibrary();

class Zygote final {
 public:
  // Clones Z, writes its maps and sends the library, the configuration and
  // the seccomp program. Returns at once: the zygote then imports its preload
  // list (ready() once OnControl() has read its ready record). kFailedPrecondition
  // when the host cannot give what the policy requires (root for the uid
  // block and cgroups, Landlock).
  static Result<std::unique_ptr<Zygote>> Start(const supervisor::HostContext& host,
                                               const ZygoteOptions& options);
  // Kills Z's pid 1 (and with it everything in Z: the zygote and every
  // sandbox forked from it) and reaps it.
  ~Zygote();
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // For the owner's poll(2) (POLLIN each).
  int control_fd() const { return control_.get(); }  // the ready record
  int setup_fd() const { return setup_.get(); }      // Z pid 1's records
  int log_fd() const { return log_.get(); }          // the zygote's stdout+stderr
  int init_pidfd() const { return init_pidfd_.get(); }

  // Reads the ready record. An error means the zygote is broken.
  Status OnControl();
  // Reads Z pid 1's records: W (the zygote's pid), X (it exited), F.
  Status OnSetup();
  // Logs what the zygote wrote (import errors).
  void DrainLog();
  // Z's pid 1 exited: reaps it. True once reaped.
  bool ReapIfExited();

  bool ready() const { return ready_ && !exited_; }
  bool exited() const { return exited_; }
  pid_t zygote_pid() const { return zygote_pid_; }  // host pid; 0 until known
  pid_t init_pid() const { return init_pid_; }
  double start_ms() const { return start_ms_; }  // clone to ready
  int preload_failures() const { return preload_failures_; }
  // Its children's first process shares its memory (one copy of the zygote
  // per sandbox, the worker's), rather than being a fork (two copies).
  bool spawns() const { return spawns_; }
  unsigned max_slots() const { return kBlockSize - 1; }
  uid_t child_host_uid(unsigned slot) const { return block_.base() + 1 + slot; }
  // The block devices behind the jail's read-only binds, which its children
  // share: where their cgroups' I/O limits go (supervisor::SandboxIoDevices).
  const std::vector<isolation::BlockDevice>& io_devices() const { return io_devices_; }

  // Asks for a sandbox in uid `slot` with these fds (the child's ends: setup
  // channel, runtime channel, stdout and stderr write ends), and with the
  // child's /dev/shm, /tmp and /workspace, made here (as the host's root, so
  // that their mountinfo lines name no host id; mount_ns.h).
  Status Fork(unsigned slot, int sync, int runtime, int out, int err);
  // Stops the zygote (EOF on its control socket) but not Z's pid 1, which
  // stays while sandboxes forked from it run, then exits.
  void Retire();

 private:
  explicit Zygote(UidBlock block) : block_(std::move(block)) {}
  UidBlock block_;
  pid_t init_pid_ = -1;
  UniqueFd init_pidfd_, setup_, control_, log_;
  bool reaped_ = false, ready_ = false, exited_ = false;
  pid_t zygote_pid_ = 0;
  int preload_failures_ = 0;
  bool spawns_ = false;
  double start_ms_ = 0;
  std::string profile_;
  std::string log_buf_;
  std::chrono::steady_clock::time_point started_{};
  std::vector<isolation::BlockDevice> io_devices_;
  uint64_t shm_bytes_ = 0, tmp_bytes_ = 0, workspace_bytes_ = 0;  // each child's tmpfs
};

}  // namespace kiln::zygote
