// Integration tier: the output audit (docs/adr/0015) as a client of `kiln
// serve` sees it. Real sandboxes print the server's own API key (the one the
// first start printed) and private keys; what comes back over HTTP, SSE and
// the files API must not carry them, and `kiln audit --json` must say which
// detector matched where, never the text.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
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
timeout = 30
memory = "256m"

# Withholds the output of an execution that sends back a private key.
[profiles.blocking]
interpreter = "/usr/bin/python3"

[profiles.blocking.defaults]
timeout = 30
memory = "256m"

[profiles.blocking.output_audit]
action = "block"

# Flags (records only) the server's keys, redacts a pattern of its own.
[profiles.flagged]
interpreter = "/usr/bin/python3"

[profiles.flagged.defaults]
timeout = 30
memory = "256m"

[profiles.flagged.output_audit]
action = "flag"

[profiles.flagged.output_audit.patterns]
ticket = { regex = "TKT-[0-9]{8}", action = "redact", max_length = 12 }
)TOML";

// A private key's shape (not a real key: the audit looks for the armour).
const std::string kPem =
    "-----BEGIN PRIVATE KEY-----\\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\\n"
    "-----END PRIVATE KEY-----\\n";

struct Shared {
  TempDir dir;
  std::string data_dir;
  KilnServer server;
  std::string key;
};

struct Event {
  std::string name;
  json data;
};

class OutputAudit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SandboxMissingReason()) return;
    shared_ = new Shared;
    shared_->data_dir = shared_->dir.path() + "/data";
    const std::string config = shared_->dir.path() + "/kiln.toml";
    WriteFile(config, kConfig);
    if (!shared_->server.Start(shared_->data_dir, config, "audit", &setup_error_)) return;
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
  static const std::string& key() { return shared_->key; }
  // The secret part of the server's own key: what must never come back.
  static std::string Secret() { return key().substr(18); }

  static HttpResponse Call(const std::string& method, const std::string& path,
                           const std::string& body = "") {
    return srv().Call(method, path, {{"Authorization", "Bearer " + key()}}, body, 120s);
  }

  // The audit rows' output hits of execution `id`.
  static json HitsOf(const std::string& id) {
    for (const auto& row : Audit(shared_->data_dir)) {
      if (row.value("id", "") == id) return row.value("output_hits", json::array());
    }
    ADD_FAILURE() << "no audit row " << id;
    return json::array();
  }

  // POST with Accept: text/event-stream; the events in order (de-chunked).
  static std::vector<Event> Stream(const std::string& path, const json& body, int* status) {
    std::vector<Event> events;
    *status = 0;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(srv().port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return events;
    }
    const std::string payload = body.dump();
    const std::string req =
        "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key() +
        "\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(payload.size()) + "\r\n\r\n" + payload;
    (void)!::write(fd, req.data(), req.size());
    std::string raw;
    const auto deadline = Clock::now() + 60s;
    while (Clock::now() < deadline) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 200) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;  // the server closes after "done"
      raw.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    const size_t head_end = raw.find("\r\n\r\n");
    if (head_end == std::string::npos) return events;
    *status = std::atoi(raw.c_str() + 9);
    std::string text;
    for (size_t pos = head_end + 4;;) {
      const size_t eol = raw.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const size_t len = std::strtoul(raw.c_str() + pos, nullptr, 16);
      if (len == 0 || raw.size() < eol + 2 + len) break;
      text += raw.substr(eol + 2, len);
      pos = eol + 2 + len + 2;
    }
    for (size_t at = 0;;) {
      const size_t end = text.find("\n\n", at);
      if (end == std::string::npos) break;
      const std::string block = text.substr(at, end - at);
      const size_t nl = block.find('\n');
      if (block.rfind("event: ", 0) == 0 && nl != std::string::npos) {
        events.push_back(
            {block.substr(7, nl - 7), json::parse(block.substr(nl + 7), nullptr, false)});
      }
      at = end + 2;
    }
    return events;
  }

  static Shared* shared_;
  static std::string setup_error_;
};

Shared* OutputAudit::shared_ = nullptr;
std::string OutputAudit::setup_error_;

TEST_F(OutputAudit, TheServersOwnKeyIsRedactedFromAOneShotAndTheHitIsAudited) {
  const HttpResponse r = srv().Execute(
      key(), {{"code", "k = '" + key() + "'\nprint('key:', k)\nimport sys\nsys.stderr.write(k)\n"}},
      120s);
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(r.body.find(Secret()), std::string::npos) << r.body;
  const json j = Parse(r);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["stdout"], "key: [REDACTED:kiln_api_key]\n");
  EXPECT_EQ(j["stderr"], "[REDACTED:kiln_api_key]");
  ASSERT_TRUE(j.contains("output_audit")) << r.body;
  EXPECT_EQ(j["output_audit"]["blocked"], false);

  const json hits = HitsOf(j.value("id", ""));
  std::set<std::string> where;
  for (const auto& h : hits) {
    EXPECT_EQ(h["detector"], "kiln_api_key");
    EXPECT_EQ(h["action"], "redact");
    where.insert(h.value("where", ""));
  }
  EXPECT_TRUE(where.count("stdout") == 1 && where.count("stderr") == 1) << hits.dump();
  EXPECT_EQ(hits.dump().find(Secret()), std::string::npos);
  EXPECT_NE(srv().Metrics().find("kiln_output_audit_hits_total{action=\"redact\",detector="
                                 "\"kiln_api_key\"}"),
            std::string::npos);
}

