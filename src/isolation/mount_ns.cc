#include "isolation/mount_ns.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "sys/syscalls.h"

namespace kiln::isolation {
namespace {

constexpr const char* kStagingRoot = "/tmp";  // covered by our tmpfs in the new mount ns

std::string PasswdContent(const MountLayout& l) {
  return "root:x:0:0:root:/root:/usr/sbin/nologin\n"
         "sandbox:x:" +
         std::to_string(l.inside_uid) + ":" + std::to_string(l.inside_gid) +
         ":kiln sandbox:/tmp:/usr/sbin/nologin\n"
         "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
}

std::string GroupContent(const MountLayout& l) {
  return "root:x:0:\nsandbox:x:" + std::to_string(l.inside_gid) + ":\nnogroup:x:65534:\n";
}

// A user namespace locks the flags a mount had when it was copied from the
// host (MNT_LOCK_*): a remount that drops nosuid/nodev/noexec/ro fails with
// EPERM. Keep whatever restrictive flags the source's mount already has.
unsigned long LockedFlags(const std::string& path) {
  struct statvfs sv {};
  if (::statvfs(path.c_str(), &sv) != 0) return 0;
  unsigned long flags = 0;
  if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return flags;
}

class Builder {
 public:
  // Targets are `root` + the sandbox path: the staging root before pivot_root,
  // or "" for a plan run inside the sandbox's root (a pooled child's).
  // `layout.tmpfs_owner` set: each tmpfs is made here, detached (MakeTmpfs),
  // and the child attaches it; else the child mounts it with uid=/gid=.
  Builder(MountPlan* plan, std::string root, const MountLayout& layout)
      : plan_(plan), root_(std::move(root)), layout_(layout) {}

  std::string T(const std::string& p) { return root_ + p; }

