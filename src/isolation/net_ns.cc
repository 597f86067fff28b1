#include "isolation/net_ns.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln::isolation {

int BringUpLoopbackInChild() {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, "lo", 3);
  int rc = ::ioctl(fd, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    rc = ::ioctl(fd, SIOCSIFFLAGS, &ifr);
  }
  int e = errno;
  ::close(fd);
  errno = e;
  return rc;
}

int SetHostnameInChild(const char* hostname) {
  if (::sethostname(hostname, std::strlen(hostname)) != 0) return -1;
  return ::setdomainname("", 0);
}

}  // namespace kiln::isolation
