// Integration: the gVisor backend (docs/adr/0021) from the outside: a profile's
// `backend = "gvisor"` runs the program under runsc's Sentry with the same
// result shape, limits and statuses; a host without a usable runsc refuses
// the run with the reason and never runs it on the native jail; sessions,
// files and streaming through a real `kiln serve`. The shared suites run on
// gVisor too (label integration_gvisor, tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "testlib/host_facts.h"
#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"
#include "testlib/procs.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kConfig = R"TOML(
[server]
concurrency = 4
session_idle_ttl = "60s"
interrupt_grace = "2s"

[tenants.default]
rate = 10000
burst = 10000

[profiles.default]
interpreter = "/usr/bin/python3"

[profiles.gv]
interpreter = "/usr/bin/python3"
backend = "gvisor"
pool = false

[profiles.gv.defaults]
memory = "256m"

[profiles.gvp]
interpreter = "/usr/bin/python3"
backend = "gvisor"

[profiles.gvp.defaults]
memory = "256m"
)TOML";

std::string HostRelease() {
  utsname u{};
  ::uname(&u);
  return u.release;
}

// Skips unless runsc runs here (the tests' own probe, not kiln's).
#define REQUIRE_GVISOR()                                                                          \
  do {                                                                                            \
    KILN_REQUIRE_SANDBOX();                                                                       \
    if (!HostGvisor().present) GTEST_SKIP() << "gVisor cannot run here: " << HostGvisor().detail; \
  } while (0)

// What a program sees of its kernel: the Sentry's, not the host's.
constexpr const char* kKernelProbe = R"PY(
import os
print(os.uname().release)
print(open("/proc/version").read().split()[2])
)PY";

class GvisorCli : public SandboxTest {
 protected:
  std::string WriteConfig() {
    const std::string path = dir_.path() + "/kiln.toml";
    WriteFile(path, kConfig);
    return path;
  }
  TempDir dir_;
};

TEST_F(GvisorCli, TheProfilesBackendRunsTheProgramOnTheSentry) {
  REQUIRE_GVISOR();
  const std::string config = WriteConfig();
  JsonRun g = RunPython(kKernelProbe, {"--config", config, "--profile", "gv"});
  ASSERT_EQ(g.status(), "ok") << g.Describe();
  EXPECT_NE(g.j.value("limits_backend", "").find("gvisor"), std::string::npos) << g.Describe();
  const std::vector<std::string> lines = Lines(g.out());
  ASSERT_EQ(lines.size(), 2u) << g.Describe();
  // gVisor reports its own kernel version (4.4.0), whatever the host runs.
  EXPECT_NE(lines[0], HostRelease()) << g.Describe();
  EXPECT_EQ(lines[0], lines[1]);
  // The native profile of the same file: the host's kernel answers.
  JsonRun n = RunPython(kKernelProbe, {"--config", config, "--profile", "default"});
  ASSERT_EQ(n.status(), "ok") << n.Describe();
  if (TestBackend().empty()) {
    EXPECT_EQ(Lines(n.out()).at(0), HostRelease()) << n.Describe();
    EXPECT_EQ(n.j.value("limits_backend", "").find("gvisor"), std::string::npos);
  }
}

