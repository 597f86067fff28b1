// libkiln_zygote.so: the C++ half of a zygote (runtime/kiln_runtime/zygote.py
// is the other). The zygote's interpreter loads it with ctypes from an fd the
// pool sends, and calls:
//
//   kiln_zygote_init(fd)        once, before the preload imports: reads the
//                               ZygoteConfig and the seccomp program (wire.h)
//                               and builds the per-child plan (allocates)
//   kiln_zygote_ready(fd, n, s) once, after the imports and gc.freeze(): n
//                               imports failed; s: it will spawn, not fork
//   kiln_zygote_recv(fd)        blocks for the next ForkRequest: 1, or 0 at
//                               EOF (the pool is gone), or -errno
//   kiln_zygote_parent_close()  in the zygote after os.fork() or the spawn:
//                               drops its copies of the request's fds and
//                               tmpfs mounts
//   kiln_zygote_threads()       the zygote's thread count (/proc/self/status)
//   kiln_zygote_spawn()         instead of os.fork() + kiln_zygote_child(),
//                               when the zygote has one thread: the child's
//                               first process shares the zygote's memory
//                               (child::SpawnZygoteChild): its pid, or 0 in
//                               the sandbox's worker, or -errno
//   kiln_zygote_child()         in the fork: child::RunZygoteChild (returns
//                               0 only in the sandbox's worker)
//
// Every function runs in the zygote's own single thread; after the fork only
// kiln_zygote_child runs, in the restricted dialect (P4).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "child/zygote_child.h"
#include "isolation/mount_ns.h"
#include "isolation/user_ns.h"
#include "sys/fd_passing.h"
#include "zygote/wire.h"

