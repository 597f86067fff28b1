// Integration tier: security events (docs/adr/0015) produced by real code in
// real sandboxes of a `kiln serve`, read back with `kiln events --json` and
// /metrics.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testlib/host_facts.h"
#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kConfig = R"TOML(
[server]
concurrency = 2
queue = 16

[tenants.default]
rate = 1000
burst = 1000

[profiles.default]
interpreter = "/usr/bin/python3"

[profiles.default.defaults]
timeout = 20
memory = "256m"
pids = 32

[profiles.strict]
interpreter = "/usr/bin/python3"
import_policy = "denylist"
modules = ["socket"]
)TOML";

struct Shared {
  TempDir dir;
  std::string data_dir;
  KilnServer server;
  std::string key;
};

class SecurityEvents : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SandboxMissingReason()) return;
    shared_ = new Shared;
    shared_->data_dir = shared_->dir.path() + "/data";
    const std::string config = shared_->dir.path() + "/kiln.toml";
    WriteFile(config, kConfig);
    if (!shared_->server.Start(shared_->data_dir, config, "events", &setup_error_)) return;
    shared_->key = Trim(shared_->server.Stdout());
  }
  static void TearDownTestSuite() {
    if (shared_ != nullptr) {
      const KilnServer::Exit e = shared_->server.Terminate(30s);
      EXPECT_TRUE(e.in_time);
      EXPECT_EQ(e.code, 0) << shared_->server.Stderr();
    }
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override {
    RequireSandbox();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NE(shared_, nullptr);
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  static const KilnServer& srv() { return shared_->server; }

  // POST /v1/execute; the result (the test fails on a non-200).
  static json Run(const std::string& code, const std::string& profile = "default") {
    const HttpResponse r =
        srv().Execute(shared_->key, {{"code", code}, {"profile", profile}}, 120s);
    EXPECT_EQ(r.status, 200) << r.Describe();
    return Parse(r);
  }

  // `kiln events --json [--kind K]`, parsed.
  static json Events(const std::string& kind = "") {
    std::vector<std::string> args{"events", "--data-dir", shared_->data_dir, "--json"};
    if (!kind.empty()) args.insert(args.end(), {"--kind", kind});
    const ProcessResult p = RunKiln(args);
    EXPECT_EQ(p.exit_code, 0) << p.err;
    json j = json::parse(p.out, nullptr, false);
    EXPECT_TRUE(j.is_array()) << p.out << p.err;
    return j.is_array() ? j : json::array();
  }

  // The event of `kind` for execution `id` (null if none).
  static json EventFor(const std::string& kind, const std::string& id) {
    for (const auto& e : Events(kind)) {
      if (e.value("execution_id", json()) == id) return e;
    }
    return json();
  }

  static Shared* shared_;
  static std::string setup_error_;
};

Shared* SecurityEvents::shared_ = nullptr;
std::string SecurityEvents::setup_error_;

TEST_F(SecurityEvents, AnImportPolicyViolation) {
  const json r = Run("import socket", "strict");
  ASSERT_EQ(r["status"], "policy_violation") << r.dump();
  const json e = EventFor("import_violation", r.value("id", ""));
  ASSERT_TRUE(e.is_object()) << Events().dump();
  EXPECT_EQ(e["tenant"], "default");
  EXPECT_NE(e["detail"].get<std::string>().find("socket"), std::string::npos) << e.dump();
  EXPECT_NE(srv().Metrics().find("kiln_security_events_total{kind=\"import_violation\"}"),
            std::string::npos);
}

TEST_F(SecurityEvents, AForkBombHitsThePidsLimit) {
  KILN_REQUIRE_CGROUP_LIMITS();
  const json r =
      Run("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
          "            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
          "except OSError as e:\n    print('refused after', n)\n");
  ASSERT_EQ(r["status"], "ok") << r.dump();
  EXPECT_GT(r.value("pids_limit_hits", 0), 0) << r.dump();
  EXPECT_TRUE(EventFor("pids_limit", r.value("id", "")).is_object()) << Events().dump();
}

TEST_F(SecurityEvents, AForgedRuntimeFrameIsAProtocolError) {
  const json r =
      Run("import os, json, struct, time\n"
          "m = json.dumps({'type': 'become_root', 'cell': 1}).encode()\n"
          "os.write(3, struct.pack('>I', len(m)) + m)\ntime.sleep(10)\n");
  ASSERT_EQ(r["status"], "protocol_error") << r.dump();
  const json e = EventFor("protocol_error", r.value("id", ""));
  ASSERT_TRUE(e.is_object()) << Events().dump();
  EXPECT_NE(e["detail"].get<std::string>().find("become_root"), std::string::npos) << e.dump();
}

TEST_F(SecurityEvents, AnOutputFlood) {
  const json r = Run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n");
  ASSERT_EQ(r["status"], "output_limit") << r.dump().substr(0, 500);
  EXPECT_TRUE(EventFor("output_flood", r.value("id", "")).is_object());
}

TEST_F(SecurityEvents, AnI386SystemCallIsASeccompKill) {
  const Ia32Fact& host = HostIa32();
  if (host.state == Ia32Emulation::kOff) {
    GTEST_SKIP() << "no IA32 emulation on this host: int 0x80 faults before seccomp sees it ("
                 << host.detail << ")";
  }
  const json r =
      Run("import ctypes, mmap\n"
          "code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])\n"
          "page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | "
          "mmap.PROT_EXEC)\npage.write(code)\n"
          "fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))\n"
          "fn()\n");
  ASSERT_EQ(r["signal"], 31) << r.dump();
  EXPECT_TRUE(EventFor("seccomp_kill", r.value("id", "")).is_object()) << Events().dump();
}

TEST_F(SecurityEvents, MemoryKillsInARow) {
  KILN_REQUIRE_CGROUP_LIMITS();
  const std::string bomb = "b = bytearray(1 << 30)\nb[::4096] = b'x' * (len(b) // 4096)\n";
  std::string last;
  for (int i = 0; i < 3; ++i) {
    const json r = Run(bomb);
    ASSERT_EQ(r["status"], "memory_limit") << r.dump();
    last = r.value("id", "");
  }
  EXPECT_TRUE(EventFor("memory_kills", last).is_object()) << Events().dump();
}

TEST_F(SecurityEvents, ASessionCellThatIgnoresItsInterruptNeedsSigkill) {
  const auto auth =
      std::vector<std::pair<std::string, std::string>>{{"Authorization", "Bearer " + shared_->key}};
  const HttpResponse created = srv().Call("POST", "/v1/sessions", auth, "{}");
  ASSERT_EQ(created.status, 201) << created.Describe();
  const std::string id = Parse(created).value("id", "");
  const HttpResponse cell =
      srv().Call("POST", "/v1/sessions/" + id + "/execute", auth,
                 json({{"code",
                        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n"
                        "    pass\n"},
                       {"timeout", 1}})
                     .dump(),
                 60s);
  ASSERT_EQ(cell.status, 200) << cell.Describe();
  const json r = Parse(cell);
  ASSERT_EQ(r["status"], "timeout") << r.dump();
  ASSERT_EQ(r["session_state"], "lost") << r.dump();
  const json e = EventFor("sigkill_needed", r.value("id", ""));
  ASSERT_TRUE(e.is_object()) << Events().dump();
  EXPECT_EQ(e["session_id"], id);
}

TEST_F(SecurityEvents, RepeatedAuthFailuresFromOneAddress) {
  for (int i = 0; i < 12; ++i) {
    const HttpResponse r = srv().Execute("kiln_000000000000_nope", {{"code", "1"}});
    ASSERT_EQ(r.status, 401) << r.Describe();
  }
  const json events = Events("auth_failures");
  ASSERT_EQ(events.size(), 1u) << events.dump();
  EXPECT_EQ(events[0]["client_addr"], "127.0.0.1");
  EXPECT_EQ(events[0]["tenant"], "");
}

TEST_F(SecurityEvents, AnOutputAuditHit) {
  const json r = Run("print('" + shared_->key + "')");
  ASSERT_EQ(r["stdout"], "[REDACTED:kiln_api_key]\n") << r.dump();
  const json e = EventFor("output_audit", r.value("id", ""));
  ASSERT_TRUE(e.is_object()) << Events().dump();
  EXPECT_NE(e["detail"].get<std::string>().find("kiln_api_key in stdout"), std::string::npos);
  EXPECT_EQ(e.dump().find(shared_->key.substr(18)), std::string::npos);
}

TEST_F(SecurityEvents, TheCliRefusesAnUnknownKind) {
  const ProcessResult p = RunKiln({"events", "--data-dir", shared_->data_dir, "--kind", "volcano"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.err.find("seccomp_kill"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace kiln::testing