TEST_F(GvisorCli, WithoutAUsableRunscTheRunIsRefusedNeverRunNatively) {
  // Needs no runsc at all: KILN_RUNSC names one that is not there.
  const std::string config = WriteConfig();
  const std::string marker = UniqueMarker("ran");
  ProcessOptions o;
  o.env = {{"KILN_RUNSC", dir_.path() + "/no-runsc"}};
  const ProcessResult plain =
      RunKiln({"run", "--config", config, "--profile", "gv", "-c", "print('" + marker + "')"}, o);
  EXPECT_EQ(plain.exit_code, 125) << plain.err;
  EXPECT_EQ(plain.out.find(marker), std::string::npos) << plain.out;
  EXPECT_NE(plain.err.find("gVisor backend"), std::string::npos) << plain.err;
  EXPECT_NE(plain.err.find("KILN_RUNSC=" + dir_.path() + "/no-runsc"), std::string::npos)
      << plain.err;
  JsonRun j = RunPython("print('" + marker + "')", {"--config", config, "--profile", "gv"}, o);
  EXPECT_EQ(j.status(), "setup_error") << j.Describe();
  EXPECT_EQ(j.raw.out.find(marker), std::string::npos) << j.Describe();
  EXPECT_NE(j.j["setup_error"].value("message", "").find("cannot run it"), std::string::npos)
      << j.Describe();
  // Not runsc at all (a program that prints something else): refused too.
  WriteFile(dir_.path() + "/fake-runsc", "#!/bin/sh\necho 'not gVisor'\n");
  ::chmod((dir_.path() + "/fake-runsc").c_str(), 0755);
  o.env = {{"KILN_RUNSC", dir_.path() + "/fake-runsc"}};
  JsonRun fake = RunPython("print('" + marker + "')", {"--config", config, "--profile", "gv"}, o);
  EXPECT_EQ(fake.status(), "setup_error") << fake.Describe();
  EXPECT_NE(fake.j["setup_error"].value("message", "").find("is not runsc"), std::string::npos)
      << fake.Describe();
}

TEST_F(GvisorCli, TheBackendFlagAndItsErrors) {
  JsonRun bad = RunPython("1", {"--backend", "firecracker"});
  EXPECT_EQ(bad.raw.exit_code, 2) << bad.Describe();
  EXPECT_NE(bad.raw.err.find("--backend: must be native or gvisor"), std::string::npos)
      << bad.raw.err;
  const std::string config = WriteConfig();
  const ProcessResult pool =
      RunKiln({"run", "--pool", "--config", config, "--profile", "gv", "-c", "1"});
  EXPECT_EQ(pool.exit_code, 2) << pool.err;
  EXPECT_NE(pool.err.find("--pool"), std::string::npos) << pool.err;
  const std::string bad_config = dir_.path() + "/bad.toml";
  WriteFile(bad_config, "[profiles.x]\nbackend = \"kvm\"\n");
  const ProcessResult cfg = RunKiln({"run", "--config", bad_config, "--profile", "x", "-c", "1"});
  EXPECT_EQ(cfg.exit_code, 2) << cfg.err;
  EXPECT_NE(cfg.err.find("profiles.x.backend: must be \"native\" or \"gvisor\""), std::string::npos)
      << cfg.err;
}

TEST_F(GvisorCli, LimitsEndWithTheSameStatuses) {
  REQUIRE_GVISOR();
  KILN_REQUIRE_CGROUP_LIMITS();
  const std::vector<std::string> gv = {"--backend", "gvisor"};
  auto with = [&gv](std::vector<std::string> more) {
    more.insert(more.begin(), gv.begin(), gv.end());
    return more;
  };
  JsonRun mem = RunPython("b = bytearray(400 << 20)", with({"--memory", "128m"}));
  EXPECT_EQ(mem.status(), "memory_limit") << mem.Describe();
  JsonRun wall = RunPython("while True: pass", with({"--timeout", "2"}));
  EXPECT_EQ(wall.status(), "timeout") << wall.Describe();
  JsonRun cpu = RunPython("while True: pass", with({"--timeout", "20", "--cpu-time", "1"}));
  EXPECT_EQ(cpu.status(), "cpu_limit") << cpu.Describe();
  JsonRun out = RunPython("while True: print('x' * 1000)", with({"--output-limit", "64k"}));
  EXPECT_EQ(out.status(), "output_limit") << out.Describe();
  EXPECT_TRUE(out.j.value("stdout_truncated", false)) << out.Describe();
  // The workspace is a size-capped tmpfs (each file under RLIMIT_FSIZE).
  JsonRun disk = RunPython("for i in range(4): open(f'f{i}', 'wb').write(b'x' * (3 << 20))",
                           with({"--disk", "4m"}));
  EXPECT_EQ(disk.status(), "error") << disk.Describe();
  EXPECT_NE(disk.j["error"].value("value", "").find("o space left"), std::string::npos)
      << disk.Describe();
}

