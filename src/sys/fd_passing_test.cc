#include "sys/fd_passing.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kiln::sys {
namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int sp[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
    a = sp[0];
    b = sp[1];
  }
  ~Pair() {
    ::close(a);
    ::close(b);
  }
};

TEST(FdPassing, BytesAndFdsArriveTogether) {
  Pair p;
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  const char hello[] = "hi";
  ASSERT_EQ(SendWithFds(p.a, hello, sizeof hello, pipe_fds, 2, 0),
            static_cast<ssize_t>(sizeof hello));
  char buf[8] = {};
  int fds[2] = {-1, -1};
  const Received got = ReceiveWithFds(p.b, buf, sizeof buf, fds, 2, 0);
  ASSERT_EQ(got.bytes, static_cast<ssize_t>(sizeof hello));
  EXPECT_STREQ(buf, "hi");
  ASSERT_EQ(got.nfds, 2u);
  EXPECT_FALSE(got.truncated);
  EXPECT_EQ(::fcntl(fds[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  // The received write end reaches the original read end.
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  for (int fd : {pipe_fds[0], pipe_fds[1], fds[0], fds[1]}) ::close(fd);
}

TEST(FdPassing, FdsBeyondTheArrayAreClosedAndFlagged) {
  Pair p;
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  const char one = 1;
  ASSERT_EQ(SendWithFds(p.a, &one, 1, pipe_fds, 2, 0), 1);
  ::close(pipe_fds[1]);
  char buf = 0;
  int fd = -1;
  const Received got = ReceiveWithFds(p.b, &buf, 1, &fd, 1, 0);
  EXPECT_EQ(got.nfds, 1u);
  EXPECT_TRUE(got.truncated);
  // The extra fd (the write end) was closed: the read end sees EOF.
  char c;
  EXPECT_EQ(::read(pipe_fds[0], &c, 1), 0);
  ::close(fd);
  ::close(pipe_fds[0]);
}

TEST(FdPassing, EndOfStreamAndTooManyFds) {
  Pair p;
  int fds[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(SendWithFds(p.a, "x", 1, fds, 9, 0), -1);
  ::shutdown(p.a, SHUT_WR);
  char buf;
  int fd;
  const Received got = ReceiveWithFds(p.b, &buf, 1, &fd, 1, 0);
  EXPECT_EQ(got.bytes, 0);
  EXPECT_EQ(got.nfds, 0u);
}

}  // namespace
}  // namespace kiln::sys
