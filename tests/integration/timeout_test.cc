// Integration tier: a busy loop past its wall-clock timeout is a timeout on
// every path (kiln run cold and pooled, POST /v1/execute and POST /execute
// cold and pooled, session cells), and only a cpu-time limit the caller set
// ends as `cpu_limit`.
//
// The default cpu-time limit used to equal the wall clock, so a single-
// threaded `while True: pass` met whichever fired first: RLIMIT_CPU's SIGXCPU
// (exit 152 on POST /execute, 200 instead of 408) or the cgroup's cpu poll
// (`cpu_limit` at 1.96 s from `kiln run --timeout 2`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;

constexpr const char* kBusy = "print('spinning', flush=True)\nwhile True: pass\n";

// --- kiln run ---------------------------------------------------------------------

class RunTimeout : public SandboxTest {};

TEST_F(RunTimeout, BusyLoopIsATimeoutWithExit124) {
  const ProcessResult p = RunKiln({"run", "--timeout", "2", "-c", kBusy});
  EXPECT_EQ(p.exit_code, 124) << p.err;
  EXPECT_NE(p.err.find("timeout"), std::string::npos) << p.err;
  const JsonRun r = RunPython(kBusy, {"--timeout", "2"});
  EXPECT_EQ(r.status(), "timeout") << r.Describe();
  EXPECT_EQ(r.out(), "spinning\n") << r.Describe();
  EXPECT_GE(r.j.value("duration_ms", 0.0), 1900) << r.Describe();
}

TEST_F(RunTimeout, ExplicitCpuTimeIsACpuLimit) {
  const JsonRun r = RunPython(kBusy, {"--timeout", "20", "--cpu-time", "1"});
  EXPECT_EQ(r.status(), "cpu_limit") << r.Describe();
  EXPECT_LT(r.j.value("duration_ms", 1e9), 15000) << r.Describe();
}

// Threads spinning on every CPU still meet the wall clock first (the
// implicit bound counts every CPU the sandbox may use).
TEST_F(RunTimeout, ThreadsSpinningAreATimeoutToo) {
  const JsonRun r = RunPython(
      "import threading\n"
      "def spin():\n    while True: pass\n"
      "for _ in range(4): threading.Thread(target=spin, daemon=True).start()\n"
      "spin()\n",
      {"--timeout", "2", "--cpus", "2"});
  EXPECT_EQ(r.status(), "timeout") << r.Describe();
}

// The pool path of `kiln run` (a hidden flag: a zygote made for the run).
TEST_F(RunTimeout, BusyLoopInAPooledSandboxIsATimeout) {
  if (::geteuid() != 0) GTEST_SKIP() << "the pool needs root (a host uid per pooled sandbox)";
  if (auto why = CgroupLimitsMissingReason()) GTEST_SKIP() << "the pool needs cgroups: " << *why;
  if (TestBackend() == "gvisor") GTEST_SKIP() << "`kiln run --pool` makes a zygote: native only";
  const JsonRun r = RunPython(kBusy, {"--pool", "--timeout", "2"});
  EXPECT_EQ(r.status(), "timeout") << r.Describe();
  const ProcessResult p = RunKiln({"run", "--pool", "--timeout", "2", "-c", kBusy});
  EXPECT_EQ(p.exit_code, 124) << p.err;
}

// --- kiln serve: one-shot, reference, sessions ------------------------------------------

class ServeTimeout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SandboxMissingReason()) return;
    dir_ = new TempDir;
    WriteFile(dir_->path() + "/kiln.toml", R"TOML(
[server]
concurrency = 2
[tenants.default]
rate = 1000
burst = 1000
[pool]
max = 2
preload = ["numpy"]
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 30
memory = "256m"
cpus = 1
# Another profile whose operator set a cpu-time limit: that one is reported.
[profiles.metered]
interpreter = "/usr/bin/python3"
[profiles.metered.defaults]
timeout = 20
cpu_time = 1
memory = "256m"
)TOML");
    server_ = new KilnServer;
    if (!server_->Start(dir_->path() + "/data", dir_->path() + "/kiln.toml", "timeout", &error_))
      return;
    key_ = Trim(server_->Stdout());
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Terminate(20s);
    delete server_;
    delete dir_;
    server_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    RequireSandbox();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(error_.empty()) << error_;
  }

  static bool Pooled(const json& result) {
    const json phases = result.value("phases_ms", json::object());
    return phases.value("clone", -1.0) == 0.0 && phases.value("maps", -1.0) == 0.0;
  }
  // Whether this server hands out pooled sandboxes at all (root and cgroups).
  static bool PoolWorks() {
    const auto deadline = Clock::now() + 60s;
    while (Clock::now() < deadline) {
      const HttpResponse r = server_->Execute(key_, {{"code", "print(1)"}});
      if (r.status == 200 && Pooled(Parse(r))) return true;
      if (server_->Stderr().find("warm pool off") != std::string::npos) return false;
      std::this_thread::sleep_for(200ms);
    }
    return false;
  }
  static std::string Reference(const json& body) {
    return server_->Call("POST", "/execute", {{"X-API-Key", key_}}, body.dump(), 60s).Describe();
  }

  static TempDir* dir_;
  static KilnServer* server_;
  static std::string key_;
  static std::string error_;
};
TempDir* ServeTimeout::dir_ = nullptr;
KilnServer* ServeTimeout::server_ = nullptr;
std::string ServeTimeout::key_;
std::string ServeTimeout::error_;

