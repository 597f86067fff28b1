// Escape tier: the network. The sandbox has its own network namespace (a
// loopback that leads nowhere), and seccomp refuses socket(2) and
// socketpair(2) for every address family but AF_UNIX with EAFNOSUPPORT
// (src/isolation/seccomp.cc, AddSocketRules). EAFNOSUPPORT names seccomp as
// the refusing layer: without the filter, the kernel would create AF_INET,
// AF_INET6, AF_NETLINK and AF_ALG sockets for an unprivileged process (the
// network namespace only makes the connect fail later), and refuse AF_PACKET
// and raw sockets with EPERM (no CAP_NET_RAW).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class NetworkEscape : public SandboxTest {};

TEST_F(NetworkEscape, TcpConnectToHostLoopbackIsRefusedAtSocket) {
  // A listener on the host's 127.0.0.1, non-blocking so the test can ask it
  // afterwards, without threads, whether anything connected.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  const JsonRun r = RunProbe("PORT = " + std::to_string(port) + R"PY(
import socket
attempt("socket(AF_INET, SOCK_STREAM)", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("create_connection", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=2))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  // The same on the gVisor backend: kiln's filter refuses the family there too.
  EXPECT_EQ(r.out(),
            "socket(AF_INET, SOCK_STREAM): EAFNOSUPPORT\n"
            "create_connection: EAFNOSUPPORT\n")
      << r.Describe();
  // Nothing reached the listener.
  const int accepted = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  const int accept_errno = errno;
  EXPECT_EQ(accepted, -1) << "the host listener accepted a connection from the sandbox";
  EXPECT_EQ(accept_errno, EAGAIN);
  if (accepted >= 0) ::close(accepted);
  ::close(listener);
}

struct FamilyCase {
  const char* label;  // test name suffix
  const char* call;   // Python expression that makes the socket
};

class SocketFamilyEscape : public SandboxTest, public ::testing::WithParamInterface<FamilyCase> {};

TEST_P(SocketFamilyEscape, IsEAFNOSUPPORT) {
  // Layer: seccomp, socket-domain rule (SCMP_ACT_ERRNO(EAFNOSUPPORT)).
  const FamilyCase& c = GetParam();
  const JsonRun r =
      RunProbe(std::string("import socket\nattempt('") + c.label + "', lambda: " + c.call + ")\n");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), std::string(c.label) + ": EAFNOSUPPORT\n") << r.Describe();
}

INSTANTIATE_TEST_SUITE_P(
    Families, SocketFamilyEscape,
    ::testing::Values(
        FamilyCase{"inet6_stream", "socket.socket(socket.AF_INET6, socket.SOCK_STREAM)"},
        FamilyCase{"inet_udp", "socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"},
        FamilyCase{"inet_raw",
                   "socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"},
        FamilyCase{"netlink_route", "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)"},
        FamilyCase{"packet", "socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)"},
        // AF_VSOCK is 40; a network namespace does not isolate it (it reaches
        // the hypervisor), so only seccomp stands in the way.
        FamilyCase{"vsock", "socket.socket(40, socket.SOCK_STREAM, 0)"},
        FamilyCase{"socketpair_inet", "socket.socketpair(socket.AF_INET, socket.SOCK_STREAM)"},
        // AF_ALG (38): the kernel crypto API, a family with its own CVE
        // history that any unprivileged process may otherwise open.
        FamilyCase{"alg", "socket.socket(38, socket.SOCK_SEQPACKET, 0)"}),
    [](const ::testing::TestParamInfo<FamilyCase>& param_info) {
      return std::string(param_info.param.label);
    });

TEST_F(NetworkEscape, UnixSocketsStillWork) {
  // Control for the family rule: AF_UNIX is the one allowed family, so the
  // refusals above are the domain check, not a blanket socket() deny.
  const JsonRun r = RunProbe(R"PY(
import socket
a, b = socket.socketpair(socket.AF_UNIX)
a.sendall(b"ping")
print("unix socketpair:", b.recv(4).decode())
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "unix socketpair: ping\n") << r.Describe();
}

}  // namespace
}  // namespace kiln::testing
