// Restricted dialect (P4): see child_steps.h.
#include "child/child_steps.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "child/child_plan.h"
#include "isolation/mount_ns.h"
#include "sys/fd_passing.h"
#include "sys/syscalls.h"

namespace kiln::child {
namespace {

int g_sync_fd = -1;

}  // namespace

void SetSyncFd(int fd) { g_sync_fd = fd; }
int SyncFd() { return g_sync_fd; }

void Send(const SyncMessage& m) {
  while (::send(g_sync_fd, &m, sizeof m, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

void Fail(SetupStep step, int err, int detail) {
  SyncMessage m{};
  m.tag = SyncTag::kFailure;
  m.step = static_cast<uint8_t>(step);
  m.err = err;
  m.detail = detail;
  Send(m);
  ::_exit(127);
}

void ResetSignals() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);  // EINVAL for the few that cannot change: fine
  }
}

int WaitForRecord(SyncTag tag) {
  SyncMessage m{};
  ssize_t n;
  do {
    n = ::recv(g_sync_fd, &m, sizeof m, 0);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof m) || m.tag != tag) {
    errno = n == 0 ? EPIPE : EPROTO;
    return -1;
  }
  return 0;
}

int SetMemfdNoexecInChild() {
  const int fd = ::open("/proc/sys/vm/memfd_noexec", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = ::write(fd, "2", 1);
  const int e = errno;
  ::close(fd);
  errno = e;
  return n == 1 ? 0 : -1;
}

int SendWorkspaceFd() {
  int fd = ::open(isolation::kWorkspacePath, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  SyncMessage m{};
  m.tag = SyncTag::kWorkspaceFd;
  const ssize_t n = sys::SendWithFds(g_sync_fd, &m, sizeof m, &fd, 1, 0);
  int e = errno;
  ::close(fd);
  errno = e;
  return n == static_cast<ssize_t>(sizeof m) ? 0 : -1;
}

int ArrangeFds(int code_fd, int sync_fd, int stdout_fd, int stderr_fd) {
  const int sources[4] = {code_fd, sync_fd, stdout_fd, stderr_fd};
  const int targets[4] = {kCodeFd, kSyncFd, kStdoutFd, kStderrFd};
  int high[4];
  for (int i = 0; i < 4; ++i) {
    high[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, 64);
    if (high[i] < 0) return -1;
  }
  for (int i = 0; i < 4; ++i) {
    if (::dup3(high[i], targets[i], O_CLOEXEC) < 0) return -1;
  }
  g_sync_fd = kSyncFd;
  if (sys::CloseRange(kStderrFd + 1, UINT_MAX, 0) != 0) return -1;
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return -1;
  for (int fd = 0; fd <= 2; ++fd) {
    if (::dup2(null_fd, fd) < 0) return -1;
  }
  return null_fd > 2 ? ::close(null_fd) : 0;
}

int WorkerStdio() {
  if (::dup2(kStdoutFd, 1) < 0) return -1;
  return ::dup2(kStderrFd, 2) < 0 ? -1 : 0;
}

}  // namespace kiln::child

namespace kiln::child {

void FormatDecimal(char* out, size_t cap, unsigned v) {
  char digits[12];
  size_t d = 0, n = 0;
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < sizeof digits);
  while (d > 0 && n + 1 < cap) out[n++] = digits[--d];
  out[n] = '\0';
}

int ExecSandboxInit(const char* path, pid_t worker) {
  char pid_text[16];
  FormatDecimal(pid_text, sizeof pid_text, static_cast<unsigned>(worker));
  char* const argv[] = {const_cast<char*>("kiln-sandbox-init"), pid_text, nullptr};
  char* const envp[] = {nullptr};
  if (::fcntl(kSyncFd, F_SETFD, 0) != 0) return -1;
  ::execve(path, argv, envp);
  const int e = errno;
  ::fcntl(kSyncFd, F_SETFD, FD_CLOEXEC);
  errno = e;
  return -1;
}

void RunPooledInit(pid_t worker) {
  ::close(kCodeFd);
  ::close(kStdoutFd);
  ::close(kStderrFd);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  const int sigchld_fd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigchld_fd < 0) ::_exit(126);
  for (;;) {
    // Reap first: the worker may have exited before the signalfd existed.
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, __WALL | WNOHANG);
      if (pid <= 0) break;
      if (pid == worker) {
        SyncMessage m{};
        m.tag = SyncTag::kWorkerExited;
        m.status = status;
        Send(m);
        ::_exit(0);
      }
    }
    pollfd fds[2] = {{sigchld_fd, POLLIN, 0}, {kSyncFd, POLLRDHUP, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      ::_exit(126);
    }
    if ((fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) ::_exit(0);
    signalfd_siginfo info;
    while (::read(sigchld_fd, &info, sizeof info) > 0) {
    }
  }
}

}  // namespace kiln::child
