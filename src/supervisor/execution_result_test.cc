#include "supervisor/execution_result.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::supervisor {
namespace {

TEST(ExecutionResult, PlainExitCodes) {
  ExecutionResult r;
  r.outcome = Outcome::kOk;
  r.exit_code = 0;
  EXPECT_EQ(PlainExitCode(r), 0);
  r.outcome = Outcome::kError;
  r.exit_code = 3;
  EXPECT_EQ(PlainExitCode(r), 3);
  r = {};
  r.outcome = Outcome::kTimeout;
  r.signal = SIGKILL;
  EXPECT_EQ(PlainExitCode(r), 124);
  r.outcome = Outcome::kSignaled;
  r.signal = SIGSEGV;
  EXPECT_EQ(PlainExitCode(r), 128 + SIGSEGV);
  r.outcome = Outcome::kPolicyViolation;
  r.signal = SIGSYS;
  EXPECT_EQ(PlainExitCode(r), 128 + SIGSYS);
  r.outcome = Outcome::kMemoryLimit;
  r.signal = SIGKILL;
  EXPECT_EQ(PlainExitCode(r), 137);
  r = {};
  r.outcome = Outcome::kSetupError;
  EXPECT_EQ(PlainExitCode(r), 125);
}

TEST(ExecutionResult, StatusNames) {
  EXPECT_EQ(ToString(Outcome::kOk), "ok");
  EXPECT_EQ(ToString(Outcome::kError), "error");
  EXPECT_EQ(ToString(Outcome::kTimeout), "timeout");
  EXPECT_EQ(ToString(Outcome::kCpuLimit), "cpu_limit");
  EXPECT_EQ(ToString(Outcome::kMemoryLimit), "memory_limit");
  EXPECT_EQ(ToString(Outcome::kOutputLimit), "output_limit");
  EXPECT_EQ(ToString(Outcome::kSignaled), "signaled");
  EXPECT_EQ(ToString(Outcome::kPolicyViolation), "policy_violation");
  EXPECT_EQ(ToString(Outcome::kSetupError), "setup_error");
}

TEST(ExecutionResult, JsonFields) {
  ExecutionResult r;
  r.outcome = Outcome::kSignaled;
  r.signal = SIGSEGV;
  r.stdout_data = "out";
  r.stderr_data = "err";
  r.stdout_truncated = true;
  r.duration_ms = 12.5;
  r.cpu_ms = 3;
  r.peak_memory_bytes = 4096;
  r.files = {{"a.txt", 3}};
  nlohmann::json j = ToJson(r, true);
  EXPECT_EQ(j["status"], "signaled");
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_EQ(j["signal"], SIGSEGV);
  EXPECT_EQ(j["signal_name"], "SIGSEGV");
  EXPECT_EQ(j["stdout"], "out");
  EXPECT_EQ(j["stderr"], "err");
  EXPECT_EQ(j["stdout_truncated"], true);
  EXPECT_EQ(j["stderr_truncated"], false);
  EXPECT_DOUBLE_EQ(j["duration_ms"].get<double>(), 12.5);
  EXPECT_EQ(j["peak_memory_bytes"], 4096);
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files"][0]["path"], "a.txt");
  EXPECT_FALSE(j.contains("setup_error"));
  EXPECT_FALSE(ToJson(r, false).contains("files"));
}

TEST(ExecutionResult, JsonSetupError) {
  ExecutionResult r;
  r.outcome = Outcome::kSetupError;
  r.setup_error = SetupErrorInfo{SetupStep::kMountProc, EPERM, "mount proc failed"};
  nlohmann::json j = ToJson(r, false);
  EXPECT_EQ(j["setup_error"]["step"], "mount_proc");
  EXPECT_EQ(j["setup_error"]["errno"], EPERM);
  EXPECT_EQ(j["setup_error"]["errno_name"], "EPERM");
}

TEST(ExecutionResult, InvalidUtf8IsReplacedNotThrown) {
  ExecutionResult r;
  r.outcome = Outcome::kOk;
  r.exit_code = 0;
  r.stdout_data = std::string("\xff\xfe ok", 5);
  const std::string s =
      ToJson(r, false).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos) << s;
}

// Every field set, through ToJson and the wire's text, and back.
ExecutionResult EveryField() {
  ExecutionResult r;
  r.outcome = Outcome::kPolicyViolation;
  r.exit_code = 1;
  r.signal = SIGSYS;
  r.stdout_data = "out\n";
  r.stderr_data = "err\n";
  r.stdout_truncated = true;
  r.stderr_truncated = true;
  r.duration_ms = 12.5;
  r.cpu_ms = 3.25;
  r.peak_memory_bytes = 1ULL << 33;
  r.oom_kills = 2;
  r.pids_limit_hits = 7;
  r.limits_backend = "cgroup v1";
  r.files = {{"a.txt", 3}, {"d/b.bin", 1ULL << 32}};
  r.collect_skipped = {"link: a symlink"};
  r.collect_error = "copy-out failed";
  r.setup_error = SetupErrorInfo{SetupStep::kMountProc, EPERM, "mount proc failed"};
  r.reason = "killed by seccomp";
  r.outputs = nlohmann::json::array(
      {{{"output_type", "stream"}, {"name", "stdout"}, {"text", "out\n"}},
       {{"output_type", "display_data"}, {"data", {{"image/png", "iVBO"}}}, {"metadata", {}}}});
  r.error = CellError{"ValueError", "bad", {"Traceback", "line 1"}};
  r.execution_count = 4;
  r.outputs_dropped = 1;
  r.outputs_truncated = true;
  r.policy_violation = PolicyViolationInfo{"socket", 3, "import of 'socket' refused"};
  r.session_state = "kept";
  r.phases = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  return r;
}