  void Mkdir(const std::string& p, SetupStep step, uint32_t mode = 0755) {
    plan_->Add({MountOpKind::kMkdir, step, nullptr, plan_->Intern(T(p)), 0, nullptr, 0, -1, mode});
  }
  void BindRo(const std::string& src, const std::string& dst, bool is_dir) {
    if (is_dir) {
      Mkdir(dst, SetupStep::kMountBinds);
    } else {
      File(dst, "", 0444, SetupStep::kMountBinds);
    }
    plan_->Add({MountOpKind::kBindRo, SetupStep::kMountBinds, plan_->Intern(src),
                plan_->Intern(T(dst)), LockedFlags(src), nullptr, 0, -1, 0});
  }
  // A read-only bind whose source is detached first (open_tree), so it may
  // live anywhere on the host, even beneath the staging root.
  void BindRoDetached(const std::string& src, const std::string& dst) {
    Mkdir(dst, SetupStep::kMountBinds);
    const int slot = next_slot_++;
    plan_->Add({MountOpKind::kOpenTree, SetupStep::kMountBinds, plan_->Intern(src),
                plan_->Intern(dst), 0, nullptr, 0, slot, 0});
    plan_->Add({MountOpKind::kAttachTree, SetupStep::kMountBinds, nullptr, plan_->Intern(T(dst)),
                LockedFlags(src), nullptr, 0, slot, 0});
  }
  int slots_used() const { return next_slot_; }
  void Symlink(const std::string& text, const std::string& at) {
    plan_->Add({MountOpKind::kSymlink, SetupStep::kMountBinds, plan_->Intern(text),
                plan_->Intern(T(at)), 0, nullptr, 0, -1, 0});
  }
  void File(const std::string& p, const std::string& content, uint32_t mode, SetupStep step) {
    const char* data = plan_->Intern(content);
    plan_->Add({MountOpKind::kWriteFile, step, nullptr, plan_->Intern(T(p)), 0, data,
                content.size(), -1, mode});
  }
  // A size-capped tmpfs on `p` with MS_* `flags` and its root's `mode`,
  // owned by the sandbox. `made`: a detached tmpfs the caller already made
  // (a pooled child's, by the pool: MountLayout::private_tmpfs_fds).
  Status Tmpfs(const std::string& p, unsigned long flags, uint64_t bytes, uint32_t mode,
               SetupStep step, int made = -1) {
    int fd = made;
    const char* data = nullptr;
    if (fd < 0 && layout_.tmpfs_owner) {
      unsigned attr = 0;
      if (flags & MS_RDONLY) attr |= MOUNT_ATTR_RDONLY;
      if (flags & MS_NOSUID) attr |= MOUNT_ATTR_NOSUID;
      if (flags & MS_NODEV) attr |= MOUNT_ATTR_NODEV;
      if (flags & MS_NOEXEC) attr |= MOUNT_ATTR_NOEXEC;
      const int made_here = sys::MakeTmpfs(bytes, mode, layout_.tmpfs_owner->first,
                                           layout_.tmpfs_owner->second, attr);
      if (made_here < 0) {
        return ErrnoError("make the tmpfs for " + p + " (fsopen/fsmount)", errno, step);
      }
      fd = plan_->Own(UniqueFd(made_here));
    } else if (fd < 0) {
      char octal[16];
      std::snprintf(octal, sizeof octal, "%04o", mode);
      data = plan_->Intern("size=" + std::to_string(bytes) + ",mode=" + octal +
                           ",uid=" + std::to_string(layout_.inside_uid) +
                           ",gid=" + std::to_string(layout_.inside_gid));
    }
    plan_->Add({MountOpKind::kTmpfs, step, nullptr, plan_->Intern(T(p)), flags, data, 0, fd, 0});
    return OkStatus();
  }
  void Op(MountOpKind kind, SetupStep step, const std::string& src, const std::string& dst,
          unsigned long flags = 0) {
    plan_->Add({kind, step, src.empty() ? nullptr : plan_->Intern(src), plan_->Intern(T(dst)),
                flags, nullptr, 0, -1, 0});
  }
  void Copy(int fd, const std::string& dst, uint32_t mode, SetupStep step = SetupStep::kStageFiles,
            int64_t mtime_ns = -1) {
    plan_->Add({MountOpKind::kCopyFd, step, nullptr, plan_->Intern(T(dst)), 0, nullptr, 0, fd, mode,
                mtime_ns});
  }
  // A read-only copy of the host directory `src` at `dst`, in a tmpfs of its
  // own. A bind would do without copying, but a mount's root field in
  // /proc/self/mountinfo is its source's path on the host's filesystem
  // (open_tree's detached copy too: it has the same root dentry); a tmpfs's
  // is "/". Regular files keep their mode (less the write bits) and mtime,
  // directories are 0755, symlinks are copied as links; anything else is
  // left out. The supervisor opens the files, so the child needs no path to
  // the host's tree. `only`, when not empty, names the one entry of `src`
  // that is copied (with everything beneath it).
  Status CopyTreeRo(const std::string& src, const std::string& dst, const std::string& only = "") {
    namespace fs = std::filesystem;
    struct Entry {
      std::string rel;
      enum { kDir, kFile, kLink } kind = kDir;
      std::string link;
      UniqueFd fd;
      uint32_t mode = 0;
      int64_t mtime_ns = -1;
    };
    std::vector<Entry> entries;
    uint64_t bytes = 0;
    std::error_code ec;
    const std::string walk = only.empty() ? src : src + "/" + only;
    if (!only.empty()) {
      Entry top;
      top.rel = only;
      entries.push_back(std::move(top));
    }
    fs::recursive_directory_iterator it(walk, fs::directory_options::none, ec);
    if (ec) return ErrnoError("copy '" + walk + "': " + ec.message(), ec.value());
    for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
      if (ec) return ErrnoError("copy '" + src + "': " + ec.message(), ec.value());
      if (entries.size() >= kMaxCopiedFiles) {
        return InvalidArgument("'" + src + "' has more than " + std::to_string(kMaxCopiedFiles) +
                               " entries to copy into the sandbox");
      }
      Entry e;
      // Lexically: fs::relative would resolve a symlink to its target's path.
      e.rel = it->path().lexically_relative(src).string();
      const auto st = it->symlink_status(ec);
      if (ec) return ErrnoError("copy '" + it->path().string() + "': " + ec.message(), ec.value());
      if (fs::is_symlink(st)) {
        e.kind = Entry::kLink;
        e.link = fs::read_symlink(it->path(), ec).string();
        if (ec) return ErrnoError("readlink '" + it->path().string() + "'", ec.value());
      } else if (fs::is_directory(st)) {
        e.kind = Entry::kDir;
      } else if (fs::is_regular_file(st)) {
        e.kind = Entry::kFile;
        e.fd.Reset(::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
        if (!e.fd) return ErrnoError("open '" + it->path().string() + "'");
        struct stat info {};
        if (::fstat(e.fd.get(), &info) != 0)
          return ErrnoError("stat '" + it->path().string() + "'");
        if (!S_ISREG(info.st_mode)) continue;  // swapped meanwhile: leave it out
        e.mode = info.st_mode & 0555;
        e.mtime_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
        bytes += (static_cast<uint64_t>(info.st_size) + 4095) / 4096 * 4096;
        if (bytes > kMaxCopiedBytes) {
          return InvalidArgument("'" + src + "' is larger than " +
                                 std::to_string(kMaxCopiedBytes >> 20) +
                                 " MiB, too large to copy into the sandbox");
        }
      } else {
        continue;  // fifos, sockets, devices: not part of kiln's tree
      }
      entries.push_back(std::move(e));
    }
    // Parents before children, in a fixed order.
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.rel < b.rel; });
    Mkdir(dst, SetupStep::kMountBinds);
    KILN_TRY(Tmpfs(dst, MS_NOSUID | MS_NODEV, bytes + (64 << 10), 0755, SetupStep::kMountBinds));
    for (auto& e : entries) {
      const std::string to = dst + "/" + e.rel;
      switch (e.kind) {
        case Entry::kDir: Mkdir(to, SetupStep::kMountBinds); break;
        case Entry::kLink: Symlink(e.link, to); break;
        case Entry::kFile:
          Copy(plan_->Own(std::move(e.fd)), to, e.mode, SetupStep::kMountBinds, e.mtime_ns);
          break;
      }
    }
    Op(MountOpKind::kRemountRo, SetupStep::kMountBinds, "", dst, MS_NOSUID | MS_NODEV);
    return OkStatus();
  }

