#include "supervisor/execution_result.h"

#include <gtest/gtest.h>

#include <csignal>

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

}  // namespace
}  // namespace kiln::supervisor
