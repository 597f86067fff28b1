// Integration tier: `kiln serve` as a client sees it, over loopback HTTP.
//
// One server (suite fixture `Server`) is shared by every test whose state
// allows it: it runs with small limits (concurrency 1, queue 1, max_body 64k,
// rate-limited tenants) so the limit tests need no server of their own. The
// crash and drain tests (`ServerLifecycle`) start dedicated servers on their
// own data directories. Every server is a Subprocess of this test; each is
// stopped (SIGTERM, bounded wait, SIGKILL of its group as a last resort) before
// its test or suite ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testlib/host_facts.h"
#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// --- Small helpers ----------------------------------------------------------

std::string Base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

std::optional<std::string> Unbase64(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=')
      break;
    else
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// The value of an unlabelled Prometheus sample, e.g. "kiln_queue_depth 1".
std::optional<double> Sample(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::strtod(line.c_str() + name.size() + 1, nullptr);
  }
  return std::nullopt;
}

// Every sample line of `name` (with labels).
std::vector<std::string> SampleLines(const std::string& metrics, const std::string& name) {
  std::vector<std::string> out;
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) out.push_back(line);
  }
  return out;
}

// pids whose parent is `parent` (from /proc/*/stat).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto stat = ReadFile("/proc/" + name + "/stat");
    if (!stat) continue;
    const size_t rp = stat->rfind(')');
    if (rp == std::string::npos) continue;
    std::istringstream rest(stat->substr(rp + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::atoi(name.c_str())));
  }
  return out;
}

// Directories where kiln's v1 sandbox cgroups live: <mount>/<our path>/kiln and
// <mount>/kiln for every controller we are in.
std::vector<std::string> KilnCgroupDirs() {
  std::set<std::string> dirs;
  auto self = ReadFile("/proc/self/cgroup");
  if (!self) return {};
  for (const auto& line : Lines(*self)) {
    // "4:memory:/some/path"
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (controllers.empty()) continue;  // v2
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c.rfind("name=", 0) == 0) continue;
      for (const std::string& d :
           {"/sys/fs/cgroup/" + c + path + "/kiln", "/sys/fs/cgroup/" + c + "/kiln"}) {
        std::error_code ec;
        if (fs::is_directory(d, ec)) dirs.insert(fs::path(d).lexically_normal().string());
      }
    }
  }
  return {dirs.begin(), dirs.end()};
}

// Every sbx-<pid>-* directory under the kiln cgroup dirs for one of `pids`.
std::vector<std::string> SandboxCgroupsOf(const std::vector<pid_t>& pids) {
  std::vector<std::string> out;
  for (const auto& dir : KilnCgroupDirs()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename();
      for (pid_t p : pids) {
        if (name.rfind("sbx-" + std::to_string(p) + "-", 0) == 0) out.push_back(e.path().string());
      }
    }
  }
  return out;
}

// The shared server's configuration: small limits the limit tests rely on.
constexpr const char* kSharedConfig = R"TOML(
[server]
concurrency = 1
queue = 1
queue_timeout = "10s"
max_body = "64k"
client_timeout = "30s"
shutdown_grace = "10s"

[tenants.default]
rate = 1000
burst = 1000

# The rate-limit test: one request, then 429.
[tenants.slow]
rate = 0.5
burst = 1

# The metrics test's own rejection.
[tenants.slowm]
rate = 0.5
burst = 1

# The audit test: three executions, then a rejection.
[tenants.audit]
rate = 0.001
burst = 3

[profiles.default]
interpreter = "/usr/bin/python3"
import_policy = "open"

[profiles.default.defaults]
timeout = 30
memory = "256m"
cpus = 1
pids = 128

[profiles.default.max]
timeout = 300
memory = "1g"
cpus = 8
pids = 512

# A small maximum timeout.
[profiles.tiny]
interpreter = "/usr/bin/python3"

[profiles.tiny.defaults]
timeout = 1
memory = "128m"

[profiles.tiny.max]
timeout = 2
memory = "256m"

# Listed with its backend (GET /v1/profiles); never run by these tests.
[profiles.sealed]
interpreter = "/usr/bin/python3"
backend = "gvisor"
)TOML";

// --- The shared server --------------------------------------------------------

struct Shared {
  TempDir dir;
  std::string data_dir;
  KilnServer server;
  std::string key;                          // tenant "default": the key the first start printed
  std::map<std::string, std::string> keys;  // more tenants
};

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SandboxMissingReason()) return;  // SetUp() skips every test
    shared_ = new Shared;
    shared_->data_dir = shared_->dir.path() + "/data";
    const std::string config = shared_->dir.path() + "/kiln.toml";
    WriteFile(config, kSharedConfig);
    if (!shared_->server.Start(shared_->data_dir, config, "shared", &setup_error_)) return;
    shared_->key = Trim(shared_->server.Stdout());
    for (const char* tenant : {"slow", "slowm", "audit"}) {
      shared_->keys[tenant] = CreateKey(shared_->data_dir, tenant);
    }
  }
  static void TearDownTestSuite() {
    if (shared_ != nullptr) {
      const KilnServer::Exit e = shared_->server.Terminate(20s);
      EXPECT_TRUE(e.in_time) << "the shared server did not stop within 20 s of SIGTERM";
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
    ASSERT_TRUE(shared_->server.running());
  }

  static const KilnServer& srv() { return shared_->server; }
  static const std::string& key() { return shared_->key; }
  static const std::string& data_dir() { return shared_->data_dir; }

  static Shared* shared_;
  static std::string setup_error_;
};

Shared* Server::shared_ = nullptr;
std::string Server::setup_error_;

// --- Startup, health, discovery -------------------------------------------------

TEST_F(Server, FirstStartPrintsTheNewKeyAloneOnStdout) {
  EXPECT_TRUE(IsKey(key())) << "stdout: '" << srv().Stdout() << "'";
  EXPECT_EQ(Lines(srv().Stdout()).size(), 1u) << srv().Stdout();
}

TEST_F(Server, HealthzIsOk) {
  const HttpResponse r = srv().Get("/healthz");
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(Parse(r), json({{"status", "ok"}})) << r.Describe();
}

TEST_F(Server, ReadyzSaysReady) {
  const HttpResponse r = srv().Get("/readyz");
  ASSERT_EQ(r.status, 200) << r.Describe();
  json j = Parse(r);
  EXPECT_EQ(j.value("ready", false), true) << r.Describe();
}

