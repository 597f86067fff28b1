// Network namespace: the sandbox gets an empty one, so the only interface is
// its own loopback. Bringing "lo" up lets programs that talk to themselves over
// 127.0.0.1 work; nothing in it leads to the host's network. (seccomp then
// refuses every socket family but AF_UNIX, since AF_VSOCK is not isolated by a
// net namespace; Landlock ABI >= 4 refuses TCP bind/connect as a third layer.)
#pragma once

namespace kiln::isolation {

// Child side: SIOCSIFFLAGS IFF_UP on "lo". -1 with errno on failure.
int BringUpLoopbackInChild();
// Child side: sethostname/setdomainname in the new UTS namespace.
int SetHostnameInChild(const char* hostname);

}  // namespace kiln::isolation
