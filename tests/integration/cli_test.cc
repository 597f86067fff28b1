// Integration tier: `kiln run` as a user drives it. Files in, exit codes in
// plain mode, the --json status for each outcome, where the program comes
// from (-c, FILE, -), and the usage errors that must stop before any sandbox.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class Cli : public SandboxTest {};

TEST_F(Cli, FilesGoInUnderTheirOwnOrAGivenName) {
  TempDir dir;
  const std::string a = dir.path() + "/data.csv";
  const std::string b = dir.path() + "/other.txt";
  WriteFile(a, "x,y\n1,2\n");
  WriteFile(b, "second file\n");
  const JsonRun r = RunPython(R"PY(
import os
print(sorted(os.listdir(".")))
print(repr(open("data.csv").read()), repr(open("renamed.txt").read()))
print(os.getcwd())
)PY",
                              {"--file", a, "--file", b + ":renamed.txt"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(),
            "['data.csv', 'renamed.txt']\n"
            "'x,y\\n1,2\\n' 'second file\\n'\n"
            "/workspace\n")
      << r.Describe();
}

// --- Plain mode: kiln's exit code is the program's, or says what happened.

TEST_F(Cli, PlainExitCodeZero) {
  const ProcessResult p = RunKiln({"run", "-c", "print('hi')"});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, "hi\n");
}

TEST_F(Cli, PlainExitCodeIsTheProgramsOwn) {
  const ProcessResult p = RunKiln({"run", "-c", "import sys; print('bye'); sys.exit(3)"});
  EXPECT_EQ(p.exit_code, 3) << p.err;
  EXPECT_EQ(p.out, "bye\n");
}

TEST_F(Cli, PlainExitCodeOnTimeoutIs124) {
  const ProcessResult p = RunKiln({"run", "--timeout", "1", "-c", "import time; time.sleep(20)"});
  EXPECT_EQ(p.exit_code, 124) << p.err;
}