TEST_F(OutputAudit, AKeyPrintedInPiecesAcrossStreamedChunksIsRedacted) {
  // Two writes, flushed 300 ms apart: the supervisor reads (and streams)
  // them as separate chunks; neither may carry a piece of the secret.
  const std::string code = "import sys, time\nk = '" + key() +
                           "'\nprint('start', flush=True)\ntime.sleep(0.3)\n"
                           "sys.stdout.write(k[:30]); sys.stdout.flush(); time.sleep(0.3)\n"
                           "sys.stdout.write(k[30:] + ' end\\n'); sys.stdout.flush()\n";
  for (const std::string path : {"/v1/execute", "session"}) {
    std::string target = path;
    if (path == "session") {
      const HttpResponse created = Call("POST", "/v1/sessions", "{}");
      ASSERT_EQ(created.status, 201) << created.Describe();
      target = "/v1/sessions/" + Parse(created).value("id", "") + "/execute";
    }
    int status = 0;
    const auto events = Stream(target, {{"code", code}}, &status);
    ASSERT_EQ(status, 200) << target;
    ASSERT_FALSE(events.empty()) << target;
    EXPECT_EQ(events.back().name, "done") << target;
    std::string streamed;
    for (const auto& e : events) {
      const std::string dumped = e.data.dump();
      EXPECT_EQ(dumped.find(Secret().substr(0, 8)), std::string::npos) << target << ": " << dumped;
      EXPECT_EQ(dumped.find(Secret().substr(30)), std::string::npos) << target << ": " << dumped;
      if (e.name == "stdout") streamed += e.data.value("text", "");
    }
    EXPECT_EQ(streamed, "start\n[REDACTED:kiln_api_key] end\n") << target;
    EXPECT_EQ(events.back().data["stdout"], streamed) << target;
  }
}

TEST_F(OutputAudit, BlockWithholdsAReturnedFileAndKeepsTheStatusTrue) {
  const std::string code = "open('id_key.pem', 'w').write('" + kPem +
                           "')\nopen('fine.txt', 'w').write('ok')\nprint('wrote them')\n";
  const HttpResponse r =
      srv().Execute(key(), {{"code", code}, {"profile", "blocking"}, {"return_files", true}}, 120s);
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(r.body.find("MIIEvQIBADANBgkqhkiG9w0B"), std::string::npos) << r.body;
  const json j = Parse(r);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["stdout"], "");
  EXPECT_TRUE(j["files"].empty()) << r.body;
  EXPECT_EQ(j["output_audit"]["blocked"], true);
  EXPECT_EQ(j["output_audit"]["hits"][0]["where"], "files/id_key.pem");
  EXPECT_EQ(j["output_audit"]["hits"][0]["action"], "block");
  // The same profile without a key in sight sends everything.
  const HttpResponse clean =
      srv().Execute(key(), {{"code", "print('fine')"}, {"profile", "blocking"}}, 120s);
  ASSERT_EQ(clean.status, 200) << clean.Describe();
  EXPECT_EQ(Parse(clean)["stdout"], "fine\n");
}

TEST_F(OutputAudit, FlagRecordsAndACustomPatternRedacts) {
  const HttpResponse r = srv().Execute(
      key(),
      {{"code", "print('" + key() + "')\nprint('see TKT-12345678')"}, {"profile", "flagged"}},
      120s);
  ASSERT_EQ(r.status, 200) << r.Describe();
  const json j = Parse(r);
  EXPECT_EQ(j["stdout"], key() + "\nsee [REDACTED:ticket]\n");
  const json hits = HitsOf(j.value("id", ""));
  std::set<std::string> seen;
  for (const auto& h : hits) seen.insert(h.value("detector", "") + ":" + h.value("action", ""));
  EXPECT_TRUE(seen.count("kiln_api_key:flag") == 1 && seen.count("ticket:redact") == 1)
      << hits.dump();
  // The client is told of what changed only.
  ASSERT_TRUE(j.contains("output_audit"));
  for (const auto& h : j["output_audit"]["hits"]) EXPECT_EQ(h["detector"], "ticket");
}

