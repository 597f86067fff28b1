#include "supervisor/sync_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sys/fd_passing.h"

namespace kiln::supervisor {
namespace {

// An empty record with an fd attached reads as the end of the channel
// (recvmsg returns 0); the fd must not stay open in the supervisor (found by
// fuzz/setup_record_fuzzer.cc).
TEST(SyncChannel, EmptyRecordWithAnFdLeavesNothingOpen) {
  int sp[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_EQ(sys::SendWithFds(sp[1], "", 0, &pipe_fds[1], 1, 0), 0);
  ::close(pipe_fds[1]);
  {
    Received m = ReceiveSync(sp[0]);
    EXPECT_TRUE(m.eof);
  }
  // Every write end is closed: the read end sees EOF at once.
  char c;
  EXPECT_EQ(::read(pipe_fds[0], &c, 1), 0);
  ::close(pipe_fds[0]);
  ::close(sp[0]);
  ::close(sp[1]);
}

}  // namespace
}  // namespace kiln::supervisor
