// Escape tier: outliving the run, and inheriting what kiln's caller holds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class LifetimeEscape : public SandboxTest {};

TEST_F(LifetimeEscape, PgrepFindsAMarkedHostProcess) {
  // Control for the "nothing survives" checks below: the same PgrepF does see
  // a live process carrying a marker.
  const std::string marker = UniqueMarker("kiln-pgrep-control");
  Subprocess p;
  ASSERT_TRUE(p.Start({"/usr/bin/python3", "-c", "import time; time.sleep(30)  # " + marker}));
  std::vector<pid_t> found;
  // Until it shows (it does once its execve is done), up to 30 s on a busy host.
  for (int i = 0; i < 1500 && found.empty(); ++i) {
    found = PgrepF(marker);
    if (found.empty()) ::usleep(20000);
  }
  EXPECT_EQ(found, std::vector<pid_t>{p.pid()});
}

TEST_F(LifetimeEscape, DoubleForkedSetsidDaemonDiesWithTheRun) {
  // Layer: pid namespace. A daemon that left the program's session and
  // process group is still in the namespace; when the program ends, kiln's
  // init exits and the kernel SIGKILLs everything left in it.
  const std::string marker = UniqueMarker("kiln-daemon");
  const JsonRun r =
      RunProbe(ReplaceAll(ReadProbe("setsid_daemon.py"), "@MARKER@", marker), {"--timeout", "20"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "daemon running=True sid_leader=True\n") << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 10000) << "kiln waited for the daemon";
  EXPECT_EQ(PgrepF(marker), std::vector<pid_t>{}) << "the daemon outlived the run";
}

TEST_F(LifetimeEscape, InheritedFdsAreClosed) {
  // Layer: the child's fd arrangement (close_range after placing the fds it
  // keeps). The test holds a file and a pipe WITHOUT O_CLOEXEC, so kiln
  // inherits them; inside, no fd may refer to either (compared by device and
  // inode, whatever number it might have been moved to).
  TempDir dir;
  const std::string secret_path = dir.path() + "/" + UniqueMarker("inherited");
  WriteFile(secret_path, "host data\n");
  const int file_fd = ::open(secret_path.c_str(), O_RDONLY);  // no O_CLOEXEC, on purpose
  ASSERT_GE(file_fd, 3);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);  // no O_CLOEXEC, on purpose
  ASSERT_EQ(::fcntl(file_fd, F_GETFD) & FD_CLOEXEC, 0);
  // Control: what the test starts really inherits both.
  const ProcessResult ls = RunProcess({"/usr/bin/ls", "/proc/self/fd"});
  ASSERT_NE((" " + ReplaceAll(ls.out, "\n", " ")).find(" " + std::to_string(file_fd) + " "),
            std::string::npos)
      << ls.out;
  struct stat file_st {
  }, pipe_st{};
  ASSERT_EQ(::fstat(file_fd, &file_st), 0);
  ASSERT_EQ(::fstat(pipe_fds[0], &pipe_st), 0);

  const JsonRun r = RunProbe(
      "LEAKED = {(" + std::to_string(file_st.st_dev) + ", " + std::to_string(file_st.st_ino) +
      "), (" + std::to_string(pipe_st.st_dev) + ", " + std::to_string(pipe_st.st_ino) + ")}\n" +
      R"PY(
found = []
for fd in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        st = os.stat(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if (st.st_dev, st.st_ino) in LEAKED:
        found.append(fd)
print("leaked fds:", found)
print("0 ->", os.readlink("/proc/self/fd/0"))
for fd in (1, 2):
    print(fd, "->", os.readlink(f"/proc/self/fd/{fd}").split(":")[0])
)PY");
  ::close(file_fd);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  // gVisor names a host fd it passes through "host" (the supervisor's pipes).
  const std::string pipe = TestBackend() == "gvisor" ? "host" : "pipe";
  EXPECT_EQ(r.out(),
            "leaked fds: []\n"
            "0 -> /dev/null\n"
            "1 -> " +
                pipe +
                "\n"
                "2 -> " +
                pipe + "\n")
      << r.Describe();
}

TEST_F(LifetimeEscape, ProgramHoldsOnlyStdioAndItsRuntimeChannel) {
  // The program's fd table: 0, 1, 2, and one more: the runtime channel
  // (docs/protocol.md), a socket in the same process as the user's code by
  // design (the supervisor treats what comes through it as hostile). It is
  // close-on-exec, so anything the program execs holds 0, 1, 2 only (plus
  // the fd its own listing opens).
  const JsonRun r = RunProbe(R"PY(
import fcntl, subprocess
fds = [fd for fd in sorted(os.listdir("/proc/self/fd"), key=int)[3:]
       if os.path.exists(f"/proc/self/fd/{fd}")]
kinds = [os.readlink(f"/proc/self/fd/{fd}").split(":")[0] for fd in fds]
cloexec = [bool(fcntl.fcntl(int(fd), fcntl.F_GETFD) & fcntl.FD_CLOEXEC) for fd in fds]
print("program:", kinds, cloexec)
child = subprocess.run(["/usr/bin/python3", "-c",
                        "import os; print(sorted(os.listdir('/proc/self/fd'), key=int))"],
                       capture_output=True, text=True)
print("child:", child.stdout.strip())
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  // gVisor: the runtime channel is a host socket passed through ("host").
  const std::string kind = TestBackend() == "gvisor" ? "host" : "socket";
  EXPECT_EQ(r.out(), "program: ['" + kind + "'] [True]\nchild: ['0', '1', '2', '3']\n")
      << r.Describe();
}

}  // namespace
}  // namespace kiln::testing