// --- Through the server -----------------------------------------------------

class GvisorServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SandboxMissingReason() || !HostGvisor().present) return;
    shared_ = new Shared;
    const std::string config = shared_->dir.path() + "/kiln.toml";
    WriteFile(config, kConfig);
    if (!shared_->server.Start(shared_->dir.path() + "/data", config, "gvisor", &setup_error_))
      return;
    shared_->key = Trim(shared_->server.Stdout());
  }
  static void TearDownTestSuite() {
    if (shared_ != nullptr) {
      const KilnServer::Exit e = shared_->server.Terminate(30s);
      EXPECT_TRUE(e.in_time) << "the server did not stop within 30 s of SIGTERM";
    }
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override {
    REQUIRE_GVISOR();
    ASSERT_NE(shared_, nullptr);
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }
  static HttpResponse Call(const std::string& method, const std::string& path,
                           const std::string& body = "",
                           std::vector<std::pair<std::string, std::string>> headers = {},
                           std::chrono::milliseconds timeout = 120s) {
    headers.emplace_back("Authorization", "Bearer " + shared_->key);
    return shared_->server.Call(method, path, headers, body, timeout);
  }
  static std::string TextOf(const json& result) {
    for (const auto& o : result.value("outputs", json::array()))
      if (o.value("output_type", "") == "execute_result") return o["data"].value("text/plain", "");
    return "";
  }
  // runsc processes (runsc, runsc-gofer, runsc-sandbox) below this server.
  static std::vector<pid_t> Runsc() {
    std::vector<pid_t> pids;
    for (const auto& p : DescendantProcs(shared_->server.pid()))
      if (p.comm.rfind("runsc", 0) == 0 && p.state != 'Z') pids.push_back(p.pid);
    return pids;
  }

  struct Shared {
    TempDir dir;
    KilnServer server;
    std::string key;
  };
  static inline Shared* shared_ = nullptr;
  static inline std::string setup_error_;
};

TEST_F(GvisorServer, OneShotWithFilesInAndOut) {
  const json body = {{"code",
                      "import os\nprint(open('in/a.txt').read())\n"
                      "open('out.txt', 'w').write('back')\nos.uname().release"},
                     {"profile", "gv"},
                     {"files", {{{"path", "in/a.txt"}, {"content", "hello gvisor"}}}},
                     {"return_files", {"out.txt"}}};
  const HttpResponse r = Call("POST", "/v1/execute", body.dump());
  ASSERT_EQ(r.status, 200) << r.Describe();
  const json j = Parse(r);
  EXPECT_EQ(j.value("status", ""), "ok") << r.body;
  EXPECT_EQ(j.value("stdout", ""), "hello gvisor\n") << r.body;
  EXPECT_NE(j.value("limits_backend", "").find("gvisor"), std::string::npos) << r.body;
  EXPECT_NE(TextOf(j), "'" + HostRelease() + "'") << r.body;
  ASSERT_EQ(j["files"].size(), 1u) << r.body;
  EXPECT_EQ(j["files"][0].value("path", ""), "out.txt");
  EXPECT_EQ(j["files"][0].value("content_base64", ""), "YmFjaw==");  // "back"
  EXPECT_TRUE(WaitFor([] { return Runsc().empty(); }, 10s)) << "runsc left after the run";
}

