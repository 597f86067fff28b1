// Integration tier: the MCP server's protocol edges, from the outside (the
// SDK tests in this folder cover the happy paths): over Streamable HTTP
// (`kiln serve`'s /mcp) wrong or missing keys, requests before initialize,
// malformed JSON-RPC, unknown methods, another client's session id, Origin,
// methods and headers; over stdio (`kiln mcp`, local and --url) the same
// errors as JSON-RPC lines; and garbage that must crash or hang nothing.
#include <gtest/gtest.h>
#include <strings.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

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
session_idle_ttl = "60s"
shutdown_grace = "5s"
mcp_allowed_origins = ["https://agent.example"]

[tenants.default]
rate = 10000
burst = 10000

[tenants.other]
rate = 10000
burst = 10000

[profiles.default]
interpreter = "/usr/bin/python3"
)TOML";

const json kInit = {{"jsonrpc", "2.0"},
                    {"id", 1},
                    {"method", "initialize"},
                    {"params",
                     {{"protocolVersion", "2025-11-25"},
                      {"capabilities", json::object()},
                      {"clientInfo", {{"name", "protocol-test"}, {"version", "1"}}}}}};

struct Shared {
  TempDir dir;
  std::string data_dir;
  KilnServer server;
  std::string key, other;
};

class McpProtocol : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SandboxMissingReason()) return;
    shared_ = new Shared;
    shared_->data_dir = shared_->dir.path() + "/data";
    const std::string config = shared_->dir.path() + "/kiln.toml";
    WriteFile(config, kConfig);
    if (!shared_->server.Start(shared_->data_dir, config, "mcp", &setup_error_)) return;
    shared_->key = Trim(shared_->server.Stdout());
    shared_->other = CreateKey(shared_->data_dir, "other");
  }
  static void TearDownTestSuite() {
    if (shared_ != nullptr) {
      const KilnServer::Exit e = shared_->server.Terminate(30s);
      EXPECT_TRUE(e.in_time) << "the server did not stop within 30 s of SIGTERM";
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

  // POST /mcp with the MCP headers; `headers` are added (and win).
  static HttpResponse Post(const std::string& body, const std::string& key,
                           const std::string& session = "",
                           std::vector<std::pair<std::string, std::string>> headers = {}) {
    std::vector<std::pair<std::string, std::string>> h = {
        {"Accept", "application/json, text/event-stream"}};
    if (!key.empty()) h.emplace_back("Authorization", "Bearer " + key);
    if (!session.empty()) {
      h.emplace_back("Mcp-Session-Id", session);
      h.emplace_back("MCP-Protocol-Version", "2025-11-25");
    }
    for (auto& x : headers) {
      std::erase_if(
          h, [&x](const auto& y) { return strcasecmp(x.first.c_str(), y.first.c_str()) == 0; });
      h.push_back(std::move(x));
    }
    return shared_->server.Call("POST", "/mcp", h, body, 60s);
  }
  // initialize + notifications/initialized; the session id.
  static std::string Initialize(const std::string& key) {
    const HttpResponse r = Post(kInit.dump(), key);
    EXPECT_EQ(r.status, 200) << r.Describe();
    const std::string id = r.Header("Mcp-Session-Id").value_or("");
    EXPECT_TRUE(std::regex_match(id, std::regex("[0-9a-f]{64}"))) << r.Describe();
    const HttpResponse n =
        Post(R"({"jsonrpc":"2.0","method":"notifications/initialized"})", key, id);
    EXPECT_EQ(n.status, 202) << n.Describe();
    return id;
  }
  static int RpcError(const HttpResponse& r) {
    const json j = Parse(r);
    if (!j.is_object()) {
      ADD_FAILURE() << "not a JSON-RPC object: " << r.Describe();
      return 0;
    }
    EXPECT_EQ(j.value("jsonrpc", ""), "2.0") << r.Describe();
    return j.contains("error") ? j["error"].value("code", 0) : 0;
  }

  static const std::string& key() { return shared_->key; }
  static const std::string& other() { return shared_->other; }

  static Shared* shared_;
  static std::string setup_error_;
};

Shared* McpProtocol::shared_ = nullptr;
std::string McpProtocol::setup_error_;

// --- Streamable HTTP ----------------------------------------------------------

TEST_F(McpProtocol, WrongOrMissingKeysAre401) {
  HttpResponse r = Post(kInit.dump(), "");
  EXPECT_EQ(r.status, 401) << r.Describe();
  EXPECT_EQ(r.Header("WWW-Authenticate").value_or(""), "Bearer");
  r = Post(kInit.dump(), "kiln_000000000000_not-a-key");
  EXPECT_EQ(r.status, 401) << r.Describe();
  // X-API-Key works as on every route.
  r = shared_->server.Call("POST", "/mcp", {{"Accept", "application/json"}, {"X-API-Key", key()}},
                           kInit.dump());
  EXPECT_EQ(r.status, 200) << r.Describe();
  // A valid session id does not stand in for a key.
  const std::string id = Initialize(key());
  r = Post(R"({"jsonrpc":"2.0","id":2,"method":"ping"})", "", id);
  EXPECT_EQ(r.status, 401) << r.Describe();
}

TEST_F(McpProtocol, RequestsBeforeInitializeAre400WithAJsonRpcError) {
  for (const std::string method : {"server/discover", "tools/list", "tools/call"}) {
    const HttpResponse r =
        Post(json{{"jsonrpc", "2.0"}, {"id", 7}, {"method", method}}.dump(), key());
    EXPECT_EQ(r.status, 400) << method << ": " << r.Describe();
    EXPECT_NE(RpcError(r), 0) << r.Describe();
    EXPECT_EQ(Parse(r)["id"], 7);
  }
}

TEST_F(McpProtocol, MalformedJsonRpcAndUnknownMethods) {
  const std::string id = Initialize(key());
  struct Case {
    std::string body;
    int status;
    int code;
  };
  const std::vector<Case> cases = {
      {"{", 400, -32700},
      {"", 400, -32700},
      {std::string(5000, '['), 400, -32700},
      {"[]", 400, -32600},
      {R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", 400, -32600},
      {R"({"jsonrpc":"1.0","id":1,"method":"ping"})", 400, -32600},
      {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", 400, -32600},
      {R"({"jsonrpc":"2.0","id":1,"method":42})", 400, -32600},
      {R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})", 400, -32602},
      {R"({"jsonrpc":"2.0","id":1,"method":"no/such/method"})", 200, -32601},
      {R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_bash"}})", 200,
       -32602},
  };
  for (const auto& c : cases) {
    const HttpResponse r = Post(c.body, key(), id, {{"Accept", "application/json"}});
    EXPECT_EQ(r.status, c.status) << c.body.substr(0, 80) << ": " << r.Describe();
    EXPECT_EQ(RpcError(r), c.code) << c.body.substr(0, 80) << ": " << r.Describe();
  }
  // The session is fine afterwards.
  const HttpResponse ping = Post(R"({"jsonrpc":"2.0","id":"p","method":"ping"})", key(), id);
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(Parse(ping)["result"], json::object());
}

TEST_F(McpProtocol, AnotherClientsSessionIdIsRefused) {
  const std::string mine = Initialize(key());
  const std::string ping = R"({"jsonrpc":"2.0","id":3,"method":"ping"})";
  // Another tenant presenting it: 404, as for an id that never existed.
  HttpResponse r = Post(ping, other(), mine);
  EXPECT_EQ(r.status, 404) << r.Describe();
  EXPECT_NE(RpcError(r), 0);
  r = shared_->server.Call("DELETE", "/mcp",
                           {{"Authorization", "Bearer " + other()}, {"Mcp-Session-Id", mine}});
  EXPECT_EQ(r.status, 404) << r.Describe();
  r = Post(ping, key(), std::string(64, '0'));
  EXPECT_EQ(r.status, 404) << r.Describe();
  // Its owner still uses it.
  r = Post(ping, key(), mine);
  EXPECT_EQ(r.status, 200) << r.Describe();
  // DELETE ends it: 204, then 404.
  r = shared_->server.Call("DELETE", "/mcp",
                           {{"Authorization", "Bearer " + key()}, {"Mcp-Session-Id", mine}});
  EXPECT_EQ(r.status, 204) << r.Describe();
  r = Post(ping, key(), mine);
  EXPECT_EQ(r.status, 404) << r.Describe();
}

TEST_F(McpProtocol, OriginsMethodsAndHeaders) {
  HttpResponse r = Post(kInit.dump(), key(), "", {{"Origin", "http://evil.example"}});
  EXPECT_EQ(r.status, 403) << r.Describe();
  r = Post(kInit.dump(), key(), "", {{"Origin", "http://localhost:5173"}});
  EXPECT_EQ(r.status, 200) << r.Describe();
  r = Post(kInit.dump(), key(), "",
           {{"Origin", "https://agent.example"}});  // server.mcp_allowed_origins
  EXPECT_EQ(r.status, 200) << r.Describe();
  const std::string id = Initialize(key());
  r = shared_->server.Call("GET", "/mcp",
                           {{"Authorization", "Bearer " + key()},
                            {"Accept", "text/event-stream"},
                            {"Mcp-Session-Id", id}});
  EXPECT_EQ(r.status, 405) << r.Describe();
  r = shared_->server.Call("PUT", "/mcp", {{"Authorization", "Bearer " + key()}}, "{}");
  EXPECT_EQ(r.status, 405) << r.Describe();
  r = Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", key(), id,
           {{"MCP-Protocol-Version", "1999-01-01"}});
  EXPECT_EQ(r.status, 400) << r.Describe();
  r = Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", key(), id, {{"Accept", "text/html"}});
  EXPECT_EQ(r.status, 406) << r.Describe();
}

TEST_F(McpProtocol, ToolCallsStreamWhenTheClientAcceptsSse) {
  const std::string id = Initialize(key());
  const std::string call =
      R"J({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(6*7)"},"_meta":{"progressToken":"t"}}})J";
  HttpResponse r = Post(call, key(), id);
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(r.Header("Content-Type").value_or(""), "text/event-stream");
  EXPECT_NE(r.body.find("event: message\ndata: "), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("text":"42")"), std::string::npos) << r.body;
  // A client that accepts only JSON gets one object.
  r = Post(
      R"({"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"1/0"}}})",
      key(), id, {{"Accept", "application/json"}});
  ASSERT_EQ(r.status, 200) << r.Describe();
  const json j = Parse(r);
  EXPECT_EQ(j["result"]["isError"], true) << r.body;
  EXPECT_NE(j["result"]["content"][0]["text"].get<std::string>().find("ZeroDivisionError"),
            std::string::npos);
}