TEST_F(Server, OpenApiIsJsonWithBothExecutePaths) {
  const HttpResponse r = srv().Get("/openapi.json");
  ASSERT_EQ(r.status, 200) << r.Describe();
  json j = Parse(r);
  ASSERT_TRUE(j.is_object()) << "not JSON: " << r.Describe();
  ASSERT_TRUE(j.contains("paths")) << r.Describe();
  EXPECT_TRUE(j["paths"].contains("/v1/execute"));
  EXPECT_TRUE(j["paths"].contains("/execute"));
  EXPECT_TRUE(j["paths"]["/v1/execute"].contains("post"));
}

TEST_F(Server, MetricsCountExecutionsAndRejections) {
  const HttpResponse ok = srv().Execute(key(), {{"code", "print(1)"}});
  ASSERT_EQ(ok.status, 200) << ok.Describe();
  const std::string& slow = shared_->keys["slowm"];
  const HttpResponse first = srv().Execute(slow, {{"code", "print(1)"}});
  ASSERT_EQ(first.status, 200) << first.Describe();
  const HttpResponse rejected = srv().Execute(slow, {{"code", "print(1)"}});
  ASSERT_EQ(rejected.status, 429) << rejected.Describe();

  const HttpResponse m = srv().Get("/metrics");
  ASSERT_EQ(m.status, 200) << m.Describe();
  bool ok_line = false, rate_line = false;
  for (const auto& line : SampleLines(m.body, "kiln_executions_total")) {
    ok_line = ok_line || line.find("status=\"ok\"") != std::string::npos;
  }
  for (const auto& line : SampleLines(m.body, "kiln_rejections_total")) {
    rate_line = rate_line || line.find("reason=\"rate\"") != std::string::npos;
  }
  EXPECT_TRUE(ok_line) << "no kiln_executions_total{status=\"ok\"} sample:\n" << m.body;
  EXPECT_TRUE(rate_line) << "no kiln_rejections_total{reason=\"rate\"} sample:\n" << m.body;
}

// The warm pool in plain sight: GET /readyz's "pool", the kiln_pool_* series
// of /metrics and `kiln doctor --server` show the same per-profile counts.
TEST_F(Server, ThePoolIsInPlainSight) {
  const bool pool_possible = HostIsRoot() && !CgroupLimitsMissingReason();
  // An eligible execution (the default profile's limits) takes a pooled
  // sandbox when one is ready: within 60 s of this suite's start, one is.
  bool hit = false;
  json pool;
  const auto deadline = Clock::now() + 60s;
  do {
    ASSERT_EQ(srv().Execute(key(), {{"code", "print(1)"}}).status, 200);
    const HttpResponse r = srv().Get("/readyz");
    ASSERT_EQ(r.status, 200) << r.Describe();
    pool = Parse(r)["pool"];
    ASSERT_TRUE(pool.is_object()) << r.Describe();
    // A hit and the refill it asked for, reported (the pool's status follows
    // its handoffs; the refill takes a moment).
    hit = pool["profiles"]["default"].value("hits", 0) > 0 &&
          pool["profiles"]["default"].value("refills", 0) > 0;
  } while (pool_possible && !hit && Clock::now() < deadline);
  if (!pool_possible) {
    EXPECT_FALSE(pool.value("enabled", true)) << pool.dump();
    EXPECT_TRUE(pool["reason"].is_string()) << pool.dump();
    return;
  }
  ASSERT_TRUE(hit) << "no execution took a pooled sandbox within 60 s: " << pool.dump();
  EXPECT_TRUE(pool.value("enabled", false)) << pool.dump();
  EXPECT_TRUE(pool.value("running", false)) << pool.dump();
  const json& p = pool["profiles"]["default"];
  for (const char* k :
       {"ready", "refilling", "in_use", "target", "hits", "cold_fallbacks", "refills",
        "refill_ms_total", "last_refill_ms", "failures", "zygote_starts"}) {
    EXPECT_TRUE(p.contains(k) && p[k].is_number()) << k << ": " << p.dump();
  }
  EXPECT_GE(p.value("refills", 0), 1) << p.dump();
  EXPECT_GT(p.value("refill_ms_total", 0.0), 0.0) << p.dump();
  EXPECT_GE(p.value("zygote_starts", 0), 1) << p.dump();

  const HttpResponse m = srv().Get("/metrics");
  ASSERT_EQ(m.status, 200) << m.Describe();
  bool hits = false, ready = false, refills = false;
  for (const auto& line : SampleLines(m.body, "kiln_pool_takes_total")) {
    hits = hits || (line.find("profile=\"default\",result=\"hit\"") != std::string::npos &&
                    std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr) >= 1);
  }
  for (const auto& line : SampleLines(m.body, "kiln_pool_sandboxes")) {
    ready = ready || line.find("profile=\"default\",state=\"ready\"") != std::string::npos;
  }
  refills = !SampleLines(m.body, "kiln_pool_refills_total").empty() &&
            !SampleLines(m.body, "kiln_pool_refill_seconds_total").empty();
  EXPECT_TRUE(hits) << m.body;
  EXPECT_TRUE(ready) << m.body;
  EXPECT_TRUE(refills) << m.body;

  // kiln doctor --server reads the same status.
  const std::string url = "http://127.0.0.1:" + std::to_string(srv().port());
  ProcessOptions o;
  o.timeout = 60s;
  const ProcessResult d = RunKiln({"doctor", "--json", "--no-smoke", "--server", url}, o);
  const json dj = json::parse(d.out, nullptr, false);
  ASSERT_TRUE(dj.is_object()) << d.out << d.err;
  EXPECT_TRUE(dj["server"]["pool"]["profiles"]["default"].is_object()) << d.out;
  const ProcessResult plain = RunKiln({"doctor", "--no-smoke", "--server", url}, o);
  EXPECT_NE(plain.out.find("default: "), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find(" ready, "), std::string::npos) << plain.out;
  // A server that is not there: an error naming it, exit 2.
  const ProcessResult gone = RunKiln({"doctor", "--no-smoke", "--server", "http://127.0.0.1:1"}, o);
  EXPECT_EQ(gone.exit_code, 2) << gone.out << gone.err;
  EXPECT_NE(gone.out.find("127.0.0.1:1"), std::string::npos) << gone.out;
  const ProcessResult bad = RunKiln({"doctor", "--no-smoke", "--server", "ftp://x"}, o);
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("--server"), std::string::npos) << bad.out;
}