TEST_F(GvisorServer, SessionKeepsStateFilesBothWaysStreamsAndInterrupts) {
  const HttpResponse made = Call("POST", "/v1/sessions", json{{"profile", "gv"}}.dump());
  ASSERT_EQ(made.status, 201) << made.Describe();
  const std::string id = Parse(made).value("id", "");
  const std::string base = "/v1/sessions/" + id;
  EXPECT_FALSE(Runsc().empty()) << "no runsc for the session";

  auto exec = [&](const std::string& code) {
    const HttpResponse r = Call("POST", base + "/execute", json{{"code", code}}.dump());
    EXPECT_EQ(r.status, 200) << r.Describe();
    return Parse(r);
  };
  json c1 = exec("x = 20");
  EXPECT_EQ(c1.value("status", ""), "ok") << c1.dump();
  // A file put by the host is seen by the next cell; one the cell writes is
  // downloaded.
  EXPECT_EQ(Call("PUT", base + "/files/data/in.txt", "from the host").status, 201);
  json c2 = exec("open('out.txt', 'w').write(open('data/in.txt').read().upper())\nx + 22");
  EXPECT_EQ(c2.value("status", ""), "ok") << c2.dump();
  EXPECT_EQ(TextOf(c2), "42") << c2.dump();
  EXPECT_EQ(c2.value("execution_count", 0), 2) << c2.dump();
  const HttpResponse got = Call("GET", base + "/files/out.txt");
  EXPECT_EQ(got.status, 200) << got.Describe();
  EXPECT_EQ(got.body, "FROM THE HOST");

  // Streaming: the events in order, then the result.
  const HttpResponse sse =
      Call("POST", base + "/execute",
           json{{"code",
                 "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n"
                 "    time.sleep(0.2)\nx"}}
               .dump(),
           {{"Accept", "text/event-stream"}});
  ASSERT_EQ(sse.status, 200) << sse.Describe();
  const size_t t0 = sse.body.find("tick 0"), t2 = sse.body.find("tick 2"),
               res = sse.body.find("event: result"), done = sse.body.find("event: done");
  ASSERT_NE(t0, std::string::npos) << sse.body;
  ASSERT_NE(done, std::string::npos) << sse.body;
  EXPECT_LT(t0, t2);
  EXPECT_LT(t2, res);
  EXPECT_LT(res, done);

  // An interrupt: KeyboardInterrupt in the cell, the session kept.
  std::thread interrupter([&] {
    std::this_thread::sleep_for(1500ms);
    const HttpResponse i = Call("POST", base + "/interrupt");
    EXPECT_EQ(i.status, 200) << i.Describe();
    EXPECT_EQ(Parse(i).value("interrupted", false), true) << i.body;
  });
  json c4 = exec("import time\ntime.sleep(30)");
  interrupter.join();
  EXPECT_EQ(c4.value("status", ""), "interrupted") << c4.dump();
  EXPECT_EQ(c4.value("session_state", ""), "kept") << c4.dump();
  json c5 = exec("x");
  EXPECT_EQ(TextOf(c5), "20") << c5.dump();

  EXPECT_EQ(Call("DELETE", base).status, 204);
  EXPECT_TRUE(WaitFor([] { return Runsc().empty(); }, 10s)) << "runsc left after DELETE";
}