TEST_F(McpProtocol, GarbageCrashesNothing) {
  const std::string id = Initialize(key());
  std::mt19937 rng(12345);
  for (int i = 0; i < 60; ++i) {
    std::string body(static_cast<size_t>(rng() % 2000), '\0');
    for (auto& c : body) c = static_cast<char>(rng() % 256);
    if (i % 3 == 0) body = R"({"jsonrpc":"2.0","id":)" + body;
    const HttpResponse r =
        Post(body, key(), i % 2 == 0 ? id : "", {{"Content-Type", "application/json"}});
    EXPECT_TRUE(r.status == 400 || r.status == 200) << r.Describe();
  }
  EXPECT_EQ(shared_->server.Get("/healthz").status, 200);
  const HttpResponse ping = Post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", key(), id);
  EXPECT_EQ(ping.status, 200) << ping.Describe();
}

// --- stdio --------------------------------------------------------------------

// `kiln mcp ARGS` fed `lines` then EOF; its stdout lines, parsed.
std::vector<json> Stdio(const std::vector<std::string>& args, const std::string& input,
                        ProcessResult* raw, const std::string& api_key = "") {
  std::vector<std::string> argv = {"mcp"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions o;
  o.stdin_data = input;
  o.timeout = 90s;
  if (!api_key.empty()) o.env = {{"KILN_API_KEY", api_key}};
  *raw = RunKiln(argv, o);
  std::vector<json> out;
  for (const auto& line : Lines(raw->out)) {
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "stdout carries something that is not JSON-RPC: " << line;
    out.push_back(j);
  }
  return out;
}

std::string StdioScript() {
  std::string s;
  s += R"({"jsonrpc":"2.0","id":1,"method":"server/discover"})"
       "\n";
  s += R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})"
       "\n";
  s += "this is not json\n";
  s += R"([{"jsonrpc":"2.0","id":3,"method":"ping"}])"
       "\n";
  s += kInit.dump() + "\n";
  s += R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
       "\n";
  s += R"({"jsonrpc":"2.0","id":4,"method":"no/such/method"})"
       "\n";
  s += std::string("\x01\x02\xff garbage \x7f", 14) + "\n";
  s +=
      R"J({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(7*6)"}}})J"
      "\n";
  return s;
}