 private:
  MountPlan* plan_;
  std::string root_;
  const MountLayout& layout_;
  int next_slot_ = 0;
};

// Detached trees, by slot. Child-side storage: a fixed array, no allocation.
constexpr int kMaxTreeSlots = 16;
int g_tree_fds[kMaxTreeSlots] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};

// What each sandbox gets of its own, on mount points that exist: a fresh /proc
// for its pid namespace (masked), size-capped tmpfs on /dev/shm, /tmp and
// /workspace, the font cache and the caller's files. The cold path runs it in
// the staging root; a pooled child, forked from a zygote whose jail already
// has the rest, runs only this (BuildPrivateMountPlan).
Status AddPrivateMounts(Builder& b, MountPlan& plan, const MountLayout& layout) {
  // A fresh /proc for the new pid namespace, with the entries that reveal or
  // poke the host masked (as runc and Docker do).
  // hidepid=ptraceable (Linux 5.8): a process the program may not ptrace is
  // invisible, so pid 1 (kiln's init, not dumpable) and its command line,
  // which names the host's kiln binary, do not show.
  plan.Add({MountOpKind::kProc, SetupStep::kMountProc, nullptr, plan.Intern(b.T("/proc")),
            MS_NOSUID | MS_NODEV | MS_NOEXEC, plan.Intern("hidepid=ptraceable"), 0, -1, 0});
  // A zygote's /proc stays unmasked: the kernel lets a user namespace mount a
  // new procfs only where one is already fully visible (mount_too_revealing),
  // and each of the zygote's children mounts its own, masked, over it.
  if (layout.mask_proc) {
    for (const char* f : {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                          "/proc/latency_stats", "/proc/sysrq-trigger", "/proc/kallsyms",
                          "/proc/kmsg", "/proc/config.gz", "/proc/vmallocinfo", "/proc/slabinfo",
                          "/proc/pagetypeinfo", "/proc/iomem", "/proc/ioports",
                          // Host-wide state that tells of other tenants' work
                          // (a side channel) or of the host: masked as gVisor
                          // fakes them. os.getloadavg() then raises OSError.
                          "/proc/loadavg", "/proc/buddyinfo", "/proc/zoneinfo", "/proc/interrupts",
                          "/proc/softirqs", "/proc/diskstats", "/proc/partitions", "/proc/cmdline",
                          "/proc/schedstat", "/proc/swaps"}) {
      b.Op(MountOpKind::kMaskFile, SetupStep::kMountProc, "/dev/null", f);
    }
    for (const char* d :
         {"/proc/acpi", "/proc/scsi", "/proc/bus", "/proc/irq", "/proc/fs", "/proc/driver",
          "/proc/asound", "/proc/tty", "/proc/sys", "/proc/pressure"}) {
      b.Op(MountOpKind::kMaskDir, SetupStep::kMountProc, b.T(kEmptyDirPath), d);
    }
  }
  // Writable, size-capped, never executable.
  KILN_TRY(b.Tmpfs("/dev/shm", MS_NOSUID | MS_NODEV | MS_NOEXEC, layout.shm_bytes, 01777,
                   SetupStep::kMountTmpfs, layout.private_tmpfs_fds[0]));
  KILN_TRY(b.Tmpfs("/tmp", MS_NOSUID | MS_NODEV | MS_NOEXEC, layout.tmp_bytes, 01777,
                   SetupStep::kMountTmpfs, layout.private_tmpfs_fds[1]));
  KILN_TRY(b.Tmpfs(kWorkspacePath, MS_NOSUID | MS_NODEV | MS_NOEXEC, layout.workspace_bytes, 0755,
                   SetupStep::kMountTmpfs, layout.private_tmpfs_fds[2]));
  b.Op(MountOpKind::kRebind, SetupStep::kMountTmpfs, b.T(kWorkspacePath), kE2bHomePath, MS_NOEXEC);

  // The pre-built matplotlib font cache (a missing one costs 0.4-0.6 s per
  // start), then the caller's files.
  b.Mkdir(kMplConfigPath, SetupStep::kStageFiles, 0700);
  for (const auto& f : layout.mpl_cache_files) {
    b.Copy(f.fd, std::string(kMplConfigPath) + "/" + f.name, 0644);
  }
  // Files may sit in subdirectories ("data/a.csv"): make each directory once.
  std::set<std::string> made;
  for (const auto& f : layout.workspace_files) {
    for (size_t pos = f.name.find('/'); pos != std::string::npos; pos = f.name.find('/', pos + 1)) {
      const std::string dir = std::string(kWorkspacePath) + "/" + f.name.substr(0, pos);
      if (made.insert(dir).second) b.Mkdir(dir, SetupStep::kStageFiles);
    }
    b.Copy(f.fd, std::string(kWorkspacePath) + "/" + f.name, 0644);
  }
  return OkStatus();
}

}  // namespace