// --- POST /v1/execute: the happy path -------------------------------------------

void ExpectHelloResult(const HttpResponse& r) {
  ASSERT_EQ(r.status, 200) << r.Describe();
  json j = Parse(r);
  ASSERT_TRUE(j.is_object()) << r.Describe();
  EXPECT_EQ(j.value("status", ""), "ok") << r.Describe();
  EXPECT_EQ(j["exit_code"], 0) << r.Describe();
  EXPECT_EQ(j.value("stdout", ""), "hello\n") << r.Describe();
  EXPECT_EQ(j.value("stderr", "?"), "") << r.Describe();
  ASSERT_TRUE(j.contains("id") && j["id"].is_string()) << r.Describe();
  EXPECT_TRUE(std::regex_match(j["id"].get<std::string>(), std::regex("[0-9a-f]{32}")))
      << r.Describe();
  ASSERT_TRUE(j.contains("outputs") && j["outputs"].is_array()) << r.Describe();
  EXPECT_EQ(j["outputs"],
            json::array({{{"output_type", "stream"}, {"name", "stdout"}, {"text", "hello\n"}}}))
      << r.Describe();
  EXPECT_EQ(r.Header("Content-Type").value_or(""), "application/json");
}

TEST_F(Server, V1ExecuteWithBearerKey) {
  ExpectHelloResult(srv().Execute(key(), {{"code", "print('hello')"}}));
}

TEST_F(Server, V1ExecuteWithXApiKey) {
  ExpectHelloResult(srv().Call("POST", "/v1/execute", {{"X-API-Key", key()}},
                               json({{"code", "print('hello')"}}).dump()));
}

TEST_F(Server, V1FilesInAreReadable) {
  const std::string binary("\x00\x01\xfe\xff binary\n", 12);
  const json body = {
      {"code",
       "import os\n"
       "print(repr(open('data.txt').read()))\n"
       "print(list(open('sub/dir/blob.bin', 'rb').read()))\n"
       "print(sorted(os.listdir('sub/dir')))\n"},
      {"files", json::array({{{"path", "data.txt"}, {"content", "plain text\nline 2\n"}},
                             {{"path", "sub/dir/blob.bin"}, {"content_base64", Base64(binary)}}})}};
  const HttpResponse r = srv().Execute(key(), body);
  ASSERT_EQ(r.status, 200) << r.Describe();
  json j = Parse(r);
  EXPECT_EQ(j.value("status", ""), "ok") << r.Describe();
  std::string bytes_list = "[";
  for (size_t i = 0; i < binary.size(); ++i) {
    bytes_list += (i ? ", " : "") + std::to_string(static_cast<unsigned char>(binary[i]));
  }
  bytes_list += "]";
  EXPECT_EQ(j.value("stdout", ""), "'plain text\\nline 2\\n'\n" + bytes_list + "\n['blob.bin']\n")
      << r.Describe();
}

// path -> {size, decoded content} of a result's "files".
std::map<std::string, std::pair<uint64_t, std::string>> ReturnedFiles(const json& j) {
  std::map<std::string, std::pair<uint64_t, std::string>> out;
  if (!j.contains("files") || !j["files"].is_array()) {
    ADD_FAILURE() << "no files array in " << j.dump();
    return out;
  }
  for (const auto& f : j["files"]) {
    EXPECT_TRUE(f.contains("path") && f.contains("size") && f.contains("content_base64"))
        << f.dump();
    auto decoded = Unbase64(f.value("content_base64", ""));
    EXPECT_TRUE(decoded.has_value()) << "not base64: " << f.dump();
    out[f.value("path", "")] = {f.value("size", uint64_t{0}), decoded.value_or("<bad base64>")};
  }
  return out;
}

TEST_F(Server, V1ReturnFilesTrueAndGlobs) {
  const std::string code =
      "import os\n"
      "os.makedirs('sub', exist_ok=True)\n"
      "open('out.txt', 'w').write('result text')\n"
      "open('sub/table.csv', 'wb').write(b'a,b\\n1,2\\n\\x00')\n";
  {
    const HttpResponse r = srv().Execute(key(), {{"code", code}, {"return_files", true}});
    ASSERT_EQ(r.status, 200) << r.Describe();
    const auto files = ReturnedFiles(Parse(r));
    ASSERT_TRUE(files.count("out.txt")) << r.Describe();
    ASSERT_TRUE(files.count("sub/table.csv")) << r.Describe();
    EXPECT_EQ(files.at("out.txt"), std::make_pair(uint64_t{11}, std::string("result text")));
    EXPECT_EQ(files.at("sub/table.csv"),
              std::make_pair(uint64_t{9}, std::string("a,b\n1,2\n\0", 9)));
  }
  {
    const HttpResponse r =
        srv().Execute(key(), {{"code", code}, {"return_files", json::array({"*.csv"})}});
    ASSERT_EQ(r.status, 200) << r.Describe();
    const auto files = ReturnedFiles(Parse(r));
    ASSERT_EQ(files.size(), 1u) << r.Describe();
    ASSERT_TRUE(files.count("sub/table.csv")) << r.Describe();
    EXPECT_EQ(files.at("sub/table.csv").first, 9u);
  }
  {
    const HttpResponse r = srv().Execute(key(), {{"code", code}});
    ASSERT_EQ(r.status, 200) << r.Describe();
    EXPECT_FALSE(Parse(r).contains("files")) << "files without return_files: " << r.Describe();
  }
}

TEST_F(Server, V1LastExpressionIsAnExecuteResult) {
  const HttpResponse r = srv().Execute(key(), {{"code", "x = 6\nx * 7"}});
  ASSERT_EQ(r.status, 200) << r.Describe();
  json j = Parse(r);
  EXPECT_EQ(j.value("status", ""), "ok") << r.Describe();
  ASSERT_TRUE(j["outputs"].is_array()) << r.Describe();
  ASSERT_EQ(j["outputs"].size(), 1u) << r.Describe();
  const json& o = j["outputs"][0];
  EXPECT_EQ(o.value("output_type", ""), "execute_result") << r.Describe();
  ASSERT_TRUE(o.contains("data")) << r.Describe();
  EXPECT_EQ(o["data"].value("text/plain", ""), "42") << r.Describe();
}

// --- POST /execute: the reference client's contract -------------------------------

