// Escape tier: what the program is. No capability in any set, no_new_privs,
// a seccomp filter, uid/gid 1000 with no supplementary groups, and its own
// hostname. Read from /proc/self/status, as an attacker would check.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class CredentialsEscape : public SandboxTest {};

TEST_F(CredentialsEscape, NoCapabilitiesNoNewPrivsAndAFilter) {
  // Layers: caps (every set and the bounding set cleared before exec, so
  // execve of a setuid or file-capability binary grants nothing), then
  // PR_SET_NO_NEW_PRIVS, then seccomp in filter mode (2).
  const JsonRun r = RunProbe(R"PY(
fields = {}
for line in open("/proc/self/status"):
    key, _, value = line.partition(":")
    fields[key] = value.strip()
for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
    print(key, fields.get(key, "<missing>"))
print("PR_GET_NO_NEW_PRIVS", libc.prctl(39, 0, 0, 0, 0))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  if (TestBackend() == "gvisor") {
    // gVisor's /proc/self/status has no CapAmb or NoNewPrivs line; kiln's
    // filter is installed (Seccomp 2, applied by the Sentry) and no_new_privs
    // is set (prctl says so).
    EXPECT_EQ(r.out(),
              "CapInh 0000000000000000\n"
              "CapPrm 0000000000000000\n"
              "CapEff 0000000000000000\n"
              "CapBnd 0000000000000000\n"
              "CapAmb <missing>\n"
              "NoNewPrivs <missing>\n"
              "Seccomp 2\n"
              "PR_GET_NO_NEW_PRIVS 1\n")
        << r.Describe();
    return;
  }
  EXPECT_EQ(r.out(),
            "CapInh 0000000000000000\n"
            "CapPrm 0000000000000000\n"
            "CapEff 0000000000000000\n"
            "CapBnd 0000000000000000\n"
            "CapAmb 0000000000000000\n"
            "NoNewPrivs 1\n"
            "Seccomp 2\n"
            "PR_GET_NO_NEW_PRIVS 1\n")
      << r.Describe();
}

TEST_F(CredentialsEscape, UidAndGidAre1000WithNoGroups) {
  // Layer: user namespace (uid/gid maps of one id each) + setresuid/setgroups.
  const JsonRun r = RunProbe(R"PY(
print("uid", os.getresuid())
print("gid", os.getresgid())
print("groups", os.getgroups())
attempt("setuid(0)", lambda: os.setuid(0))
attempt("setgid(0)", lambda: os.setgid(0))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  // setuid(0)/setgid(0): the maps hold only 1000, so 0 has no kernel id in
  // this namespace: EINVAL, before the kernel even asks for CAP_SETUID.
  // gVisor: the Sentry's user namespace maps more than 1000, so it is the
  // missing CAP_SETUID/CAP_SETGID that refuses: EPERM.
  const std::string refused = TestBackend() == "gvisor" ? "EPERM" : "EINVAL";
  EXPECT_EQ(r.out(),
            "uid (1000, 1000, 1000)\n"
            "gid (1000, 1000, 1000)\n"
            "groups []\n"
            "setuid(0): " +
                refused +
                "\n"
                "setgid(0): " +
                refused + "\n")
      << r.Describe();
}

TEST_F(CredentialsEscape, HostnameIsKilnAndCannotBeChanged) {
  // Layer: UTS namespace; sethostname is also on seccomp's deny list (EPERM).
  const JsonRun r = RunProbe(R"PY(
import socket
print("hostname", socket.gethostname(), os.uname().nodename)
attempt("sethostname", lambda: socket.sethostname("pwned"))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "hostname kiln kiln\nsethostname: EPERM\n") << r.Describe();
}

TEST_F(CredentialsEscape, CgroupPathsNameNoHostCgroup) {
  // Layer: cgroup namespace, rooted at the sandbox's own cgroup. Every
  // hierarchy's line of /proc/self/cgroup must say "/": the cgroup names
  // kiln gives (`sbx-<supervisor's host pid>-...`) and the host's own
  // hierarchy (the supervisor's cgroup) stay outside. On cgroup v1 a cold
  // sandbox's pid 1 makes the namespace after it is moved into its cgroup,
  // a pooled one's likewise; on v2 clone3(CLONE_INTO_CGROUP) roots it there.
  const JsonRun r = RunProbe(R"PY(
import subprocess
print(open("/proc/self/cgroup").read(), end="")
# A child process sees the same (it inherits the namespace and the cgroup).
print(subprocess.run(["/usr/bin/cat", "/proc/self/cgroup"], capture_output=True,
                     text=True).stdout, end="")
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  const std::vector<std::string> lines = Lines(r.out());
  if (TestBackend() == "gvisor") {
    // gVisor's /proc/self/cgroup is empty: no cgroup path at all.
    EXPECT_EQ(r.out(), "") << r.Describe();
    return;
  }
  ASSERT_FALSE(lines.empty()) << r.Describe();
  for (const std::string& line : lines) {
    // hierarchy-ID:controller-list:cgroup-path
    const auto second = line.find(':', line.find(':') + 1);
    ASSERT_NE(second, std::string::npos) << line;
    EXPECT_EQ(line.substr(second + 1), "/") << "the sandbox sees a cgroup path: " << line << "\n"
                                            << r.Describe();
  }
}

}  // namespace
}  // namespace kiln::testing
