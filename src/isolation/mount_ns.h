// Mount namespace: the sandbox's filesystem, built from a plan of MountOps.
//
// The supervisor decides, before clone, every mount, directory, symlink and
// file of the new root (BuildMountPlan: it reads the host, resolves symlinks,
// renders /etc/passwd); the child runs the ops in order (ApplyMountOpsInChild)
// with nothing to decide, no allocation, and reports the index of a failing op.
//
// The layout (docs/setup-sequence.md, docs/architecture.md):
//   /                tmpfs, remounted read-only after pivot_root
//   /usr             read-only, nosuid, nodev bind (and /bin, /lib... as on the host)
//   /etc/...         synthesized passwd, group, hosts; ro binds of ld.so.cache,
//                    alternatives, matplotlibrc, python3*, localtime
//   /opt/kiln/runtime read-only copy of kiln's runtime/ (the launcher) in a
//                    tmpfs of its own (a bind would name the host directory in
//                    /proc/self/mountinfo); a zygote's jail: /opt/kiln/lib too
//   /proc            fresh procfs of the sandbox's pid namespace, masked entries
//   /dev             tmpfs (ro) with binds of null, zero, full, random, urandom;
//                    /dev/shm size-capped tmpfs
//   /tmp, /workspace size-capped tmpfs, nosuid, nodev, noexec; cwd = /workspace
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/setup_step.h"
#include "base/unique_fd.h"

namespace kiln::isolation {

enum class MountOpKind : uint8_t {
  kMkdir,       // mkdir target (mode)
  kBindRo,      // bind source on target, then remount ro|nosuid|nodev (+ locked flags)
  kBindDev,     // bind a device node source on target: ro, nosuid, noexec (not nodev)
  kTmpfs,       // attach the detached tmpfs `fd` (made by the supervisor or the pool)
                // on target, or, with fd -1, mount a tmpfs there with flags and
                // data (size=, mode=, uid=)
  kProc,        // mount proc on target
  kRemountRo,   // make the mount on target (one we made) read-only, keeping flags
  kSymlink,     // symlink source (the link text) at target
  kWriteFile,   // create target with data[0..len) and mode
  kCopyFd,      // create target with mode and copy the contents of fd (then its
                // mtime, when mtime_ns >= 0)
  kMaskFile,    // bind source (/dev/null) over target if target exists
  kMaskDir,     // bind the empty directory source read-only over target if it exists
  kOpenTree,    // open_tree(source, OPEN_TREE_CLONE) into slot `fd`, before anything
                // else and with the caller's host identity (PrepareMountSourcesInChild)
  kAttachTree,  // move_mount the tree in slot `fd` onto target, then ro|nosuid|nodev
  kRebind,      // bind the mount at source (a path of the plan, made by an earlier op) on
                // target too: the same filesystem, writable, nosuid|nodev (+ flags)
};

struct MountOp {
  MountOpKind kind;
  SetupStep step;       // reported when this op fails
  const char* source;   // host path, link text, or nullptr
  const char* target;   // absolute path including the staging root
  unsigned long flags;  // MS_* for mounts (extra flags to keep for binds)
  const char* data;     // mount data, or file contents for kWriteFile
  size_t length;        // kWriteFile
  int fd;               // kCopyFd, kTmpfs (-1: mount one); slot index for kOpenTree/kAttachTree
  uint32_t mode;        // kMkdir, kWriteFile, kCopyFd
  // kCopyFd: the source's mtime (a copied .py keeps its __pycache__ entry
  // valid), or -1 to leave the copy's.
  int64_t mtime_ns = -1;
};

// Owns the strings the ops point into. Movable, never copied (pointers).
class MountPlan final {
 public:
  MountPlan() = default;
  MountPlan(const MountPlan&) = delete;
  MountPlan& operator=(const MountPlan&) = delete;
  MountPlan(MountPlan&&) = default;
  MountPlan& operator=(MountPlan&&) = default;

  const char* Intern(std::string s);
  void Add(MountOp op) { ops_.push_back(op); }
  // Keeps an fd a kCopyFd op reads until CloseFds (the child has its copy
  // once it is cloned).
  int Own(UniqueFd fd);
  void CloseFds() { fds_.clear(); }
  const std::vector<MountOp>& ops() const { return ops_; }
  // Staging directory the new root is mounted on before pivot_root.
  const char* new_root() const { return new_root_; }
  void set_new_root(const char* p) { new_root_ = p; }