TEST_F(OutputAudit, ASessionsDownloadedFileIsFilteredAndTheReferenceContractToo) {
  const HttpResponse created = Call("POST", "/v1/sessions", "{}");
  ASSERT_EQ(created.status, 201) << created.Describe();
  const std::string id = Parse(created).value("id", "");
  const HttpResponse cell =
      Call("POST", "/v1/sessions/" + id + "/execute",
           json({{"code", "open('creds.txt', 'w').write('token=" + key() + "\\n')"}}).dump());
  ASSERT_EQ(cell.status, 200) << cell.Describe();
  const HttpResponse file = Call("GET", "/v1/sessions/" + id + "/files/creds.txt");
  ASSERT_EQ(file.status, 200) << file.Describe();
  EXPECT_EQ(file.body, "token=[REDACTED:kiln_api_key]\n");

  // POST /execute (the reference contract): same filter, same body shape.
  const HttpResponse ref = srv().Call("POST", "/execute", {{"X-API-Key", key()}},
                                      json({{"code", "print('" + key() + "')"}}).dump(), 120s);
  ASSERT_EQ(ref.status, 200) << ref.Describe();
  EXPECT_EQ(Parse(ref)["stdout"], "[REDACTED:kiln_api_key]\n");
  EXPECT_FALSE(Parse(ref).contains("output_audit"));  // the reference's fields, unchanged
}

TEST_F(OutputAudit, ABlockingSessionRefusesTheDownloadWith403) {
  const HttpResponse created = Call("POST", "/v1/sessions", json({{"profile", "blocking"}}).dump());
  ASSERT_EQ(created.status, 201) << created.Describe();
  const std::string id = Parse(created).value("id", "");
  const HttpResponse cell = Call("POST", "/v1/sessions/" + id + "/execute",
                                 json({{"code", "open('k.pem', 'w').write('" + kPem +
                                                    "')\nopen('ok.txt', 'w').write('fine')"}})
                                     .dump());
  ASSERT_EQ(cell.status, 200) << cell.Describe();
  const HttpResponse file = Call("GET", "/v1/sessions/" + id + "/files/k.pem");
  ASSERT_EQ(file.status, 403) << file.Describe();
  EXPECT_EQ(Parse(file)["error"]["code"], "output_blocked");
  EXPECT_EQ(file.body.find("MIIEvQ"), std::string::npos);
  const HttpResponse ok = Call("GET", "/v1/sessions/" + id + "/files/ok.txt");
  ASSERT_EQ(ok.status, 200) << ok.Describe();
  EXPECT_EQ(ok.body, "fine");
}

TEST_F(OutputAudit, McpToolResultsAreFilteredToo) {
  // MCP's tools run through the sessions and so through the same service.
  std::vector<std::pair<std::string, std::string>> h = {
      {"Accept", "application/json, text/event-stream"}, {"Authorization", "Bearer " + key()}};
  const json init = {{"jsonrpc", "2.0"},
                     {"id", 1},
                     {"method", "initialize"},
                     {"params",
                      {{"protocolVersion", "2025-11-25"},
                       {"capabilities", json::object()},
                       {"clientInfo", {{"name", "audit-test"}, {"version", "1"}}}}}};
  const HttpResponse r = srv().Call("POST", "/mcp", h, init.dump(), 60s);
  ASSERT_EQ(r.status, 200) << r.Describe();
  const std::string session = r.Header("Mcp-Session-Id").value_or("");
  ASSERT_FALSE(session.empty()) << r.Describe();
  h.emplace_back("Mcp-Session-Id", session);
  h.emplace_back("MCP-Protocol-Version", "2025-11-25");
  ASSERT_EQ(
      srv()
          .Call("POST", "/mcp", h, R"({"jsonrpc":"2.0","method":"notifications/initialized"})")
          .status,
      202);
  auto call = [&](int id, const std::string& tool, const json& args) {
    return srv().Call("POST", "/mcp", h,
                      json({{"jsonrpc", "2.0"},
                            {"id", id},
                            {"method", "tools/call"},
                            {"params", {{"name", tool}, {"arguments", args}}}})
                          .dump(),
                      120s);
  };
  const HttpResponse ran =
      call(2, "run_python",
           {{"code", "print('" + key() + "')\nopen('k.txt', 'w').write('" + key() + "')"}});
  ASSERT_EQ(ran.status, 200) << ran.Describe();
  EXPECT_EQ(ran.body.find(Secret()), std::string::npos) << ran.body;
  EXPECT_NE(ran.body.find("[REDACTED:kiln_api_key]"), std::string::npos) << ran.body;
  const HttpResponse got = call(3, "download_file", {{"path", "k.txt"}});
  ASSERT_EQ(got.status, 200) << got.Describe();
  EXPECT_EQ(got.body.find(Secret()), std::string::npos) << got.body;
  // A text file comes back as text: the redacted file, as downloaded.
  EXPECT_NE(got.body.find("\"content\":\"[REDACTED:kiln_api_key]\""), std::string::npos)
      << got.body;
}

}  // namespace
}  // namespace kiln::testing