// A gVisor profile with the pool on: runsc sandboxes started ahead, the
// preloads imported, waiting for their first job (src/zygote/gvisor_pool.h).
TEST_F(GvisorServer, PooledSandboxesServeOneShotsAndSessionsApart) {
  auto pooled = [](const json& j) {
    const json ph = j.value("phases_ms", json::object());
    return ph.value("clone", -1.0) == 0 && ph.value("maps", -1.0) == 0;
  };
  // The pool starts at the profile's first request: until it has a sandbox
  // ready, runs are cold.
  json one;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    const HttpResponse r = Call(
        "POST", "/v1/execute",
        json{{"code", "import sys\nprint(1)\n'pandas' in sys.modules"}, {"profile", "gvp"}}.dump());
    ASSERT_EQ(r.status, 200) << r.Describe();
    one = Parse(r);
    ASSERT_EQ(one.value("status", ""), "ok") << r.body;
    if (pooled(one)) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(pooled(one)) << "no pooled gVisor sandbox within 120 s: " << one.dump();
  EXPECT_EQ(one.value("stdout", ""), "1\n") << one.dump();
  EXPECT_EQ(TextOf(one), "True") << "the pool's preloads are imported: " << one.dump();
  EXPECT_NE(one.value("limits_backend", "").find("gvisor"), std::string::npos) << one.dump();

  // Files in (through the workspace fd, after the sandbox started) and out.
  json files;
  for (int i = 0; i < 60; ++i) {
    const HttpResponse r =
        Call("POST", "/v1/execute",
             json{{"code", "open('out.txt', 'w').write(open('in/a.txt').read()[::-1])"},
                  {"profile", "gvp"},
                  {"files", {{{"path", "in/a.txt"}, {"content", "abc"}}}},
                  {"return_files", {"out.txt"}}}
                 .dump());
    ASSERT_EQ(r.status, 200) << r.Describe();
    files = Parse(r);
    if (pooled(files)) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(pooled(files)) << files.dump();
  EXPECT_EQ(files.value("status", ""), "ok") << files.dump();
  ASSERT_EQ(files["files"].size(), 1u) << files.dump();
  EXPECT_EQ(files["files"][0].value("content_base64", ""), "Y2Jh");  // "cba"

  // A pooled one-shot that ends the interpreter itself: its exit status is
  // the keeper's report (runsc is not the supervisor's child).
  json died;
  for (int i = 0; i < 60; ++i) {
    const HttpResponse r = Call(
        "POST", "/v1/execute", json{{"code", "import os\nos._exit(3)"}, {"profile", "gvp"}}.dump());
    ASSERT_EQ(r.status, 200) << r.Describe();
    died = Parse(r);
    if (pooled(died)) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(pooled(died)) << died.dump();
  EXPECT_NE(died.value("status", ""), "ok") << died.dump();
  EXPECT_EQ(died.value("exit_code", -1), 3) << died.dump();

  // Two pooled sessions: each keeps its state and files, neither sees the other's.
  auto session = [&]() -> std::string {
    for (int i = 0; i < 120; ++i) {
      const HttpResponse r = Call("POST", "/v1/sessions", json{{"profile", "gvp"}}.dump());
      EXPECT_EQ(r.status, 201) << r.Describe();
      if (r.status != 201) return "";
      const json j = Parse(r);
      if (j.value("pooled", false)) return j.value("id", "");
      EXPECT_EQ(Call("DELETE", "/v1/sessions/" + j.value("id", "")).status, 204);
      std::this_thread::sleep_for(500ms);
    }
    ADD_FAILURE() << "no pooled gVisor session";
    return "";
  };
  const std::string a = session();
  const std::string b = session();
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  auto exec = [&](const std::string& id, const std::string& code) {
    const HttpResponse r =
        Call("POST", "/v1/sessions/" + id + "/execute", json{{"code", code}}.dump());
    EXPECT_EQ(r.status, 200) << r.Describe();
    return Parse(r);
  };
  EXPECT_EQ(exec(a, "x = 'a'\nopen('mine', 'w').write('a')").value("status", ""), "ok");
  EXPECT_EQ(TextOf(exec(a, "x")), "'a'");
  const json other = exec(b, "import os\n(globals().get('x'), os.path.exists('mine'))");
  EXPECT_EQ(TextOf(other), "(None, False)") << other.dump();
  // An interrupt reaches a pooled session's program (the keeper's `runsc kill`).
  std::thread interrupter([&] {
    std::this_thread::sleep_for(1500ms);
    const HttpResponse i = Call("POST", "/v1/sessions/" + a + "/interrupt");
    EXPECT_EQ(i.status, 200) << i.Describe();
  });
  const json slept = exec(a, "import time\ntime.sleep(30)");
  interrupter.join();
  EXPECT_EQ(slept.value("status", ""), "interrupted") << slept.dump();
  EXPECT_EQ(TextOf(exec(a, "x")), "'a'");
  EXPECT_EQ(Call("DELETE", "/v1/sessions/" + a).status, 204);
  EXPECT_EQ(Call("DELETE", "/v1/sessions/" + b).status, 204);
}

}  // namespace
}  // namespace kiln::testing
