// Test library for the escape and integration tiers (P17 b, c): runs the real
// `kiln` binary ($KILN_BIN) as a subprocess, captures what it prints, and
// parses its --json result. Nothing here links kiln's own libraries: these
// tiers see kiln only from the outside, as a user would.
//
// Every wait is bounded, so a sandbox that hangs fails its test instead of
// hanging ctest.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "testlib/temp_dir.h"

namespace kiln::testing {

// How a subprocess ended, and what it printed.
struct ProcessResult {
  int exit_code = -1;      // when it exited; -1 otherwise
  int term_signal = 0;     // when a signal killed it
  bool timed_out = false;  // we killed it at ProcessOptions::timeout
  std::string out;
  std::string err;
  double elapsed_ms = 0;
  pid_t pid = -1;  // the subprocess's pid (already reaped)
};

struct ProcessOptions {
  std::optional<std::string> stdin_data;  // nullopt: stdin is /dev/null
  std::chrono::milliseconds timeout{std::chrono::seconds(90)};
  // Added to (or replacing, by name) the test's own environment.
  std::vector<std::pair<std::string, std::string>> env;
};

// A started subprocess (own process group, so a timeout kills its whole tree).
// Start() then Wait(); the destructor kills and reaps it if Wait() was never
// called, so an early ASSERT never leaks a process.
class Subprocess final {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Fork + execve(argv[0], argv). Returns false (with a gtest failure) when
  // the pipes or the fork fail. The child inherits every fd the test holds
  // that is not close-on-exec (on purpose: escape tests rely on it).
  bool Start(const std::vector<std::string>& argv, const ProcessOptions& options = {});
  // Feeds stdin, drains stdout/stderr, reaps; kills the group at the timeout.
  ProcessResult Wait();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  std::string stdin_data_;
  std::chrono::milliseconds timeout_{0};
  std::chrono::steady_clock::time_point started_{};
};

ProcessResult RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// $KILN_BIN and $KILN_SOURCE_DIR, else the paths this build baked in.
std::string KilnBin();
std::string SourceDir();

// The backend a test tier runs on: $KILN_TEST_BACKEND ("gvisor" for the
// *_gvisor labels, tests/CMakeLists.txt), "" for the profiles' own. With
// "gvisor", RunKiln gives every `kiln run` `--backend gvisor`, KilnServer
// gives every `[profiles.NAME]` of its config `backend = "gvisor"`
// (WithTestBackend), and RequireSandbox skips when runsc cannot run here.
std::string TestBackend();
std::string WithTestBackend(const std::string& config);

// `kiln ARGS...`.
ProcessResult RunKiln(const std::vector<std::string>& args, const ProcessOptions& options = {});

// The text of tests/probes/NAME.
std::string ReadProbe(const std::string& name);
// tests/probes/prelude.py + code: the helpers (libc, attempt, report_syscall)
// every escape probe uses.
std::string WithPrelude(const std::string& code);

// One --json run and its parsed object. `raw` keeps kiln's own exit code and
// stderr for failure messages.
struct JsonRun {
  nlohmann::json j;  // {"status": "<unparsable>"} when stdout was not JSON
  ProcessResult raw;
  std::string status() const { return j.value("status", std::string("<missing>")); }
  std::string out() const { return j.value("stdout", std::string()); }
  std::string err() const { return j.value("stderr", std::string()); }
  // For assertion messages: the whole object and kiln's stderr.
  std::string Describe() const;
};

// `kiln run --json EXTRA_ARGS... -c CODE`.
JsonRun RunPython(const std::string& code, const std::vector<std::string>& extra_args = {},
                  const ProcessOptions& options = {});
// Same, with the prelude prepended.
JsonRun RunProbe(const std::string& code, const std::vector<std::string>& extra_args = {},
                 const ProcessOptions& options = {});

// Why the sandbox cannot run on this host, from `kiln doctor --json
// --no-smoke` (cached per process): user namespaces or Landlock (which kiln's
// default policy requires) are missing, or kiln runs as root (where cgroup
// limits are required) and there are no cgroups. nullopt when it can. Each
// such verdict is cross-checked with the tests' own probe of the host
// (host_facts.h). Fails the test (never skips) when doctor itself is broken
// or contradicts the host probe, so a broken kiln cannot turn the whole tier
// into skips.
std::optional<std::string> SandboxMissingReason();

// GTEST_SKIP()s the current test when SandboxMissingReason() says so, and, on
// the pool path (KILN_TEST_RUN_ARGS=--pool), when kiln is not root or has no
// cgroups (the warm pool needs both). Call it from a fixture's SetUp() (gtest
// then skips the body), or use KILN_REQUIRE_SANDBOX() at the top of a test
// body.
void RequireSandbox();
#define KILN_REQUIRE_SANDBOX()                                                      \
  do {                                                                              \
    ::kiln::testing::RequireSandbox();                                              \
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return; \
  } while (0)

// Why kiln has no cgroup limits here (it runs with its rlimit fallback, as
// an unprivileged user may): doctor's "cgroup" layer is not available and the
// host probe agrees. nullopt when kiln has them.
std::optional<std::string> CgroupLimitsMissingReason();
// GTEST_SKIP()s a test that checks what only cgroups give (an OOM kill and
// status memory_limit, the pids controller, cgroup directories) when
// CgroupLimitsMissingReason() says so.
void RequireCgroupLimits();
#define KILN_REQUIRE_CGROUP_LIMITS()                                                \
  do {                                                                              \
    ::kiln::testing::RequireCgroupLimits();                                         \
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return; \
  } while (0)

// Every escape/integration fixture: skips without a sandbox.
class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override { RequireSandbox(); }
};

// A string no other test (or earlier run) uses: for pgrep markers, planted
// files, secrets.
std::string UniqueMarker(const std::string& prefix);

// pids (other than our own) whose /proc/PID/cmdline contains `marker`, as
// `pgrep -f` reports them (read from /proc directly: procps may be missing).
std::vector<pid_t> PgrepF(const std::string& marker);

// Splits on '\n', dropping one trailing empty line.
std::vector<std::string> Lines(const std::string& text);

// Every occurrence of `from` in `text` replaced by `to` (probe templates).
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to);

// Writes `content` to `path` (a gtest failure if it cannot).
void WriteFile(const std::string& path, const std::string& content);
// The whole file, or nullopt when it cannot be opened.
std::optional<std::string> ReadFile(const std::string& path);

}  // namespace kiln::testing
