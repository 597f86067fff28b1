// Escape tier: exhausting resources. Each bomb must end in the documented way
// (an errno inside, or an ExecutionResult status), quickly, and leave nothing
// running on the host.
#include <gtest/gtest.h>

#include <string>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class ResourceEscape : public SandboxTest {};

int IntAfter(const std::string& text, const std::string& key) {
  const auto pos = text.find(key);
  return pos == std::string::npos ? -1 : std::atoi(text.c_str() + pos + key.size());
}

TEST_F(ResourceEscape, ForkBombHitsThePidsLimitAndLeavesNothing) {
  KILN_REQUIRE_CGROUP_LIMITS();
  // Layer: the pids cgroup (--pids 64): fork fails with EAGAIN, which Python
  // raises as BlockingIOError. The children (sleep, argv[0] = marker) die
  // with the pid namespace when the program ends.
  const std::string marker = UniqueMarker("kiln-forkbomb");
  const JsonRun r = RunProbe(ReplaceAll(ReadProbe("fork_bomb.py"), "@MARKER@", marker),
                             {"--pids", "64", "--timeout", "20"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  ASSERT_EQ(r.out().rfind("forks=", 0), 0u) << r.Describe();
  const int forks = IntAfter(r.out(), "forks=");
  EXPECT_GE(forks, 1) << r.Describe();
  EXPECT_LT(forks, 64) << r.Describe();
  EXPECT_NE(r.out().find(" BlockingIOError EAGAIN\n"), std::string::npos) << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 15000) << "the fork bomb ran into the wall-clock timeout";
  EXPECT_EQ(PgrepF(marker), std::vector<pid_t>{}) << "fork-bomb children survived the run";
}

TEST_F(ResourceEscape, MemoryBombIsKilledByTheCgroupOom) {
  KILN_REQUIRE_CGROUP_LIMITS();
  // Layer: memory cgroup (--memory 128m, no swap). 1 GiB, every page touched.
  const JsonRun r = RunProbe(R"PY(
block = bytearray(1 << 30)
for i in range(0, len(block), 4096):
    block[i] = 1
print("survived")
)PY",
                             {"--memory", "128m", "--timeout", "20"});
  EXPECT_EQ(r.status(), "memory_limit") << r.Describe();
  EXPECT_GE(r.j.value("oom_kills", 0), 1) << r.Describe();
  EXPECT_EQ(r.j["signal"], 9) << r.Describe();
  // gVisor: the cgroup holds the Sentry, its gofer and runsc too, with 32 MiB
  // more for them (docs/adr/0021).
  const uint64_t overhead = TestBackend() == "gvisor" ? uint64_t{32} << 20 : 0;
  EXPECT_LE(r.j.value("peak_memory_bytes", uint64_t{0}), (uint64_t{128} << 20) + overhead)
      << r.Describe();
  EXPECT_EQ(r.out(), "") << r.Describe();
}

TEST_F(ResourceEscape, ThreadBombStopsBelowThePidsLimitAndEndsCleanly) {
  KILN_REQUIRE_CGROUP_LIMITS();
  // Layer: the pids cgroup counts threads too (--pids 32): thread creation
  // fails (RuntimeError "can't start new thread"), the program releases and
  // joins what it started, and exits 0.
  const JsonRun r = RunProbe(ReadProbe("thread_bomb.py"), {"--pids", "32", "--timeout", "20"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.j["exit_code"], 0) << r.Describe();
  const int threads = IntAfter(r.out(), "threads=");
  EXPECT_GE(threads, 1) << r.Describe();
  EXPECT_LT(threads, 32) << r.Describe();
  EXPECT_NE(r.out().find("failure=RuntimeError: can't start new thread\n"), std::string::npos)
      << r.Describe();
}

TEST_F(ResourceEscape, StdoutFloodIsCutAtTheCapQuickly) {
  // Layer: the supervisor's output cap (--output-limit 64k), enforced on the
  // pipe it reads, not trusted to the runtime: it kills the sandbox as soon
  // as the cap is passed.
  const JsonRun r = RunProbe(R"PY(
import sys
while True:
    sys.stdout.write("A" * 4096)
)PY",
                             {"--output-limit", "64k", "--timeout", "30"});
  EXPECT_EQ(r.status(), "output_limit") << r.Describe();
  EXPECT_EQ(r.j["stdout_truncated"], true) << r.Describe();
  EXPECT_EQ(r.j["stderr_truncated"], false) << r.Describe();
  EXPECT_EQ(r.out().size(), 64u * 1024) << r.Describe();
  EXPECT_EQ(r.out(), std::string(64 * 1024, 'A'));
  EXPECT_LT(r.raw.elapsed_ms, 10000) << "the flood ran on toward the 30 s timeout";
}

TEST_F(ResourceEscape, StderrFloodIsCutAtTheDefaultCap) {
  // Same cap on the other stream, at its default (1 MiB).
  const JsonRun r = RunProbe(R"PY(
import sys
while True:
    sys.stderr.write("E" * 4096)
)PY",
                             {"--timeout", "30"});
  EXPECT_EQ(r.status(), "output_limit") << r.Describe();
  EXPECT_EQ(r.j["stderr_truncated"], true) << r.Describe();
  EXPECT_EQ(r.err().size(), 1024u * 1024) << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 10000);
}

TEST_F(ResourceEscape, InfiniteLoopHitsTheCpuLimit) {
  // Layer: the CPU-time limit (--cpu-time 1): RLIMIT_CPU / the cgroup's
  // cpuacct, well before the 20 s wall clock.
  const JsonRun r = RunProbe("while True:\n    pass\n", {"--cpu-time", "1", "--timeout", "20"});
  EXPECT_EQ(r.status(), "cpu_limit") << r.Describe();
  EXPECT_GE(r.j.value("cpu_ms", 0.0), 900.0) << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 8000) << r.Describe();
}

TEST_F(ResourceEscape, SleepPastTheTimeoutIsKilled) {
  // Layer: the supervisor's wall-clock deadline (--timeout 1). The program
  // itself would sleep 30 s: 15 s tells the two apart with room for a busy
  // host's slow start (elapsed_ms includes kiln's own setup).
  const JsonRun r = RunProbe("import time\ntime.sleep(30)\nprint('woke')\n", {"--timeout", "1"});
  EXPECT_EQ(r.status(), "timeout") << r.Describe();
  EXPECT_EQ(r.out(), "") << r.Describe();
  EXPECT_GE(r.j.value("duration_ms", 0.0), 900.0) << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 15000) << r.Describe();
}

TEST_F(ResourceEscape, SleepPastTheTimeoutExits124InPlainMode) {
  const ProcessResult p = RunKiln({"run", "--timeout", "1", "-c", "import time; time.sleep(30)"});
  EXPECT_EQ(p.exit_code, 124) << p.err;
  EXPECT_LT(p.elapsed_ms, 15000);  // the program would sleep 30 s
  EXPECT_NE(p.err.find("timeout"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace kiln::testing