namespace {

using kiln::zygote::ForkRequest;
using kiln::zygote::kWireMagic;
using kiln::zygote::ZygoteConfig;
using kiln::zygote::ZygoteReady;

ZygoteConfig g_config;
std::vector<sock_filter> g_seccomp;
kiln::isolation::MountPlan* g_mounts = nullptr;  // lives as long as the zygote
kiln::child::ZygoteChildPlan g_plan;
int g_request_fds[4] = {-1, -1, -1, -1};
// The fd numbers the per-child plan attaches /dev/shm, /tmp and /workspace
// from (MountLayout::private_tmpfs_fds): each request's tmpfs mounts are
// dup'd onto them, and /dev/null again once the child has its copy, so that
// the zygote holds no child's tmpfs.
int g_tmpfs_fds[3] = {-1, -1, -1};
int g_devnull = -1;
std::vector<int> g_font_fds;

// One record of exactly `size` bytes (SOCK_SEQPACKET keeps boundaries).
int RecvExact(int fd, void* buf, size_t size) {
  ssize_t n;
  do {
    n = ::recv(fd, buf, size, MSG_TRUNC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  if (n == 0) return -EPIPE;
  return static_cast<size_t>(n) == size ? 0 : -EPROTO;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int kiln_zygote_init(int control_fd) {
  int rc = RecvExact(control_fd, &g_config, sizeof g_config);
  if (rc != 0) return rc;
  if (g_config.magic != kWireMagic || g_config.seccomp_length == 0 ||
      g_config.seccomp_length > BPF_MAXINSNS) {
    return -EPROTO;
  }
  g_seccomp.resize(g_config.seccomp_length);
  rc = RecvExact(control_fd, g_seccomp.data(), g_seccomp.size() * sizeof(sock_filter));
  if (rc != 0) return rc;
  g_config.hostname[sizeof g_config.hostname - 1] = '\0';

  g_devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (g_devnull < 0) return -errno;
  for (int& fd : g_tmpfs_fds) {
    fd = ::fcntl(g_devnull, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return -errno;
  }
  kiln::isolation::MountLayout layout;
  std::memcpy(layout.private_tmpfs_fds, g_tmpfs_fds, sizeof g_tmpfs_fds);
  layout.inside_uid = kiln::isolation::kInsideUid;
  layout.inside_gid = kiln::isolation::kInsideGid;
  layout.workspace_bytes = g_config.workspace_bytes;
  layout.tmp_bytes = g_config.tmp_bytes;
  layout.shm_bytes = g_config.shm_bytes;
  // The font cache the pool staged into the zygote's own /tmp: each child
  // copies it into its fresh /tmp (the fds stay open for the zygote's life).
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kiln::isolation::kMplConfigPath, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("fontlist-", 0) != 0) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    g_font_fds.push_back(fd);
    layout.mpl_cache_files.push_back({fd, name});
  }
  auto plan = kiln::isolation::BuildPrivateMountPlan(layout);
  if (!plan.ok()) return -EINVAL;
  g_mounts = new kiln::isolation::MountPlan(std::move(*plan));

  g_plan.mount_ops = g_mounts->ops().data();
  g_plan.mount_count = g_mounts->ops().size();
  g_plan.hostname = g_config.hostname;
  g_plan.last_cap = g_config.last_cap;
  g_plan.rlimits = g_config.rlimits;
  g_plan.landlock = g_config.landlock;
  g_plan.seccomp = g_seccomp.data();
  g_plan.seccomp_length = g_seccomp.size();
  g_plan.cwd = kiln::isolation::kWorkspacePath;
  return 0;
}

__attribute__((visibility("default"))) int kiln_zygote_ready(int control_fd, int preload_failures,
                                                             int spawn) {
  ZygoteReady ready;
  ready.preload_failures = preload_failures;
  ready.spawn = spawn != 0 ? 1 : 0;
  return ::send(control_fd, &ready, sizeof ready, MSG_NOSIGNAL) == sizeof ready ? 0 : -errno;
}

__attribute__((visibility("default"))) int kiln_zygote_recv(int control_fd) {
  ForkRequest req;
  int fds[kiln::zygote::kForkRequestFds];
  for (int& fd : fds) fd = -1;
  const kiln::sys::Received got = kiln::sys::ReceiveWithFds(control_fd, &req, sizeof req, fds,
                                                            kiln::zygote::kForkRequestFds, 0);
  if (got.bytes < 0) return -got.err;
  if (got.bytes == 0) return 0;
  const size_t count = got.nfds;
  if (got.bytes != sizeof req || got.truncated || req.magic != kWireMagic ||
      count != kiln::zygote::kForkRequestFds || g_mounts == nullptr ||
      req.slot >= g_config.max_slots) {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    return -EPROTO;
  }
  for (int i = 0; i < 3; ++i) {
    const int rc = ::dup3(fds[4 + i], g_tmpfs_fds[i], O_CLOEXEC);
    ::close(fds[4 + i]);
    if (rc < 0) {
      for (int j = 0; j < 4; ++j) ::close(fds[j]);
      return -EPROTO;
    }
  }
  std::memcpy(g_request_fds, fds, sizeof g_request_fds);
  g_plan.sync_fd = fds[0];
  g_plan.code_fd = fds[1];
  g_plan.stdout_fd = fds[2];
  g_plan.stderr_fd = fds[3];
  g_plan.uid = g_config.first_child_id + req.slot;
  g_plan.gid = g_config.first_child_id + req.slot;
  return 1;
}

__attribute__((visibility("default"))) void kiln_zygote_parent_close(void) {
  for (int& fd : g_request_fds) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  for (int fd : g_tmpfs_fds) (void)::dup3(g_devnull, fd, O_CLOEXEC);
}

__attribute__((visibility("default"))) int kiln_zygote_threads(void) {
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return -EIO;
  buf[n] = '\0';
  const char* t = std::strstr(buf, "\nThreads:");
  if (t == nullptr) return -EIO;
  return static_cast<int>(std::strtol(t + 9, nullptr, 10));
}

__attribute__((visibility("default"))) int kiln_zygote_spawn(void) {
  return kiln::child::SpawnZygoteChild(g_plan);
}

__attribute__((visibility("default"))) int kiln_zygote_child(void) {
  return kiln::child::RunZygoteChild(g_plan);
}

}  // extern "C"