TEST(ExecutionResult, FromJsonReadsBackEveryField) {
  const ExecutionResult r = EveryField();
  const auto back = FromJson(nlohmann::json::parse(ToJson(r, true).dump()));
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  // Field for field: ToJson of both is equal only if every field came back.
  EXPECT_EQ(ToJson(*back, true), ToJson(r, true));
  EXPECT_EQ(back->outcome, r.outcome);
  EXPECT_EQ(back->exit_code, 1);
  EXPECT_EQ(back->signal, SIGSYS);
  EXPECT_EQ(back->peak_memory_bytes, 1ULL << 33);
  ASSERT_EQ(back->files.size(), 2u);
  EXPECT_EQ(back->files[1].size, 1ULL << 32);
  ASSERT_TRUE(back->setup_error.has_value());
  EXPECT_EQ(back->setup_error->step, SetupStep::kMountProc);
  EXPECT_EQ(back->setup_error->sys_errno, EPERM);
  ASSERT_TRUE(back->error.has_value());
  EXPECT_EQ(back->error->traceback, (std::vector<std::string>{"Traceback", "line 1"}));
  ASSERT_TRUE(back->policy_violation.has_value());
  EXPECT_EQ(back->policy_violation->line, 3);
  EXPECT_EQ(back->session_state, "kept");
  EXPECT_EQ(back->execution_count, 4);
  EXPECT_DOUBLE_EQ(back->phases.teardown_ms, 10);

  // The defaults: no optional member set, none invented.
  ExecutionResult plain;
  plain.outcome = Outcome::kOk;
  plain.exit_code = 0;
  const auto p = FromJson(ToJson(plain, false));
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->signal, 0);
  EXPECT_FALSE(p->setup_error || p->error || p->policy_violation || p->session_state ||
               p->execution_count);
  EXPECT_EQ(ToJson(*p, false), ToJson(plain, false));
  // Every outcome's name reads back as itself.
  for (int i = 0; i <= static_cast<int>(Outcome::kInterrupted); ++i) {
    const auto o = static_cast<Outcome>(i);
    EXPECT_EQ(OutcomeFromString(ToString(o)), o) << ToString(o);
  }
}

TEST(ExecutionResult, FromJsonRefusesMalformedResultsNamingTheMember) {
  const nlohmann::json good = ToJson(EveryField(), true);
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j = nlohmann::json::array(); }, "not an object"},
      {[](nlohmann::json& j) { j.erase("status"); }, "status: missing"},
      {[](nlohmann::json& j) { j["status"] = "fine"; }, "status: unknown"},
      {[](nlohmann::json& j) { j["status"] = 1; }, "status: wrong type"},
      {[](nlohmann::json& j) { j.erase("stdout"); }, "stdout: missing"},
      {[](nlohmann::json& j) { j["stderr"] = nullptr; }, "stderr: wrong type"},
      {[](nlohmann::json& j) { j.erase("exit_code"); }, "exit_code: missing"},
      {[](nlohmann::json& j) { j["exit_code"] = "1"; }, "exit_code: wrong type"},
      {[](nlohmann::json& j) { j["signal"] = 1.5; }, "signal: wrong type"},
      {[](nlohmann::json& j) { j.erase("reason"); }, "reason: missing"},
      {[](nlohmann::json& j) { j["peak_memory_bytes"] = -1; }, "peak_memory_bytes: wrong type"},
      {[](nlohmann::json& j) { j["outputs"] = "x"; }, "outputs: not an array"},
      {[](nlohmann::json& j) {
         j["files"] = {{{"path", 1}}};
       },
       "files: an entry"},
      {[](nlohmann::json& j) { j["files_skipped"] = {1}; }, "files_skipped: not strings"},
      {[](nlohmann::json& j) { j["setup_error"]["step"] = "nowhere"; }, "setup_error.step"},
      {[](nlohmann::json& j) { j["setup_error"].erase("errno"); }, "setup_error.errno: missing"},
      {[](nlohmann::json& j) { j["error"]["traceback"] = {2}; }, "error.traceback: not strings"},
      {[](nlohmann::json& j) { j["error"] = "x"; }, "error: wrong type"},
      {[](nlohmann::json& j) { j["policy_violation"]["line"] = "3"; }, "policy_violation.line"},
      {[](nlohmann::json& j) { j["session_state"] = "maybe"; }, "session_state: unknown"},
      {[](nlohmann::json& j) { j["execution_count"] = "4"; }, "execution_count: wrong type"},
      {[](nlohmann::json& j) { j["phases_ms"]["run"] = "fast"; }, "phases_ms.run: wrong type"},
  };
  for (const auto& [mutate, expected] : cases) {
    nlohmann::json j = good;
    mutate(j);
    const auto r = FromJson(j);
    ASSERT_FALSE(r.ok()) << expected;
    EXPECT_EQ(r.error().code, Code::kInvalidArgument);
    EXPECT_NE(r.error().message.find(expected), std::string::npos)
        << r.error().message << " / " << expected;
  }
}

}  // namespace
}  // namespace kiln::supervisor