json ReferenceRequest(const std::string& code, bool return_output_files) {
  return {{"code", code},
          {"timeout", 30},
          {"mem_limit", "512m"},
          {"cpu_limit", 1.0},
          {"input_files", {{"data.txt", "1,2,3\n4,5,6\n"}}},
          {"return_output_files", return_output_files}};
}

constexpr const char* kReferenceCode =
    "rows = open('data.txt').read().split()\n"
    "total = sum(int(x) for r in rows for x in r.split(','))\n"
    "open('out.txt', 'w').write(f'total={total}')\n"
    "print('rows', len(rows))\n"
    "import sys; print('note', file=sys.stderr)\n";

TEST_F(Server, ReferenceClientRequestAndTheFieldsItReads) {
  const HttpResponse r = srv().Call("POST", "/execute", {{"X-API-Key", key()}},
                                    ReferenceRequest(kReferenceCode, true).dump());
  ASSERT_EQ(r.status, 200) << r.Describe();
  json j = Parse(r);
  ASSERT_TRUE(j.is_object()) << r.Describe();
  std::set<std::string> keys;
  for (const auto& [k, _] : j.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"task_id", "stdout", "stderr", "exit_code",
                                         "execution_time", "output_files"}))
      << r.Describe();
  EXPECT_TRUE(j["task_id"].is_string() && !j["task_id"].get<std::string>().empty()) << r.Describe();
  EXPECT_EQ(j["stdout"], "rows 2\n") << r.Describe();
  EXPECT_EQ(j["stderr"], "note\n") << r.Describe();
  EXPECT_EQ(j["exit_code"], 0) << r.Describe();
  ASSERT_TRUE(j["execution_time"].is_number_float()) << r.Describe();
  const double t = j["execution_time"].get<double>();
  EXPECT_GT(t, 0.0) << "seconds: " << r.Describe();
  EXPECT_LT(t, 20.0) << "seconds, not milliseconds: " << r.Describe();
  ASSERT_TRUE(j["output_files"].is_object()) << r.Describe();
  ASSERT_TRUE(j["output_files"].contains("out.txt")) << r.Describe();
  EXPECT_EQ(j["output_files"]["out.txt"], "total=21") << "text, not base64: " << r.Describe();
}

TEST_F(Server, ReferenceOutputFilesNullWhenNotAsked) {
  const HttpResponse r = srv().Call("POST", "/execute", {{"X-API-Key", key()}},
                                    ReferenceRequest(kReferenceCode, false).dump());
  ASSERT_EQ(r.status, 200) << r.Describe();
  json j = Parse(r);
  ASSERT_TRUE(j.contains("output_files")) << r.Describe();
  EXPECT_TRUE(j["output_files"].is_null()) << r.Describe();
  EXPECT_EQ(j["stdout"], "rows 2\n") << r.Describe();
}

TEST_F(Server, ReferenceWrongOrMissingKeyIs401) {
  const std::string body = ReferenceRequest("print(1)", false).dump();
  const HttpResponse wrong =
      srv().Call("POST", "/execute", {{"X-API-Key", "kiln_000000000000_wrong"}}, body);
  EXPECT_EQ(wrong.status, 401) << wrong.Describe();
  EXPECT_EQ(Parse(wrong), json({{"detail", "Invalid API Key"}})) << wrong.Describe();
  const HttpResponse missing = srv().Call("POST", "/execute", {}, body);
  EXPECT_EQ(missing.status, 401) << missing.Describe();
  EXPECT_EQ(Parse(missing), json({{"detail", "Invalid API Key"}})) << missing.Describe();
}

TEST_F(Server, ReferenceTimeoutIs408) {
  json body = ReferenceRequest("import time\ntime.sleep(20)\n", false);
  body["timeout"] = 1;
  const auto t0 = Clock::now();
  const HttpResponse r = srv().Call("POST", "/execute", {{"X-API-Key", key()}}, body.dump());
  EXPECT_EQ(r.status, 408) << r.Describe();
  EXPECT_EQ(Parse(r), json({{"detail", "Execution timeout after 1 s"}})) << r.Describe();
  EXPECT_LT(Clock::now() - t0, 10s);
}

TEST_F(Server, ReferenceInvalidFieldsAre422NamingTheField) {
  struct Case {
    const char* name;
    json body;
    const char* field;
  };
  json base = ReferenceRequest("print(1)", false);
  auto with = [&](const char* k, json v) {
    json b = base;
    b[k] = std::move(v);
    return b;
  };
  json no_code = base;
  no_code.erase("code");
  const std::vector<Case> cases = {
      {"timeout 0", with("timeout", 0), "timeout"},
      {"timeout 301", with("timeout", 301), "timeout"},
      {"cpu_limit 9", with("cpu_limit", 9), "cpu_limit"},
      {"code empty", with("code", ""), "code"},
      {"code missing", no_code, "code"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const HttpResponse r = srv().Call("POST", "/execute", {{"X-API-Key", key()}}, c.body.dump());
    EXPECT_EQ(r.status, 422) << r.Describe();
    json j = Parse(r);
    ASSERT_TRUE(j.contains("detail") && j["detail"].is_array() && !j["detail"].empty())
        << r.Describe();
    EXPECT_EQ(j["detail"][0]["loc"], json::array({"body", c.field})) << r.Describe();
  }
}

// --- POST /v1/execute: every error status ----------------------------------------

void ExpectV1Error(const HttpResponse& r, int status, const json& field,
                   const std::string& code = "") {
  EXPECT_EQ(r.status, status) << r.Describe();
  json j = Parse(r);
  ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object()) << r.Describe();
  const json& e = j["error"];
  EXPECT_TRUE(e.contains("code") && e["code"].is_string()) << r.Describe();
  EXPECT_TRUE(e.contains("message") && e["message"].is_string() &&
              !e["message"].get<std::string>().empty())
      << r.Describe();
  ASSERT_TRUE(e.contains("field")) << r.Describe();
  EXPECT_EQ(e["field"], field) << r.Describe();
  if (!code.empty()) {
    EXPECT_EQ(e.value("code", ""), code) << r.Describe();
  }
}