const char* MountPlan::Intern(std::string s) {
  strings_.push_back(std::move(s));
  return strings_.back().c_str();
}

int MountPlan::Own(UniqueFd fd) {
  fds_.push_back(std::move(fd));
  return fds_.back().get();
}

Result<MountPlan> BuildPrivateMountPlan(const MountLayout& layout) {
  MountPlan plan;
  Builder b(&plan, "", layout);
  KILN_TRY(AddPrivateMounts(b, plan, layout));
  return plan;
}

Result<MountPlan> BuildMountPlan(const MountLayout& layout) {
  namespace fs = std::filesystem;
  MountPlan plan;
  plan.set_new_root(plan.Intern(kStagingRoot));
  Builder b(&plan, kStagingRoot, layout);

  // The root: a small tmpfs that only holds mount points and /etc's files.
  KILN_TRY(b.Tmpfs("", MS_NOSUID | MS_NODEV, 1 << 20, 0755, SetupStep::kMountRoot));
  // An empty directory, bound read-only over the /proc directories that are
  // masked (a bind shows no ids in mountinfo, as a tmpfs of the child's
  // would).
  b.Mkdir("/var", SetupStep::kMountRoot);
  b.Mkdir(kEmptyDirPath, SetupStep::kMountRoot, 0555);

  // /usr, and the top-level entries that merged-/usr Debian makes symlinks
  // into it (/bin -> usr/bin, /lib, /lib64, /sbin...). Copy the links as links;
  // a non-merged host gets read-only binds instead.
  b.BindRo("/usr", "/usr", true);
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    const auto st = fs::symlink_status(top, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::is_symlink(st)) {
      b.Symlink(fs::read_symlink(top, ec).string(), top);
    } else if (fs::is_directory(st)) {
      b.BindRo(top, top, true);
    }
  }

  // /etc: only what the interpreter and Debian's python3-* packages read.
  b.Mkdir("/etc", SetupStep::kMountRoot);
  b.File("/etc/passwd", PasswdContent(layout), 0444, SetupStep::kMountRoot);
  b.File("/etc/group", GroupContent(layout), 0444, SetupStep::kMountRoot);
  b.File("/etc/hostname", "kiln\n", 0444, SetupStep::kMountRoot);
  b.File("/etc/hosts", "127.0.0.1\tlocalhost kiln\n::1\tlocalhost\n", 0444, SetupStep::kMountRoot);
  b.File("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n", 0444,
         SetupStep::kMountRoot);
  for (const char* f : {"/etc/ld.so.cache", "/etc/matplotlibrc", "/etc/timezone", "/etc/mime.types",
                        "/etc/localtime"}) {
    std::error_code ec;
    const auto st = fs::symlink_status(f, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::is_symlink(st)) {
      b.Symlink(fs::read_symlink(f, ec).string(), f);
    } else if (fs::is_regular_file(st)) {
      b.BindRo(f, f, false);
    }
  }
  {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/etc", ec)) {
      const std::string name = entry.path().filename().string();
      const bool wanted =
          name == "alternatives" || name == "fonts" || name.rfind("python3", 0) == 0;
      if (wanted && entry.is_directory(ec) && !entry.is_symlink(ec)) {
        b.BindRo(entry.path().string(), entry.path().string(), true);
      }
    }
  }

  // kiln's own launcher/runtime (and a zygote's library), read-only copies:
  // the sandbox learns nothing of where kiln lives on the host.
  if (!layout.runtime_dir.empty()) {
    b.Mkdir("/opt", SetupStep::kMountRoot);
    b.Mkdir("/opt/kiln", SetupStep::kMountRoot);
    // Only the package the sandbox imports: not the runtime's tests or README.
    KILN_TRY(b.CopyTreeRo(layout.runtime_dir, kRuntimeMountPath, "kiln_runtime"));
    if (!layout.zygote_lib_dir.empty()) {
      KILN_TRY(b.CopyTreeRo(layout.zygote_lib_dir, kZygoteLibPath));
    }
  }
  for (const auto& p : layout.extra_ro_paths) {
    const std::string home = kE2bHomePath;
    if (p == kE2bHomeParent || p == home || p.rfind(home + "/", 0) == 0) {
      return InvalidArgument("extra mount '" + p + "' would cover " + home +
                             ", where the sandbox shows its workspace (docs/e2b.md)");
    }
    std::error_code ec;
    if (!fs::is_directory(p, ec))
      return InvalidArgument("extra mount '" + p + "' is not a directory");
    // Parents are created one level at a time.
    std::string acc;
    const fs::path parent = fs::path(p).parent_path();
    for (const auto& part : parent) {
      if (part == "/") continue;
      acc += "/" + part.string();
      b.Mkdir(acc, SetupStep::kMountBinds);
    }
    b.BindRoDetached(p, p);
  }
  if (b.slots_used() > kMaxTreeSlots) return InvalidArgument("too many extra mounts");

  // Minimal /dev: device nodes cannot be made in a user namespace, so bind the
  // host's five harmless ones; everything else does not exist.
  b.Mkdir("/dev", SetupStep::kMountBinds);
  KILN_TRY(b.Tmpfs("/dev", MS_NOSUID | MS_NOEXEC, 64 << 10, 0755, SetupStep::kMountBinds));
  for (const char* node : kDeviceNodes) {
    const std::string p = std::string("/dev/") + node;
    b.File(p, "", 0666, SetupStep::kMountBinds);
    b.Op(MountOpKind::kBindDev, SetupStep::kMountBinds, p, p);
  }
  b.Symlink("/proc/self/fd", "/dev/fd");
  b.Symlink("/proc/self/fd/0", "/dev/stdin");
  b.Symlink("/proc/self/fd/1", "/dev/stdout");
  b.Symlink("/proc/self/fd/2", "/dev/stderr");
  b.Mkdir("/dev/shm", SetupStep::kMountTmpfs);
  b.Op(MountOpKind::kRemountRo, SetupStep::kMountTmpfs, "", "/dev", MS_NOSUID | MS_NOEXEC);
  b.Mkdir("/proc", SetupStep::kMountProc);
  b.Mkdir("/tmp", SetupStep::kMountTmpfs);
  b.Mkdir(kWorkspacePath, SetupStep::kMountTmpfs);
  b.Mkdir(kE2bHomeParent, SetupStep::kMountTmpfs);
  b.Mkdir(kE2bHomePath, SetupStep::kMountTmpfs);
  KILN_TRY(AddPrivateMounts(b, plan, layout));
  return plan;
}

