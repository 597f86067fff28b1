// Passing fds over unix sockets (SCM_RIGHTS), the one implementation every
// channel uses: the setup channel, the spawner's control socket, the pool's
// handoffs and the zygote's fork requests. Allocation-free and async-signal-
// safe, so the child's setup may call them too.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace kiln::sys {

// Sends `len` bytes with `nfds` fds attached (none when nfds is 0), retrying
// EINTR. Returns what sendmsg returns (-1 with errno).
ssize_t SendWithFds(int sock, const void* data, size_t len, const int* fds, size_t nfds, int flags);

struct Received {
  ssize_t bytes = 0;  // what recvmsg returned (-1 with errno saved in `err`, 0 at EOF)
  int err = 0;
  size_t nfds = 0;         // fds stored in the caller's array
  bool truncated = false;  // MSG_TRUNC/MSG_CTRUNC, or more fds than the array holds (closed)
  pid_t sender = 0;        // SCM_CREDENTIALS, when the socket has SO_PASSCRED
};

// Receives one message into `data` (up to `len` bytes) and up to `max_fds`
// fds into `fds` (close-on-exec); fds beyond that are closed. Retries EINTR.
Received ReceiveWithFds(int sock, void* data, size_t len, int* fds, size_t max_fds, int flags);

}  // namespace kiln::sys