TEST_F(Cli, PlainExitCodeOnSigsegvIs139) {
  const ProcessResult p =
      RunKiln({"run", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"});
  EXPECT_EQ(p.exit_code, 128 + 11) << p.err;
}

TEST_F(Cli, PlainExitCodeOnSetupRefusalIs125) {
  // No runtime directory: kiln refuses before building a sandbox.
  ProcessOptions o;
  o.env = {{"KILN_RUNTIME_DIR", "/nonexistent/kiln-runtime"}};
  const ProcessResult p = RunKiln({"run", "-c", "print('ran')"}, o);
  EXPECT_EQ(p.exit_code, 125) << p.err;
  EXPECT_EQ(p.out, "");
  EXPECT_NE(p.err.find("/nonexistent/kiln-runtime"), std::string::npos) << p.err;
}

// --- --json: one status per outcome, with the fields that go with it.

TEST_F(Cli, JsonOk) {
  const JsonRun r = RunPython("print('out'); import sys; print('err', file=sys.stderr)");
  EXPECT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.j["exit_code"], 0);
  EXPECT_TRUE(r.j["signal"].is_null());
  EXPECT_EQ(r.out(), "out\n");
  EXPECT_EQ(r.err(), "err\n");
  EXPECT_EQ(r.j["stdout_truncated"], false);
  EXPECT_EQ(r.j["stderr_truncated"], false);
  EXPECT_EQ(r.raw.exit_code, 0) << "--json exits 0 whatever the program did";
  for (const char* key : {"duration_ms", "cpu_ms", "peak_memory_bytes", "oom_kills",
                          "limits_backend", "reason", "phases_ms"}) {
    EXPECT_TRUE(r.j.contains(key)) << key << " missing: " << r.Describe();
  }
  EXPECT_FALSE(r.j.contains("files")) << "files is only there with --collect";
}

TEST_F(Cli, JsonError) {
  const JsonRun r = RunPython("import sys; sys.exit(3)");
  EXPECT_EQ(r.status(), "error") << r.Describe();
  EXPECT_EQ(r.j["exit_code"], 3) << r.Describe();
  EXPECT_EQ(r.raw.exit_code, 0);
}

TEST_F(Cli, JsonTimeout) {
  const JsonRun r = RunPython("import time; time.sleep(20)", {"--timeout", "1"});
  EXPECT_EQ(r.status(), "timeout") << r.Describe();
  EXPECT_TRUE(r.j["exit_code"].is_null()) << r.Describe();
  EXPECT_EQ(r.j["signal"], 9) << r.Describe();
}

TEST_F(Cli, JsonCpuLimit) {
  const JsonRun r = RunPython("while True: pass", {"--cpu-time", "1", "--timeout", "10"});
  EXPECT_EQ(r.status(), "cpu_limit") << r.Describe();
  EXPECT_TRUE(r.j["exit_code"].is_null()) << r.Describe();
}

TEST_F(Cli, JsonMemoryLimit) {
  KILN_REQUIRE_CGROUP_LIMITS();  // memory_limit is an OOM kill in the sandbox's cgroup
  const JsonRun r = RunPython("b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1",
                              {"--memory", "64m"});
  EXPECT_EQ(r.status(), "memory_limit") << r.Describe();
  EXPECT_GE(r.j.value("oom_kills", 0), 1) << r.Describe();
}

TEST_F(Cli, JsonOutputLimit) {
  const JsonRun r = RunPython("while True: print('x' * 1000)", {"--output-limit", "10k"});
  EXPECT_EQ(r.status(), "output_limit") << r.Describe();
  EXPECT_EQ(r.j["stdout_truncated"], true);
  EXPECT_EQ(r.out().size(), 10u * 1024) << r.Describe();
}

TEST_F(Cli, JsonSignaled) {
  const JsonRun r = RunPython("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)");
  EXPECT_EQ(r.status(), "signaled") << r.Describe();
  EXPECT_EQ(r.j["signal"], 11) << r.Describe();
  EXPECT_EQ(r.j["signal_name"], "SIGSEGV") << r.Describe();
  EXPECT_TRUE(r.j["exit_code"].is_null()) << r.Describe();
}

TEST_F(Cli, JsonPolicyViolation) {
  const JsonRun r = RunPython("import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39)");
  EXPECT_EQ(r.status(), "policy_violation") << r.Describe();
  EXPECT_EQ(r.j["signal"], 31) << r.Describe();
}

TEST_F(Cli, JsonSetupError) {
  ProcessOptions o;
  o.env = {{"KILN_RUNTIME_DIR", "/nonexistent/kiln-runtime"}};
  const JsonRun r = RunPython("print('ran')", {}, o);
  EXPECT_EQ(r.status(), "setup_error") << r.Describe();
  ASSERT_TRUE(r.j.contains("setup_error")) << r.Describe();
  EXPECT_TRUE(r.j["setup_error"].contains("step")) << r.Describe();
  EXPECT_NE(r.j["setup_error"].value("message", "").find("/nonexistent/kiln-runtime"),
            std::string::npos)
      << r.Describe();
  EXPECT_EQ(r.raw.exit_code, 125);
}

// --- Where the program comes from.

TEST_F(Cli, TracebackNamesTheProgramsLine) {
  TempDir dir;
  const std::string script = dir.path() + "/broken.py";
  WriteFile(script, "x = 1\ny = 0\nprint(x / y)\n");
  const ProcessResult p = RunKiln({"run", script});
  EXPECT_EQ(p.exit_code, 1) << p.err;
  EXPECT_NE(p.err.find("File \"broken.py\", line 3"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("ZeroDivisionError: division by zero"), std::string::npos) << p.err;
}

TEST_F(Cli, TracebackFromDashCNamesTheLine) {
  const ProcessResult p = RunKiln({"run", "-c", "a = 1\nb = [1]\nprint(b[5])\n"});
  EXPECT_EQ(p.exit_code, 1) << p.err;
  EXPECT_NE(p.err.find("File \"<string>\", line 3"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("IndexError: list index out of range"), std::string::npos) << p.err;
}

TEST_F(Cli, DashReadsTheProgramFromStdin) {
  ProcessOptions o;
  o.stdin_data = "import sys\nprint('from stdin', 6 * 7)\n";
  const ProcessResult p = RunKiln({"run", "-"}, o);
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, "from stdin 42\n");
}

TEST_F(Cli, FileRunsAScript) {
  TempDir dir;
  const std::string script = dir.path() + "/hello.py";
  WriteFile(script, "import os\nprint('script', 6 * 7, os.getcwd())\n");
  const ProcessResult p = RunKiln({"run", script});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, "script 42 /workspace\n");
}

// --- kiln serve --check: the configuration as a node would run it, and
// nothing started (no port bound, no store opened: the URL's host does not
// exist).
TEST(ServeCheck, DescribesAValidNodeAndStartsNothing) {
  TempDir dir;
  WriteFile(dir.path() + "/kiln.toml",
            "[server]\nlisten = \"0.0.0.0:8080\"\n[fleet]\nheartbeat = 2\n"
            "[profiles.default]\ninterpreter = \"/usr/bin/python3\"\n");
  const ProcessResult p = RunKiln({"serve", "--check", "--config", dir.path() + "/kiln.toml",
                                   "--store", "postgresql://kiln:s3cret@db.invalid:5432/kiln",
                                   "--node", "kiln-7", "--advertise", "10.9.8.7:8080"});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("the configuration is valid"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("node kiln-7, advertise 10.9.8.7:8080,"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("postgresql://kiln@db.invalid:5432/kiln"), std::string::npos) << p.out;
  EXPECT_EQ((p.out + p.err).find("s3cret"), std::string::npos) << "the password was printed";
  EXPECT_LT(p.elapsed_ms, 5000);
}

TEST(ServeCheck, RefusesBadFlagsNamingThem) {
  TempDir dir;
  WriteFile(dir.path() + "/bad.toml", "[fleet]\nnode = \"Kiln.1\"\n");
  const std::string store = "postgresql://kiln@db.invalid/kiln";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--store", store, "--node", "Kiln_1"}, "--node: use 1-32 characters"},
      {{"--store", store, "--advertise", "10.0.0.1"}, "--advertise: must be HOST:PORT"},
      {{"--store", store, "--advertise", "h:0"}, "--advertise: must be HOST:PORT"},
      {{"--store", "mysql://db/kiln"}, "--store: must be a postgresql:// URL"},
      {{"--node", "kiln-1"}, "--node: only for a node of a fleet"},
      {{"--config", dir.path() + "/bad.toml"}, "fleet.node"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args{"serve", "--check"};
    args.insert(args.end(), flags.begin(), flags.end());
    const ProcessResult p = RunKiln(args);
    EXPECT_EQ(p.exit_code, 2) << message << ": " << p.err;
    EXPECT_NE(p.err.find(message), std::string::npos)
        << "stderr lacks '" << message << "': " << p.err;
    EXPECT_EQ(p.out, "");
  }
}

// --- Usage errors: exit 2, a message on stderr, nothing run.

struct UsageCase {
  const char* name;
  std::vector<std::string> args;  // "@DIR@" is replaced by a temp dir
  std::vector<std::string> stderr_has;
};

class CliUsage : public ::testing::TestWithParam<UsageCase> {};

TEST_P(CliUsage, ExitsTwoWithAMessageAndRunsNothing) {
  const UsageCase& c = GetParam();
  TempDir dir;
  WriteFile(dir.path() + "/input.txt", "data\n");
  WriteFile(dir.path() + "/prog.py", "print('RAN')\n");
  std::vector<std::string> args{"run"};
  for (const auto& a : c.args) args.push_back(ReplaceAll(a, "@DIR@", dir.path()));
  const ProcessResult p = RunKiln(args);
  EXPECT_EQ(p.exit_code, 2) << p.err;
  EXPECT_EQ(p.out, "");
  EXPECT_EQ(p.err.find("RAN"), std::string::npos) << p.err;
  for (const auto& s : c.stderr_has) {
    EXPECT_NE(p.err.find(ReplaceAll(s, "@DIR@", dir.path())), std::string::npos)
        << "stderr lacks '" << s << "': " << p.err;
  }
  EXPECT_LT(p.elapsed_ms, 5000);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, CliUsage,
    ::testing::Values(
        UsageCase{"UnknownFlag", {"--bogus", "-c", "print('RAN')"}, {"--bogus"}},
        UsageCase{"BadMemorySize",
                  {"--memory", "12parsecs", "-c", "print('RAN')"},
                  {"--memory", "12parsecs"}},
        UsageCase{"NegativeTimeout", {"--timeout", "-1", "-c", "print('RAN')"}, {"--timeout"}},
        UsageCase{"MissingFile", {"@DIR@/missing.py"}, {"@DIR@/missing.py", "No such file"}},
        UsageCase{"MissingFileHostPath",
                  {"--file", "@DIR@/absent.csv", "-c", "print('RAN')"},
                  {"--file", "@DIR@/absent.csv"}},
        // HOST:NAME with a '/' in NAME: the text after ':' is no valid name.
        UsageCase{"FileNameWithSlash",
                  {"--file", "@DIR@/input.txt:sub/name.txt", "-c", "print('RAN')"},
                  {"sub/name.txt"}},
        UsageCase{
            "FileNameDotDot", {"--file", "@DIR@/input.txt:..", "-c", "print('RAN')"}, {"'..'"}},
        UsageCase{"BothCodeAndFile", {"-c", "print('RAN')", "@DIR@/prog.py"}, {"exactly one"}},
        UsageCase{"NoProgram", {}, {"exactly one"}}),
    [](const ::testing::TestParamInfo<UsageCase>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace kiln::testing