void CheckStdioAnswers(const std::vector<json>& out, const ProcessResult& raw) {
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  auto by_id = [&](const json& id) {
    for (const auto& m : out) {
      if (m.contains("id") && m["id"] == id) return m;
    }
    return json();
  };
  auto code = [](const json& m) { return m.contains("error") ? m["error"].value("code", 0) : 0; };
  EXPECT_EQ(code(by_id(1)), -32601) << raw.out;  // before initialize
  EXPECT_EQ(code(by_id(2)), -32601) << raw.out;
  EXPECT_EQ(by_id(1)["error"]["message"].get<std::string>().find("initialize") != std::string::npos,
            true);
  int parse_errors = 0, invalid = 0;
  for (const auto& m : out) {
    if (m.contains("id") && m["id"].is_null()) {
      parse_errors += code(m) == -32700 ? 1 : 0;
      invalid += code(m) == -32600 ? 1 : 0;
    }
  }
  EXPECT_EQ(parse_errors, 2) << raw.out;  // the text and the garbage
  EXPECT_EQ(invalid, 1) << raw.out;       // the batch
  EXPECT_EQ(by_id(1 + 0)["jsonrpc"], "2.0");
  EXPECT_EQ(code(by_id(4)), -32601) << raw.out;
  const json call = by_id(5);
  EXPECT_EQ(call["result"]["isError"], false) << raw.out << raw.err;
  EXPECT_EQ(call["result"]["content"][0]["text"], "42") << raw.out;
}