namespace {

int CopyFdTo(int src, const char* target, uint32_t mode, int64_t mtime_ns) {
  int out = ::open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (out < 0) return -1;
  off_t offset = 0;
  for (;;) {
    ssize_t n = ::sendfile(out, src, &offset, 1 << 20);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(out);
      errno = e;
      return -1;
    }
    if (n == 0) break;
  }
  // The umask may have narrowed the mode; the plan's mode is what we want.
  // A copied source keeps its mtime, which its __pycache__ entry records.
  timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
  if (mtime_ns >= 0) times[1] = {mtime_ns / 1000000000, mtime_ns % 1000000000};
  if (::fchmod(out, mode) != 0 || (mtime_ns >= 0 && ::futimens(out, times) != 0)) {
    int e = errno;
    ::close(out);
    errno = e;
    return -1;
  }
  return ::close(out);
}

int WriteFileAt(const char* target, const char* data, size_t len, uint32_t mode) {
  int fd = ::open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  if (len > 0 && sys::WriteAll(fd, data, len) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  // The umask may have narrowed the mode; the plan's mode is what we want.
  if (::fchmod(fd, mode) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return ::close(fd);
}

int ApplyOne(const MountOp& op) {
  switch (op.kind) {
    case MountOpKind::kMkdir:
      if (::mkdir(op.target, op.mode) != 0 && errno != EEXIST) return -1;
      return 0;
    case MountOpKind::kBindRo:
      if (::mount(op.source, op.target, nullptr, MS_BIND, nullptr) != 0) return -1;
      return ::mount(nullptr, op.target, nullptr,
                     MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | op.flags, nullptr);
    case MountOpKind::kBindDev:
      if (::mount(op.source, op.target, nullptr, MS_BIND, nullptr) != 0) return -1;
      return ::mount(nullptr, op.target, nullptr,
                     MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, nullptr);
    case MountOpKind::kTmpfs:
      // Made by the supervisor or the pool (flags, size and owner set there),
      // or mounted here.
      if (op.fd >= 0) return sys::MoveMountFromFd(op.fd, op.target);
      return ::mount("tmpfs", op.target, "tmpfs", op.flags, op.data);
    case MountOpKind::kProc: return ::mount("proc", op.target, "proc", op.flags, op.data);
    case MountOpKind::kRemountRo:
      // The mount, not its superblock: a tmpfs made by the supervisor belongs
      // to the host's user namespace, whose superblock we may not remount.
      return ::mount(nullptr, op.target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | op.flags,
                     nullptr);
    case MountOpKind::kSymlink: return ::symlink(op.source, op.target);
    case MountOpKind::kWriteFile: return WriteFileAt(op.target, op.data, op.length, op.mode);
    case MountOpKind::kCopyFd: return CopyFdTo(op.fd, op.target, op.mode, op.mtime_ns);
    case MountOpKind::kMaskFile: {
      struct stat st {};
      if (::lstat(op.target, &st) != 0) return 0;  // nothing to mask on this kernel
      if (::mount(op.source, op.target, nullptr, MS_BIND, nullptr) != 0) return -1;
      return ::mount(nullptr, op.target, nullptr,
                     MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, nullptr);
    }
    case MountOpKind::kOpenTree: return 0;  // done by PrepareMountSourcesInChild
    case MountOpKind::kAttachTree: {
      if (op.fd < 0 || op.fd >= kMaxTreeSlots || g_tree_fds[op.fd] < 0) {
        errno = EBADF;
        return -1;
      }
      if (sys::MoveMountFromFd(g_tree_fds[op.fd], op.target) != 0) return -1;
      ::close(g_tree_fds[op.fd]);
      g_tree_fds[op.fd] = -1;
      return ::mount(nullptr, op.target, nullptr,
                     MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | op.flags, nullptr);
    }
    case MountOpKind::kRebind:
      if (::mount(op.source, op.target, nullptr, MS_BIND, nullptr) != 0) return -1;
      return ::mount(nullptr, op.target, nullptr,
                     MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | op.flags, nullptr);
    case MountOpKind::kMaskDir: {
      struct stat st {};
      if (::lstat(op.target, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
      if (::mount(op.source, op.target, nullptr, MS_BIND, nullptr) != 0) return -1;
      return ::mount(nullptr, op.target, nullptr,
                     MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
    }
  }
  errno = EINVAL;
  return -1;
}

}  // namespace

int PrepareMountSourcesInChild(const MountOp* ops, size_t count, size_t* failed) {
  for (size_t i = 0; i < count; ++i) {
    if (ops[i].kind != MountOpKind::kOpenTree) continue;
    if (ops[i].fd < 0 || ops[i].fd >= kMaxTreeSlots) {
      *failed = i;
      errno = EINVAL;
      return -1;
    }
    // Not recursive: a submount under the source stays out of the sandbox.
    const int fd = sys::OpenTree(AT_FDCWD, ops[i].source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0) {
      *failed = i;
      return -1;
    }
    g_tree_fds[ops[i].fd] = fd;
  }
  return 0;
}

int ApplyMountOpsInChild(const MountOp* ops, size_t count, size_t* failed) {
  // Nothing we mount may propagate back to the host (the host's / is usually
  // shared, and a new mount namespace inherits that).
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    *failed = SIZE_MAX;
    return -1;
  }
  for (size_t i = 0; i < count; ++i) {
    if (ApplyOne(ops[i]) != 0) {
      *failed = i;
      return -1;
    }
  }
  return 0;
}

int PivotRootInChild(const char* new_root) {
  if (::chdir(new_root) != 0) return -1;
  // pivot_root(2) NOTES: with new_root == put_old == ".", the old root ends up
  // stacked on "." and a lazy unmount of "." removes it.
  if (sys::PivotRoot(".", ".") != 0) return -1;
  if (::umount2(".", MNT_DETACH) != 0) return -1;
  return ::chdir("/");
}

int RemountRootReadOnlyInChild() {
  return ::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                 nullptr);
}

}  // namespace kiln::isolation
