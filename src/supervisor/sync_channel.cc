#include "supervisor/sync_channel.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kiln::supervisor {

using child::SyncMessage;

Received ReceiveSync(int fd) {
  Received out;
  iovec iov{&out.msg, sizeof out.msg};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(ucred))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN) {
      out.again = true;
    } else {
      out.eof = true;
    }
    return out;
  }
  if (n == 0) {
    out.eof = true;
    return out;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (i == 0 && !out.fd) {
          out.fd.Reset(received);
        } else {
          ::close(received);  // more fds than a record carries: drop them
        }
      }
    } else if (c->cmsg_type == SCM_CREDENTIALS) {
      ucred cred{};
      std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
      out.sender = cred.pid;
    }
  }
  if (n != static_cast<ssize_t>(sizeof(SyncMessage)) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    out.garbage = true;
  }
  return out;
}

}  // namespace kiln::supervisor