TEST_F(McpProtocol, StdioLocalAnswersEveryMistakeAndExitsAtEof) {
  ProcessResult raw;
  const auto out = Stdio({}, StdioScript(), &raw);
  CheckStdioAnswers(out, raw);
}

TEST_F(McpProtocol, StdioProxyAnswersEveryMistakeAndExitsAtEof) {
  ProcessResult raw;
  const auto out = Stdio({"--url", "http://127.0.0.1:" + std::to_string(shared_->server.port())},
                         StdioScript(), &raw, key());
  CheckStdioAnswers(out, raw);
}

TEST_F(McpProtocol, StdioProxyWithAWrongKeySaysSoInTheToolResult) {
  ProcessResult raw;
  const std::string in =
      kInit.dump() + "\n" +
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"1"}}})"
      "\n";
  const auto out = Stdio({"--url", "http://127.0.0.1:" + std::to_string(shared_->server.port())},
                         in, &raw, "kiln_000000000000_wrong");
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  ASSERT_EQ(out.size(), 2u) << raw.out;
  EXPECT_EQ(out[1]["result"]["isError"], true);
  EXPECT_NE(out[1]["result"]["content"][0]["text"].get<std::string>().find("API key"),
            std::string::npos)
      << out[1].dump();
  // No key at all: a usage error before anything starts.
  const ProcessResult none =
      RunKiln({"mcp", "--url", "http://127.0.0.1:1", "--api-key-env", "KILN_TEST_NO_SUCH_VAR"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_TRUE(none.out.empty());
}

}  // namespace
}  // namespace kiln::testing
