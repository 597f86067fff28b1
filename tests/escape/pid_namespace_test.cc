// Escape tier: processes. The sandbox has its own pid namespace (the program
// is pid 2, kiln's init is pid 1) and a fresh /proc for it; the supervisor's
// environment must not be reachable from inside.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class PidNamespaceEscape : public SandboxTest {};

TEST_F(PidNamespaceEscape, HostProcessesAreNotInProc) {
  // Layer: pid namespace + the /proc mounted for it. A host process the test
  // started has no /proc entry inside and cannot be signalled (ESRCH: the pid
  // does not exist in this namespace), and the listing holds exactly the
  // program's own pid 2: pid 1 (kiln's init, not dumpable) is hidden too, by
  // the hidepid=ptraceable mount option.
  Subprocess sleeper;
  ASSERT_TRUE(sleeper.Start({"/usr/bin/sleep", "60"}));
  const pid_t host_pid = sleeper.pid();
  ASSERT_GT(host_pid, 2);
  const JsonRun r = RunProbe("HOST_PID = " + std::to_string(host_pid) + R"PY(
print("pids:", " ".join(sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int)))
print("host pid listed:", os.path.exists(f"/proc/{HOST_PID}"))
attempt("kill(host pid, 0)", lambda: os.kill(HOST_PID, 0))
print("me:", os.getpid(), "parent:", os.getppid())
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(),
            "pids: 2\n"
            "host pid listed: False\n"
            "kill(host pid, 0): ESRCH\n"
            "me: 2 parent: 1\n")
      << r.Describe();
  EXPECT_EQ(::kill(host_pid, 0), 0) << "the host sleeper should still be running";
}

TEST_F(PidNamespaceEscape, SupervisorEnvironmentIsUnreachable) {
  // Layers: kiln builds the program's environment from scratch (nothing of
  // its own is inherited), and kiln's init (pid 1, a copy of the supervisor's
  // memory, environment block included) changed credentials during setup, so
  // it is not dumpable: /proc is mounted hidepid=ptraceable, so /proc/1 does
  // not even exist for the program (ENOENT; without hidepid it would be EACCES).
  const std::string name = "KILN_ESCAPE_SECRET";
  const std::string secret = UniqueMarker("s3cret-value");
  ProcessOptions options;
  options.env = {{name, secret}};
  // Control: the runner really hands the variable to what it starts.
  const ProcessResult env = RunProcess({"/usr/bin/env"}, options);
  ASSERT_NE(env.out.find(name + "=" + secret), std::string::npos) << env.out;

  const std::string reversed(secret.rbegin(), secret.rend());
  const std::string code =
      ReplaceAll(ReplaceAll(ReadProbe("environ_scan.py"), "@SECRET_NAME@", name),
                 "@SECRET_REVERSED@", reversed);
  ASSERT_EQ(code.find(secret), std::string::npos);
  const JsonRun r = RunProbe(code, {}, options);
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(),
            "os.environ: absent\n"
            "/proc/1/environ: ENOENT\n"
            "readable: 2 self thread-self\n"
            "leaks: none\n")
      << r.Describe();
  EXPECT_EQ(r.raw.out.find(secret), std::string::npos) << "the secret is in kiln's output";
}

TEST_F(PidNamespaceEscape, KillMinusOneReachesNothingOutside) {
  // Layer: pid namespace. kill(-1, SIGKILL) signals every process the caller
  // may signal in its namespace except itself and init; the namespace holds
  // only those two, so the call finds no target (ESRCH). A host process we
  // started survives, and kiln still reports a normal result.
  Subprocess sleeper;
  ASSERT_TRUE(sleeper.Start({"/usr/bin/sleep", "60"}));
  const JsonRun r = RunProbe(R"PY(
import signal
attempt("kill(-1, SIGKILL)", lambda: os.kill(-1, signal.SIGKILL))
print("still here")
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.j["exit_code"], 0) << r.Describe();
  EXPECT_EQ(r.out(), "kill(-1, SIGKILL): ESRCH\nstill here\n") << r.Describe();
  int status = 0;
  EXPECT_EQ(::waitpid(sleeper.pid(), &status, WNOHANG), 0) << "the host process was killed";
  EXPECT_EQ(::kill(sleeper.pid(), 0), 0);
}

TEST_F(PidNamespaceEscape, KillMinusOneWithChildrenKillsOnlyTheSandbox) {
  // Same act with a sandbox child present: kill(-1) now succeeds (it kills
  // that child) and still reaches no host process nor init.
  Subprocess sleeper;
  ASSERT_TRUE(sleeper.Start({"/usr/bin/sleep", "60"}));
  const JsonRun r = RunProbe(R"PY(
import signal, time
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
attempt("kill(-1, SIGKILL)", lambda: os.kill(-1, signal.SIGKILL))
_, status = os.waitpid(child, 0)
print("child killed by:", os.WTERMSIG(status) if os.WIFSIGNALED(status) else "nothing")
attempt("init alive: kill(1, 0)", lambda: os.kill(1, 0))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "kill(-1, SIGKILL): OK\nchild killed by: 9\ninit alive: kill(1, 0): OK\n")
      << r.Describe();
  EXPECT_EQ(::kill(sleeper.pid(), 0), 0) << "the host process was killed";
}

}  // namespace
}  // namespace kiln::testing