TEST_F(ServeTimeout, V1BusyLoopIsATimeoutColdAndPooled) {
  // Cold: other limits than the profile's defaults are never pooled.
  const HttpResponse cold =
      server_->Execute(key_, {{"code", kBusy}, {"timeout", 2}, {"memory", "128m"}});
  ASSERT_EQ(cold.status, 200) << cold.Describe();
  EXPECT_FALSE(Pooled(Parse(cold))) << cold.Describe();
  EXPECT_EQ(Parse(cold).value("status", ""), "timeout") << cold.Describe();

  if (!PoolWorks())
    GTEST_SKIP() << "no pooled sandbox on this host (the pool needs root and cgroups; its zygotes "
                    "are native jails)";
  // A pooled one: retried until a request finds a ready sandbox.
  bool pooled = false;
  for (int i = 0; i < 10 && !pooled; ++i) {
    const HttpResponse r = server_->Execute(key_, {{"code", kBusy}, {"timeout", 2}});
    ASSERT_EQ(r.status, 200) << r.Describe();
    EXPECT_EQ(Parse(r).value("status", ""), "timeout") << r.Describe();
    pooled = Pooled(Parse(r));
    if (!pooled) std::this_thread::sleep_for(500ms);
  }
  EXPECT_TRUE(pooled) << "no busy loop ran in a pooled sandbox";
}

TEST_F(ServeTimeout, ReferenceBusyLoopIs408) {
  // The reference's defaults (mem_limit 1G) are not the profile's: cold.
  json body = {{"code", kBusy}, {"timeout", 2}};
  std::string r = Reference(body);
  EXPECT_EQ(r.rfind("HTTP 408", 0), 0u) << r;
  EXPECT_NE(r.find("Execution timeout after 2 s"), std::string::npos) << r;
  // The profile's limits (256m, 1 CPU): pooled where the pool works.
  body["mem_limit"] = "256m";
  body["cpu_limit"] = 1.0;
  for (int i = 0; i < 3; ++i) {
    r = Reference(body);
    EXPECT_EQ(r.rfind("HTTP 408", 0), 0u) << r;
  }
}

TEST_F(ServeTimeout, SessionCellBusyLoopIsATimeoutAndTheStateIsKept) {
  const HttpResponse created =
      server_->Call("POST", "/v1/sessions", {{"Authorization", "Bearer " + key_}}, "{}");
  ASSERT_EQ(created.status, 201) << created.Describe();
  const std::string id = Parse(created).value("id", "");
  EXPECT_TRUE(Parse(created)["limits"]["cpu_time_s"].is_null()) << created.Describe();
  auto exec = [&](const json& body) {
    return server_->Call("POST", "/v1/sessions/" + id + "/execute",
                         {{"Authorization", "Bearer " + key_}}, body.dump(), 60s);
  };
  ASSERT_EQ(exec({{"code", "x = 41"}}).status, 200);
  const HttpResponse busy = exec({{"code", kBusy}, {"timeout", 2}});
  ASSERT_EQ(busy.status, 200) << busy.Describe();
  EXPECT_EQ(Parse(busy).value("status", ""), "timeout") << busy.Describe();
  EXPECT_EQ(Parse(busy).value("session_state", ""), "kept") << busy.Describe();
  // A second busy cell: the session's cpu so far does not count against it.
  const HttpResponse again = exec({{"code", kBusy}, {"timeout", 2}});
  EXPECT_EQ(Parse(again).value("status", ""), "timeout") << again.Describe();
  const HttpResponse after = exec({{"code", "x + 1"}});
  ASSERT_EQ(after.status, 200) << after.Describe();
  std::string text;
  for (const auto& o : Parse(after).value("outputs", json::array())) {
    if (o.value("output_type", "") == "execute_result") text = o["data"].value("text/plain", "");
  }
  EXPECT_EQ(text, "42") << after.Describe();
  server_->Call("DELETE", "/v1/sessions/" + id, {{"Authorization", "Bearer " + key_}});
}

TEST_F(ServeTimeout, ProfileCpuTimeIsACpuLimit) {
  const HttpResponse r = server_->Execute(key_, {{"code", kBusy}, {"profile", "metered"}});
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(Parse(r).value("status", ""), "cpu_limit") << r.Describe();
}

}  // namespace
}  // namespace kiln::testing
