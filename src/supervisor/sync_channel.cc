#include "supervisor/sync_channel.h"

#include <sys/socket.h>

#include <cerrno>

#include "sys/fd_passing.h"

namespace kiln::supervisor {

using child::SyncMessage;

Received ReceiveSync(int fd) {
  Received out;
  int fds[1] = {-1};
  const sys::Received got = sys::ReceiveWithFds(fd, &out.msg, sizeof out.msg, fds, 1, MSG_DONTWAIT);
  if (got.bytes < 0) {
    if (got.err == EAGAIN) {
      out.again = true;
    } else {
      out.eof = true;
    }
    return out;
  }
  // Owned before anything else: an empty record (which recvmsg returns as 0,
  // like the end of the stream) may carry an fd too (found by
  // fuzz/setup_record_fuzzer.cc: it stayed open in the supervisor).
  if (got.nfds > 0) out.fd.Reset(fds[0]);  // more fds than a record carries were closed
  if (got.bytes == 0) {
    out.eof = true;
    return out;
  }
  out.sender = got.sender;
  if (got.bytes != static_cast<ssize_t>(sizeof(SyncMessage)) || got.truncated) out.garbage = true;
  return out;
}

}  // namespace kiln::supervisor