 private:
  std::deque<std::string> strings_;  // deque: pointers stay valid on growth
  std::vector<MountOp> ops_;
  std::vector<UniqueFd> fds_;
  const char* new_root_ = nullptr;
};

struct MountLayout {
  uid_t inside_uid = 1000;
  gid_t inside_gid = 1000;
  std::string runtime_dir;  // host path of kiln's runtime/ directory (copied)
  uint64_t workspace_bytes = 0;
  uint64_t tmp_bytes = 0;
  uint64_t shm_bytes = 0;
  // Files copied into the workspace (fd opened by the supervisor).
  struct Staged {
    int fd;
    std::string name;
  };
  std::vector<Staged> workspace_files;
  // Files copied into /tmp/matplotlib (the pre-built font cache).
  std::vector<Staged> mpl_cache_files;
  // Extra read-only binds, host path = sandbox path (profiles, later).
  std::vector<std::string> extra_ro_paths;
  // The host directory of libkiln_zygote.so and kiln-sandbox-init, copied
  // read-only to kZygoteLibPath: a zygote's jail, and every cold sandbox
  // (whose pid 1 execs the init).
  std::string zygote_lib_dir;
  // Mask /proc's host-revealing entries. Off only for a zygote's jail, whose
  // children each mount their own masked /proc over it (BuildPrivateMountPlan).
  bool mask_proc = true;
  // The host uid and gid that own the roots of the sandbox's tmpfs mounts,
  // when the caller is root in the host's user namespace: BuildMountPlan then
  // makes each tmpfs itself (sys::MakeTmpfs) and the child attaches it. A
  // tmpfs made by the host's root prints no `uid=`/`gid=` in mountinfo; one
  // the child mounts prints its creator's host ids (unset: an unprivileged
  // kiln, whose sandboxes run as the caller's own ids). docs/adr/0017.
  std::optional<std::pair<uid_t, gid_t>> tmpfs_owner;
  // BuildPrivateMountPlan: the fds that hold a pooled child's /dev/shm, /tmp
  // and /workspace, made for it by the pool (zygote_lib.cc), or -1.
  int private_tmpfs_fds[3] = {-1, -1, -1};
};

// Supervisor side, before clone. Reads the host (which top-level entries are
// symlinks into /usr, which /etc files exist, the flags of each bind source's
// mount that a user namespace would lock), opens the files of kiln's own
// directories (runtime_dir, zygote_lib_dir: copied, not bound, so that no
// mount's root names a host path; the plan owns those fds until CloseFds)
// and returns the ops. A directory to copy that holds more than
// kMaxCopiedFiles entries or kMaxCopiedBytes is an error.
Result<MountPlan> BuildMountPlan(const MountLayout& layout);

// The ops of what every sandbox has of its own, for a child that already is in
// a sandbox's root (a pooled child forked from a zygote, src/zygote): a fresh
// masked /proc, tmpfs on /dev/shm, /tmp and /workspace (the mount points
// exist), the font cache and `workspace_files`. Targets are absolute paths;
// new_root() is null. Runs ApplyMountOpsInChild like the full plan.
Result<MountPlan> BuildPrivateMountPlan(const MountLayout& layout);

// Child side, first, while the child still has the supervisor's host uid (so a
// directory under a private home is reachable): detaches a copy of each
// kOpenTree source (the policy's extra read-only paths). Later ops can attach
// them even though the staging root covers /tmp. -1 with errno and *failed on
// failure.
int PrepareMountSourcesInChild(const MountOp* ops, size_t count, size_t* failed);

// Child side, async-signal-safe. Makes "/" recursively private, then runs the
// ops (kOpenTree ops were done by PrepareMountSourcesInChild). On failure
// returns -1 with errno set and *failed = index of the op.
int ApplyMountOpsInChild(const MountOp* ops, size_t count, size_t* failed);

// Child side: pivot_root into new_root and detach the old root (the
// "pivot_root(".", ".")" idiom from pivot_root(2), so no put_old directory is
// needed), then chdir("/"). -1 with errno on failure.
int PivotRootInChild(const char* new_root);

// Child side, after pivot: remount "/" read-only (the root tmpfs). -1/errno.
int RemountRootReadOnlyInChild();

// Paths inside the sandbox.
inline constexpr const char* kWorkspacePath = "/workspace";
// The workspace again, at E2B's home directory (docs/e2b.md): E2B's users and
// its SDK's file paths name it, and E2B sandboxes run their cells and commands
// there. A second mount of the same tmpfs, so os.getcwd() says it too.
// (ci/check-rules allows this one /home path: it is E2B's, not a machine's.)
inline constexpr const char* kE2bHomeParent = "/home";
inline constexpr const char* kE2bHomePath = "/home/user";
inline constexpr const char* kTmpPath = "/tmp";
// An empty read-only directory, bound over the masked /proc directories.
inline constexpr const char* kEmptyDirPath = "/var/empty";
inline constexpr const char* kShmPath = "/dev/shm";
inline constexpr const char* kRuntimeMountPath = "/opt/kiln/runtime";
inline constexpr const char* kZygoteLibPath = "/opt/kiln/lib";
inline constexpr const char* kMplConfigPath = "/tmp/matplotlib";
inline constexpr const char* kDeviceNodes[] = {"null", "zero", "full", "random", "urandom"};

// Bounds of a directory BuildMountPlan copies (kiln's runtime/, the zygote's
// library directory): each is a few hundred KB.
inline constexpr size_t kMaxCopiedFiles = 1024;
inline constexpr uint64_t kMaxCopiedBytes = 64ULL << 20;

}  // namespace kiln::isolation