TEST_F(Server, V1InvalidRequestsAre400NamingTheField) {
  struct Case {
    const char* name;
    std::string body;
    json field;
  };
  auto file = [](const std::string& path) {
    return json(
               {{"code", "print(1)"}, {"files", json::array({{{"path", path}, {"content", "x"}}})}})
        .dump();
  };
  const std::vector<Case> cases = {
      {"malformed JSON", "{\"code\": \"print(1)\"", nullptr},
      {"code is a number", R"J({"code": 3})J", "code"},
      {"timeout is a string", R"J({"code": "print(1)", "timeout": "x"})J", "timeout"},
      {"unknown field", R"J({"code": "print(1)", "bogus": 1})J", "bogus"},
      {"file path with ../", file("../escape.txt"), "files[0].path"},
      {"file path in the middle ..", file("a/../../escape.txt"), "files[0].path"},
      {"absolute file path", file("/etc/passwd"), "files[0].path"},
      {"file path with NUL", file(std::string("a\0b", 3)), "files[0].path"},
      {"file path of 4096 characters", file(std::string(4096, 'a')), "files[0].path"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectV1Error(srv().Call("POST", "/v1/execute", {{"Authorization", "Bearer " + key()}}, c.body),
                  400, c.field);
  }
}

TEST_F(Server, V1ProfileAndLimitErrorsAre400NamingTheField) {
  ExpectV1Error(srv().Execute(key(), {{"code", "print(1)"}, {"profile", "no-such-profile"}}), 400,
                "profile");
  ExpectV1Error(srv().Execute(key(), {{"code", "print(1)"}, {"memory", "8g"}}), 400, "memory");
  ExpectV1Error(srv().Execute(key(), {{"code", "print(1)"}, {"profile", "tiny"}, {"timeout", 5}}),
                400, "timeout");
  // The same profile within its maximum runs.
  const HttpResponse ok =
      srv().Execute(key(), {{"code", "print(1)"}, {"profile", "tiny"}, {"timeout", 2}});
  EXPECT_EQ(ok.status, 200) << ok.Describe();
}

TEST_F(Server, V1UnauthenticatedIs401) {
  const std::string body = json({{"code", "print(1)"}}).dump();
  const std::vector<std::pair<const char*, std::vector<std::pair<std::string, std::string>>>>
      cases = {
          {"no key", {}},
          {"unknown key",
           {{"Authorization", "Bearer kiln_000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}},
          {"malformed key", {{"Authorization", "Bearer not-a-key"}}},
          {"right id, wrong secret", {{"X-API-Key", key().substr(0, 18) + "wrongsecret"}}},
          {"not Bearer", {{"Authorization", "Basic " + Base64("user:" + key())}}},
      };
  for (const auto& [name, headers] : cases) {
    SCOPED_TRACE(name);
    const HttpResponse r = srv().Call("POST", "/v1/execute", headers, body);
    ExpectV1Error(r, 401, nullptr, "unauthenticated");
  }
}

TEST_F(Server, RevokedKeyIs401) {
  const std::string k = CreateKey(data_dir(), "revoke-me");
  const HttpResponse before = srv().Execute(k, {{"code", "print('still valid')"}});
  ASSERT_EQ(before.status, 200) << before.Describe();
  EXPECT_EQ(Parse(before).value("stdout", ""), "still valid\n");
  const ProcessResult revoke = RunKiln({"keys", "revoke", KeyId(k), "--data-dir", data_dir()});
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  const HttpResponse after = srv().Execute(k, {{"code", "print('revoked')"}});
  ExpectV1Error(after, 401, nullptr, "unauthenticated");
  const HttpResponse reference =
      srv().Call("POST", "/execute", {{"X-API-Key", k}}, json({{"code", "print(1)"}}).dump());
  EXPECT_EQ(reference.status, 401) << reference.Describe();
  EXPECT_EQ(Parse(reference), json({{"detail", "Invalid API Key"}})) << reference.Describe();
}

TEST_F(Server, BodyOverMaxBodyIs413) {
  // max_body = 64k; a valid request of ~80 KiB.
  const std::string body =
      json({{"code", "# " + std::string(80 * 1024, 'x') + "\nprint(1)"}}).dump();
  const HttpResponse r =
      srv().Call("POST", "/v1/execute", {{"Authorization", "Bearer " + key()}}, body);
  ExpectV1Error(r, 413, "body");
  // Just under the limit still runs.
  const std::string small =
      json({{"code", "# " + std::string(60 * 1024, 'x') + "\nprint(1)"}}).dump();
  const HttpResponse ok =
      srv().Call("POST", "/v1/execute", {{"Authorization", "Bearer " + key()}}, small);
  EXPECT_EQ(ok.status, 200) << ok.Describe();
}

TEST_F(Server, UnknownPathIs404) {
  ExpectV1Error(srv().Get("/v2/nothing"), 404, nullptr);
  ExpectV1Error(
      srv().Call("POST", "/v1/execute/extra", {{"Authorization", "Bearer " + key()}}, "{}"), 404,
      nullptr);
}

TEST_F(Server, WrongMethodIs405) {
  ExpectV1Error(srv().Get("/v1/execute"), 405, nullptr);
  ExpectV1Error(srv().Call("DELETE", "/execute", {{"X-API-Key", key()}}), 405, nullptr);
  ExpectV1Error(srv().Call("POST", "/healthz", {}, "{}"), 405, nullptr);
}

// GET /v1/stats: the operator console's numbers (docs/api.md), with a key.
TEST_F(Server, StatsShowExecutionsLatencyAndAdmission) {
  ExpectV1Error(srv().Get("/v1/stats"), 401, nullptr, "unauthenticated");
  ExpectV1Error(srv().Call("POST", "/v1/stats", {{"Authorization", "Bearer " + key()}}, "{}"), 405,
                nullptr);
  const HttpResponse ok = srv().Execute(key(), {{"code", "print(1)"}});
  ASSERT_EQ(ok.status, 200) << ok.Describe();
  const HttpResponse err = srv().Execute(key(), {{"code", "1/0"}});
  ASSERT_EQ(err.status, 200) << err.Describe();
  const HttpResponse r = srv().Call("GET", "/v1/stats", {{"Authorization", "Bearer " + key()}});
  ASSERT_EQ(r.status, 200) << r.Describe();
  const json j = Parse(r);
  EXPECT_GE(j["executions"].value("ok", 0), 1) << j.dump();
  EXPECT_GE(j["executions"].value("error", 0), 1) << j.dump();
  EXPECT_TRUE(j["rejections"].is_object()) << j.dump();
  const json& lat = j["latency_ms"];
  EXPECT_EQ(lat.value("window_s", 0), 60);
  ASSERT_GE(lat.value("count", 0), 2) << j.dump();
  EXPECT_GT(lat["p50"].get<double>(), 0) << j.dump();
  EXPECT_LE(lat["p50"].get<double>(), lat["p90"].get<double>()) << j.dump();
  EXPECT_LE(lat["p90"].get<double>(), lat["p99"].get<double>()) << j.dump();
  EXPECT_LE(lat["p99"].get<double>(), lat["max"].get<double>()) << j.dump();
  // The shared server's [server]: concurrency 1, queue 1; nothing runs now.
  EXPECT_EQ(j.value("concurrency", 0), 1);
  EXPECT_EQ(j.value("queue", 0), 1);
  EXPECT_EQ(j.value("active", -1), 0);
  EXPECT_EQ(j.value("queued", -1), 0);
  EXPECT_TRUE(j["sessions_live"].is_number_integer()) << j.dump();
  EXPECT_TRUE(j["pool"].is_object()) << j.dump();
  EXPECT_TRUE(j["ready"].is_boolean()) << j.dump();
  EXPECT_GT(j.value("time_ms", int64_t{0}), int64_t{1700000000000});
}

// GET /v1/profiles: the configured profiles with their limits.
TEST_F(Server, ProfilesListTheConfiguredOnes) {
  ExpectV1Error(srv().Get("/v1/profiles"), 401, nullptr, "unauthenticated");
  const HttpResponse r = srv().Call("GET", "/v1/profiles", {{"X-API-Key", key()}});
  ASSERT_EQ(r.status, 200) << r.Describe();
  const json j = Parse(r);
  EXPECT_EQ(j.value("default", ""), "default");
  std::map<std::string, json> by_name;
  for (const auto& p : j["profiles"]) by_name[p.value("name", "")] = p;
  ASSERT_EQ(by_name.size(), 3u) << j.dump();
  ASSERT_TRUE(by_name.count("default") && by_name.count("tiny") && by_name.count("sealed"))
      << j.dump();
  EXPECT_EQ(by_name["default"]["defaults"].value("memory_bytes", uint64_t{0}), 256ULL << 20);
  EXPECT_EQ(by_name["default"]["max"].value("timeout_s", 0.0), 300.0);
  EXPECT_EQ(by_name["tiny"]["defaults"].value("timeout_s", 0.0), 1.0);
  EXPECT_TRUE(by_name["tiny"]["preload"].is_array());
  EXPECT_TRUE(by_name["tiny"]["pool"].is_boolean());
  // Each profile's backend (docs/adr/0021): native by default.
  EXPECT_EQ(by_name["default"].value("backend", ""), "native");
  EXPECT_EQ(by_name["tiny"].value("backend", ""), "native");
  EXPECT_EQ(by_name["sealed"].value("backend", ""), "gvisor");
}

// The web pages (docs/adr/0016): open, GET only, a strict CSP on every one;
// or, from a build that had no npm registry, 503 with the reason.
TEST_F(Server, WebPagesAreOpenWithAStrictPolicy) {
  const HttpResponse page = srv().Get("/");
  ASSERT_TRUE(page.status == 200 || page.status == 503) << page.Describe();
  const std::string csp = page.Header("Content-Security-Policy").value_or("");
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self';"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
  EXPECT_EQ(page.Header("X-Content-Type-Options").value_or(""), "nosniff");
  EXPECT_EQ(page.Header("Referrer-Policy").value_or(""), "no-referrer");
  if (page.status == 503) {
    EXPECT_EQ(page.Header("Content-Type").value_or(""), "text/plain; charset=utf-8");
    EXPECT_NE(page.body.find("the web pages were not built"), std::string::npos) << page.body;
  } else {
    EXPECT_EQ(page.Header("Content-Type").value_or(""), "text/html; charset=utf-8");
    EXPECT_EQ(page.Header("Cache-Control").value_or(""), "no-cache");
    const std::string etag = page.Header("ETag").value_or("");
    ASSERT_FALSE(etag.empty());
    const HttpResponse again = srv().Call("GET", "/", {{"If-None-Match", etag}});
    EXPECT_EQ(again.status, 304) << again.Describe();
    EXPECT_TRUE(again.body.empty());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(page.body, m, std::regex("/ui/playground-[A-Z0-9]+\\.js")))
        << page.body;
    const HttpResponse js = srv().Get(m.str());
    EXPECT_EQ(js.status, 200) << js.Describe();
    EXPECT_EQ(js.Header("Content-Type").value_or(""), "text/javascript; charset=utf-8");
    EXPECT_EQ(js.Header("Cache-Control").value_or(""), "public, max-age=31536000, immutable");
    const HttpResponse console = srv().Get("/console");
    EXPECT_EQ(console.status, 200) << console.Describe();
    EXPECT_NE(console.body.find("operator console"), std::string::npos);
  }
  ExpectV1Error(srv().Get("/ui/nothing.js"), 404, nullptr, "not_found");
  ExpectV1Error(srv().Call("POST", "/", {}, "{}"), 405, nullptr);
  ExpectV1Error(srv().Call("DELETE", "/console", {}), 405, nullptr);
  ExpectV1Error(srv().Get("/consoles"), 404, nullptr);
}

// --- Admission: tenant rate and global overload ------------------------------------

TEST_F(Server, TenantOverItsRateIs429WithRetryAfter) {
  const std::string& slow = shared_->keys["slow"];
  const HttpResponse first = srv().Execute(slow, {{"code", "print('first')"}});
  ASSERT_EQ(first.status, 200) << first.Describe();
  EXPECT_EQ(Parse(first).value("stdout", ""), "first\n");
  const HttpResponse second = srv().Execute(slow, {{"code", "print('second')"}});
  ExpectV1Error(second, 429, nullptr, "rate");
  const auto retry = second.Header("Retry-After");
  ASSERT_TRUE(retry.has_value()) << second.Describe();
  EXPECT_GE(std::atoi(retry->c_str()), 1) << second.Describe();
  // Another tenant is not affected.
  const HttpResponse other = srv().Execute(key(), {{"code", "print(1)"}});
  EXPECT_EQ(other.status, 200) << other.Describe();
}

TEST_F(Server, OverloadIs503QueueFullAndNothingIsLost) {
  // concurrency 1, queue 1: one runs, one waits, the third is turned away.
  HttpResponse a, b;
  std::thread ta([&] {
    a = srv().Execute(key(), {{"code", "import time\ntime.sleep(3)\nprint('a done')"}}, 60s);
  });
  const bool running =
      WaitFor([&] { return Sample(srv().Metrics(), "kiln_active_sandboxes") == 1.0; }, 10s);
  std::thread tb([&] { b = srv().Execute(key(), {{"code", "print('b done')"}}, 60s); });
  const bool queued =
      WaitFor([&] { return Sample(srv().Metrics(), "kiln_queue_depth") == 1.0; }, 10s);
  HttpResponse c;
  if (running && queued) c = srv().Execute(key(), {{"code", "print('c')"}}, 10s);
  ta.join();
  tb.join();
  ASSERT_TRUE(running) << "the first execution never showed as active:\n" << srv().Metrics();
  ASSERT_TRUE(queued) << "the second execution never showed as queued:\n" << srv().Metrics();
  ExpectV1Error(c, 503, nullptr, "queue_full");
  const auto retry = c.Header("Retry-After");
  ASSERT_TRUE(retry.has_value()) << c.Describe();
  EXPECT_GE(std::atoi(retry->c_str()), 1) << c.Describe();
  ASSERT_EQ(a.status, 200) << a.Describe();
  EXPECT_EQ(Parse(a).value("stdout", ""), "a done\n") << a.Describe();
  ASSERT_EQ(b.status, 200) << b.Describe();
  EXPECT_EQ(Parse(b).value("stdout", ""), "b done\n") << b.Describe();
}

// --- The audit log -----------------------------------------------------------------

TEST_F(Server, AuditHasOneRowPerExecution) {
  // Tenant "audit": burst 3 at a negligible rate, so the fourth is rejected.
  const std::string& k = shared_->keys["audit"];
  const std::string m = UniqueMarker("audit");
  const std::string ok_code = "print('ok') # " + m;
  const std::string error_code = "import sys; sys.exit(3) # " + m;
  const std::string timeout_code = "import time; time.sleep(20) # " + m;
  const std::string rejected_code = "print('never') # " + m;
  const HttpResponse ok = srv().Execute(k, {{"code", ok_code}});
  const HttpResponse error = srv().Execute(k, {{"code", error_code}});
  const HttpResponse timeout = srv().Execute(k, {{"code", timeout_code}, {"timeout", 1}});
  const HttpResponse rejected = srv().Execute(k, {{"code", rejected_code}});
  ASSERT_EQ(ok.status, 200) << ok.Describe();
  ASSERT_EQ(error.status, 200) << error.Describe();
  EXPECT_EQ(Parse(error).value("status", ""), "error") << error.Describe();
  ASSERT_EQ(timeout.status, 200) << timeout.Describe();
  EXPECT_EQ(Parse(timeout).value("status", ""), "timeout") << timeout.Describe();
  ASSERT_EQ(rejected.status, 429) << rejected.Describe();

  const json rows = Audit(data_dir(), "audit");
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 4u) << rows.dump(2);
  std::map<std::string, json> by_code;
  for (const auto& row : rows) {
    EXPECT_EQ(row.value("tenant", ""), "audit") << row.dump();
    EXPECT_EQ(row.value("key_id", ""), KeyId(k)) << row.dump();
    by_code[row.value("code", "")] = row;
  }
  ASSERT_EQ(by_code.size(), 4u) << rows.dump(2);
  EXPECT_EQ(by_code[ok_code].value("status", ""), "ok") << rows.dump(2);
  EXPECT_EQ(by_code[ok_code]["exit_code"], 0) << rows.dump(2);
  EXPECT_EQ(by_code[ok_code]["id"], Parse(ok)["id"]) << rows.dump(2);
  EXPECT_EQ(by_code[error_code].value("status", ""), "error") << rows.dump(2);
  EXPECT_EQ(by_code[error_code]["exit_code"], 3) << rows.dump(2);
  EXPECT_EQ(by_code[timeout_code].value("status", ""), "timeout") << rows.dump(2);
  EXPECT_EQ(by_code[rejected_code].value("status", ""), "rejected") << rows.dump(2);
  EXPECT_EQ(by_code[rejected_code].value("reason", ""), "rate") << rows.dump(2);
}

// --- Lifecycle: dedicated servers ------------------------------------------------------

class ServerLifecycle : public SandboxTest {};

TEST_F(ServerLifecycle, SigkillDuringRunsThenRestartMarksThemInterrupted) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  const std::string config = dir.path() + "/kiln.toml";
  WriteFile(config, R"TOML(
[server]
concurrency = 2
queue = 2
shutdown_grace = "5s"
[tenants.default]
rate = 1000
burst = 1000
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 60
memory = "256m"
)TOML");
  std::string why;
  KilnServer server;
  ASSERT_TRUE(server.Start(data, config, "first", &why)) << why;
  const std::string key = Trim(server.Stdout());
  ASSERT_TRUE(IsKey(key)) << server.Stdout();

  // Each run starts a child whose command line carries the marker, then sleeps.
  const std::string marker = UniqueMarker("kilnsrvkill");
  const std::string code =
      "# " + marker +
      "\n"
      "import subprocess, sys, time\n"
      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', '" +
      marker +
      "'])\n"
      "time.sleep(30)\n";
  HttpResponse r1, r2;
  std::thread t1([&] { r1 = server.Execute(key, {{"code", code}}, 90s); });
  std::thread t2([&] { r2 = server.Execute(key, {{"code", code}}, 90s); });
  auto running_rows = [&] {
    int n = 0;
    for (const auto& row : Audit(data)) n += row.value("status", "") == "running";
    return n;
  };
  const bool both_running = WaitFor([&] { return running_rows() == 2; }, 20s);
  const bool children_up = both_running && WaitFor([&] { return PgrepF(marker).size() >= 2; }, 10s);

  // The supervisors (children of the spawner, the server's child) and their cgroups.
  std::vector<pid_t> supervisors;
  for (pid_t spawner : ChildrenOf(server.pid())) {
    for (pid_t s : ChildrenOf(spawner)) {
      // Not the warm pool's process (kiln-pool), the spawner's other child.
      if (ReadFile("/proc/" + std::to_string(s) + "/comm")
              .value_or("")
              .rfind("kiln-supervise", 0) == 0) {
        supervisors.push_back(s);
      }
    }
  }
  const std::vector<std::string> cgroup_dirs = KilnCgroupDirs();
  const std::vector<std::string> cgroups_before = SandboxCgroupsOf(supervisors);

  // Leave nothing behind even when a check below fails: what is left of the
  // first server's runs is still in the process group this test started.
  struct GroupReaper {
    pid_t pgid;
    std::string marker;
    ~GroupReaper() {
      if (pgid > 0 && !PgrepF(marker).empty()) ::kill(-pgid, SIGKILL);
    }
  } reaper{server.pid(), marker};
  server.Kill();
  t1.join();
  t2.join();
  ASSERT_TRUE(both_running) << "two rows never said running: " << Audit(data).dump(2);
  ASSERT_TRUE(children_up) << "the runs' marked children never showed up in pgrep -f " << marker;
  EXPECT_NE(r1.status, 200) << r1.Describe();
  EXPECT_NE(r2.status, 200) << r2.Describe();

  // Nothing of those runs survives the server.
  const bool gone = WaitFor([&] { return PgrepF(marker).empty(); }, 10s);
  std::string left;
  for (pid_t p : PgrepF(marker)) {
    left += "\n  " + std::to_string(p) + ": " +
            ReadFile("/proc/" + std::to_string(p) + "/stat").value_or("(gone)").substr(0, 80);
  }
  EXPECT_TRUE(gone)
      << "processes of the killed server's runs remain 10 s after its SIGKILL (pgrep -f " << marker
      << "):" << left;
  EXPECT_EQ(supervisors.size(), 2u) << "expected one supervisor per run under the spawner";
  // The supervisors die with the spawner (PDEATHSIG) and are reaped by
  // whoever inherits them; until then their pids (and so their cgroups' names)
  // are taken.
  for (pid_t s : supervisors) {
    const bool dead = WaitFor([s] { return ::kill(s, 0) != 0 && errno == ESRCH; }, 10s);
    EXPECT_TRUE(dead) << "supervisor " << s << " of the killed server still exists: "
                      << ReadFile("/proc/" + std::to_string(s) + "/stat").value_or("(gone)");
  }

  // Restart on the same data directory.
  KilnServer again;
  ASSERT_TRUE(again.Start(data, config, "second", &why)) << why;
  EXPECT_EQ(Trim(again.Stdout()), "") << "a second start must not create another key";
  const json rows = Audit(data);
  ASSERT_EQ(rows.size(), 2u) << rows.dump(2);
  for (const auto& row : rows) {
    EXPECT_EQ(row.value("status", ""), "interrupted") << rows.dump(2);
    EXPECT_FALSE(row["ended"].is_null()) << rows.dump(2);
    EXPECT_EQ(row.value("key_id", ""), KeyId(key)) << rows.dump(2);
  }
  // Whatever survived, the restart's stale-cgroup sweep must have killed it.
  EXPECT_TRUE(WaitFor([&] { return PgrepF(marker).empty(); }, 5s))
      << "processes of the killed server's runs survive its restart (pgrep -f " << marker << ")";
  // The restarted server still works.
  const HttpResponse after = again.Execute(key, {{"code", "print('after restart')"}});
  EXPECT_EQ(after.status, 200) << after.Describe();

  if (const auto no_cgroup = CgroupLimitsMissingReason()) {
    // kiln/ directories another (root) kiln left here are not this server's.
    std::cout << "[   NOTE   ] stale-cgroup check skipped: " << *no_cgroup << "\n";
  } else if (cgroup_dirs.empty()) {
    std::cout
        << "[   NOTE   ] no v1 kiln cgroup directory on this host: stale-cgroup check skipped\n";
  } else {
    EXPECT_EQ(cgroups_before.size(), 2u * cgroup_dirs.size())
        << "expected each run's sbx-<supervisor pid>-* cgroup in every kiln cgroup dir while "
           "running";
    const std::vector<std::string> stale = SandboxCgroupsOf(supervisors);
    std::string list;
    for (const auto& s : stale) list += "\n  " + s;
    EXPECT_TRUE(stale.empty()) << "cgroups of the dead supervisors remain after the restart:"
                               << list;
  }
  const KilnServer::Exit e = again.Terminate(15s);
  EXPECT_TRUE(e.in_time);
  EXPECT_EQ(e.code, 0) << again.Stderr();
}

TEST_F(ServerLifecycle, SigtermDrainsTheRunningExecution) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  const std::string config = dir.path() + "/kiln.toml";
  WriteFile(config, R"TOML(
[server]
concurrency = 1
queue = 1
shutdown_grace = "10s"
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 30
memory = "256m"
)TOML");
  std::string why;
  KilnServer server;
  ASSERT_TRUE(server.Start(data, config, "drain", &why)) << why;
  const std::string key = Trim(server.Stdout());
  const uint16_t port = server.port();

  HttpResponse r;
  std::thread t([&] {
    r = server.Execute(key, {{"code", "import time\ntime.sleep(2)\nprint('drained')"}}, 60s);
  });
  const bool running =
      WaitFor([&] { return Sample(server.Metrics(), "kiln_active_sandboxes") == 1.0; }, 10s);
  if (!running) t.join();
  ASSERT_TRUE(running) << server.Metrics();

  const auto t0 = Clock::now();
  ::kill(server.pid(), SIGTERM);
  // While the execution drains, the listener is already closed.
  const bool refused_while_draining =
      WaitFor([&] { return !CanConnect("127.0.0.1", port); }, 1500ms);
  const bool still_running_then = !HasExited(server.pid()) && Clock::now() - t0 < 1900ms;
  t.join();
  const KilnServer::Exit e = server.WaitExit(12s);
  const double since_sigterm = std::chrono::duration<double>(Clock::now() - t0).count();

  ASSERT_EQ(r.status, 200) << r.Describe() << "\nserver stderr:\n" << server.Stderr();
  json j = Parse(r);
  EXPECT_EQ(j.value("status", ""), "ok") << r.Describe();
  EXPECT_EQ(j.value("stdout", ""), "drained\n") << r.Describe();
  EXPECT_TRUE(e.in_time) << "the server did not exit within 12 s of SIGTERM (grace 10 s)";
  EXPECT_EQ(e.code, 0) << server.Stderr();
  EXPECT_LT(since_sigterm, 10.0);
  EXPECT_TRUE(refused_while_draining) << "new connections were still accepted after SIGTERM";
  EXPECT_TRUE(still_running_then) << "(the refusal check ran after the server had exited)";
  EXPECT_FALSE(CanConnect("127.0.0.1", port))
      << "a new connection was accepted after the server exited";
}

}  // namespace
}  // namespace kiln::testing
