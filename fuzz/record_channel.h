// The setup channel and the pool's handoff socket as a fuzz target sees them:
// a SOCK_SEQPACKET socketpair whose receiving end has SO_PASSCRED (as the
// supervisor's and the spawner's have), a sender that puts one record on it
// with any number of fds (SCM_RIGHTS) and, if asked, its credentials
// (SCM_CREDENTIALS), and a count of this process's open fds, so that a
// decoder that leaks a received fd is caught.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_util.h"

namespace kiln::fuzz {

// How a record is sent: byte 0 of the input.
struct RecordShape {
  size_t fds = 0;  // attached, up to 15 (the receivers take 1 or 6)
  bool credentials = false;
  bool close_after = false;  // the sender hangs up after the record

  static RecordShape From(uint8_t b) {
    return RecordShape{static_cast<size_t>(b & 0x0f), (b & 0x10) != 0, (b & 0x20) != 0};
  }
};

class RecordChannel final {
 public:
  RecordChannel() {
    int sp[2];
    FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
    receiver_ = sp[0];
    sender_ = sp[1];
    const int one = 1;
    FUZZ_CHECK(::setsockopt(receiver_, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) == 0);
    null_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    FUZZ_CHECK(null_ >= 0);
  }
  ~RecordChannel() {
    if (receiver_ >= 0) ::close(receiver_);
    if (sender_ >= 0) ::close(sender_);
    ::close(null_);
  }
  RecordChannel(const RecordChannel&) = delete;
  RecordChannel& operator=(const RecordChannel&) = delete;

  int receiver() const { return receiver_; }

  // Puts one record on the channel; false when the kernel refused it.
  bool Send(std::string_view payload, const RecordShape& shape) {
    int fds[16];
    for (size_t i = 0; i < shape.fds; ++i) fds[i] = null_;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds) + CMSG_SPACE(sizeof(ucred))] = {};
    iovec iov{const_cast<char*>(payload.data()), payload.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    size_t used = 0;
    if (shape.fds > 0 || shape.credentials) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      if (shape.fds > 0) {
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * shape.fds);
        std::memcpy(CMSG_DATA(c), fds, sizeof(int) * shape.fds);
        used += CMSG_SPACE(sizeof(int) * shape.fds);
        c = CMSG_NXTHDR(&msg, c);
      }
      if (shape.credentials) {
        const ucred me{::getpid(), ::getuid(), ::getgid()};
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_CREDENTIALS;
        c->cmsg_len = CMSG_LEN(sizeof me);
        std::memcpy(CMSG_DATA(c), &me, sizeof me);
        used += CMSG_SPACE(sizeof me);
      }
      msg.msg_controllen = used;
    }
    const bool sent = ::sendmsg(sender_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) ==
                      static_cast<ssize_t>(payload.size());
    if (shape.close_after) HangUp();
    return sent;
  }

  void HangUp() {
    if (sender_ >= 0) ::close(sender_);
    sender_ = -1;
  }

 private:
  int receiver_ = -1;
  int sender_ = -1;
  int null_ = -1;
};

// The fds open among the first `kScan`, as a bit set: equal before and after
// a decoder ran means it kept no fd it received (received fds take the
// lowest free numbers).
struct OpenFds {
  static constexpr int kScan = 256;
  uint64_t bits[kScan / 64] = {};

  static OpenFds Now() {
    OpenFds s;
    for (int fd = 0; fd < kScan; ++fd) {
      if (::fcntl(fd, F_GETFD) >= 0) s.bits[fd / 64] |= uint64_t{1} << (fd % 64);
    }
    return s;
  }
  bool operator==(const OpenFds& o) const { return std::memcmp(bits, o.bits, sizeof bits) == 0; }
};

}  // namespace kiln::fuzz
