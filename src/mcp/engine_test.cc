// The MCP engine against a scripted backend: JSON-RPC errors, the lifecycle,
// version negotiation, the tool list, argument errors, results, lost sessions,
// cancellation and progress.
#include "mcp/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "mcp/fake_backend_test.h"
#include "mcp/jsonrpc.h"

namespace kiln::mcp {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::FakeBackend;
using testing::FakeState;

// Collects what the engine emits, as a transport would.
class Client {
 public:
  explicit Client(EngineOptions options = {}) : state(std::make_shared<FakeState>()) {
    options.interrupt_grace = std::chrono::milliseconds(100);
    engine = std::make_unique<Engine>(std::make_unique<FakeBackend>(state), options);
  }

  Engine::Emit Emitter() {
    return [this](const json& message, bool final) {
      std::lock_guard<std::mutex> lock(m_);
      if (!message.is_null()) messages_.push_back(message);
      if (final) ++finals_;
      cv_.notify_all();
    };
  }
  Engine::Disposition Send(const json& message) { return engine->Handle(message, Emitter()); }
  Engine::Disposition SendText(const std::string& text) {
    return engine->HandleText(text, Emitter());
  }

  // The next message with `id` (a response), waiting up to `limit`; null when none came.
  json ResponseTo(const json& id, std::chrono::milliseconds limit = 5s) {
    std::unique_lock<std::mutex> lock(m_);
    json found;
    cv_.wait_for(lock, limit, [&] {
      for (auto it = messages_.begin(); it != messages_.end(); ++it) {
        if (it->contains("id") && (*it)["id"] == id && !it->contains("method")) {
          found = *it;
          messages_.erase(it);
          return true;
        }
      }
      return false;
    });
    return found;
  }
  json Call(const json& request) {
    Send(request);
    return ResponseTo(request.at("id"));
  }
  std::vector<json> Notifications(const std::string& method) {
    std::lock_guard<std::mutex> lock(m_);
    std::vector<json> out;
    for (const auto& m : messages_) {
      if (m.value("method", "") == method) out.push_back(m);
    }
    return out;
  }
  std::vector<json> All() {
    std::lock_guard<std::mutex> lock(m_);
    return {messages_.begin(), messages_.end()};
  }
  int finals() {
    std::lock_guard<std::mutex> lock(m_);
    return finals_;
  }
  bool WaitFinals(int n, std::chrono::milliseconds limit = 5s) {
    std::unique_lock<std::mutex> lock(m_);
    return cv_.wait_for(lock, limit, [&] { return finals_ >= n; });
  }

  json Initialize(const std::string& version = "2025-11-25") {
    json r = Call({{"jsonrpc", "2.0"},
                   {"id", 0},
                   {"method", "initialize"},
                   {"params",
                    {{"protocolVersion", version},
                     {"capabilities", json::object()},
                     {"clientInfo", {{"name", "test"}, {"version", "1"}}}}}});
    Send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
    return r;
  }
  json Tool(int id, const std::string& name, const json& args, const json& meta = nullptr) {
    json params = {{"name", name}, {"arguments", args}};
    if (!meta.is_null()) params["_meta"] = meta;
    return Call({{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"}, {"params", params}});
  }
  // When the backend has a cell blocked in Execute.
  bool WaitRunning() {
    std::unique_lock<std::mutex> lock(state->m);
    return state->cv.wait_for(lock, 5s, [&] { return state->running > 0; });
  }

  std::shared_ptr<FakeState> state;
  std::unique_ptr<Engine> engine;

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<json> messages_;
  int finals_ = 0;
};

int ErrorCode(const json& response) {
  if (!response.contains("error")) return 0;
  return response["error"].value("code", 0);
}

std::string Text(const json& response) {
  const json& content = response["result"]["content"];
  return content.is_array() && !content.empty() ? content[0].value("text", "") : "";
}

// --- JSON-RPC ---------------------------------------------------------------

// A result or listing from a server may hold members of any type; one of the
// wrong type is ignored, never thrown on (found by fuzz/mcp_engine_fuzzer.cc).
TEST(McpTools, OddlyTypedMembersAreIgnored) {
  const json r = RunPythonResult({{"status", "ok"},
                                  {"stdout", "hi"},
                                  {"stdout_truncated", 1},
                                  {"stderr_truncated", "yes"},
                                  {"session_state", 7}},
                                 "", true);
  EXPECT_EQ(r["isError"], false);
  EXPECT_EQ(Text({{"result", r}}), "hi");
  const json l = ListFilesResult({{"files", {{{"path", "d"}, {"directory", "yes"}}}}}, true);
  EXPECT_EQ(l["structuredContent"]["files"][0]["directory"], false);
}

TEST(McpEngine, MalformedJsonIsAParseErrorWithNullId) {
  Client c;
  for (const std::string& text : std::vector<std::string>{
           "{", "not json", "", "{\"jsonrpc\": \"2.0\", \"id\": 1,", "\xff\xfe",
           // nlohmann would stop reading at the NUL and answer the ping
           std::string("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}") + '\0' + "x"}) {
    EXPECT_EQ(c.SendText(text), Engine::Disposition::kReplied) << text;
    const json r = c.ResponseTo(nullptr, 1s);
    EXPECT_EQ(ErrorCode(r), jsonrpc::kParseError) << text << " -> " << r.dump();
  }
}

TEST(McpEngine, DeepNestingIsRefusedBeforeParsing) {
  Client c;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  c.SendText(deep);
  EXPECT_EQ(ErrorCode(c.ResponseTo(nullptr, 1s)), jsonrpc::kParseError);
  // Brackets inside strings do not count.
  c.Initialize();
  const std::string ok = R"({"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":")" +
                         std::string(1000, '[') + R"("}})";
  c.SendText(ok);
  EXPECT_EQ(c.ResponseTo(7)["result"], json::object());
}

TEST(McpEngine, InvalidRequests) {
  Client c;
  c.Initialize();
  struct Case {
    json message;
    json id;  // of the error response
    int code;
  };
  const std::vector<Case> cases = {
      {json::array({{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}}), nullptr,
       jsonrpc::kInvalidRequest},
      {json::array(), nullptr, jsonrpc::kInvalidRequest},
      {42, nullptr, jsonrpc::kInvalidRequest},
      {"ping", nullptr, jsonrpc::kInvalidRequest},
      {{{"id", 2}, {"method", "ping"}}, 2, jsonrpc::kInvalidRequest},  // no "jsonrpc"
      {{{"jsonrpc", "1.0"}, {"id", 3}, {"method", "ping"}},
       3,
       jsonrpc::kInvalidRequest},  // wrong version
      {{{"jsonrpc", "2.0"}, {"id", nullptr}, {"method", "ping"}},
       nullptr,
       jsonrpc::kInvalidRequest},
      {{{"jsonrpc", "2.0"}, {"id", true}, {"method", "ping"}}, nullptr, jsonrpc::kInvalidRequest},
      {{{"jsonrpc", "2.0"}, {"id", {{"a", 1}}}, {"method", "ping"}},
       nullptr,
       jsonrpc::kInvalidRequest},
      {{{"jsonrpc", "2.0"}, {"id", 4}, {"method", 5}}, 4, jsonrpc::kInvalidRequest},
      {{{"jsonrpc", "2.0"}, {"id", 5}, {"method", ""}}, 5, jsonrpc::kInvalidRequest},
      {{{"jsonrpc", "2.0"}, {"id", 6}}, 6, jsonrpc::kInvalidRequest},  // no method
      {{{"jsonrpc", "2.0"}, {"id", 7}, {"method", "ping"}, {"params", json::array()}},
       7,
       jsonrpc::kInvalidParams},
      {{{"jsonrpc", "2.0"}, {"id", "s"}, {"method", "ping"}, {"params", 3}},
       "s",
       jsonrpc::kInvalidParams},
  };
  for (const auto& k : cases) {
    EXPECT_EQ(c.Send(k.message), Engine::Disposition::kReplied) << k.message.dump();
    const json r = c.ResponseTo(k.id, 1s);
    EXPECT_EQ(ErrorCode(r), k.code) << k.message.dump() << " -> " << r.dump();
    EXPECT_EQ(r.value("jsonrpc", ""), "2.0");
  }
  // Notifications and client responses are never answered, even when wrong.
  EXPECT_EQ(c.Send({{"jsonrpc", "2.0"}, {"method", "notifications/whatever"}, {"params", 3}}),
            Engine::Disposition::kNoReply);
  EXPECT_EQ(c.Send({{"jsonrpc", "2.0"}, {"id", 99}, {"result", json::object()}}),
            Engine::Disposition::kNoReply);
  EXPECT_EQ(c.Send({{"jsonrpc", "2.0"},
                    {"method", "notifications/cancelled"},
                    {"params", {{"requestId", 12345}}}}),
            Engine::Disposition::kNoReply);
  EXPECT_TRUE(c.All().empty()) << c.All().size();
}

TEST(McpEngine, StringAndIntegerIdsAreEchoed) {
  Client c;
  c.Initialize();
  for (const json& id : {json("abc"), json(0), json(-7), json(int64_t{1} << 40)}) {
    const json r = c.Call({{"jsonrpc", "2.0"}, {"id", id}, {"method", "ping"}});
    EXPECT_EQ(r["id"], id);
    EXPECT_EQ(r["result"], json::object());
  }
}

// --- Lifecycle --------------------------------------------------------------

TEST(McpEngine, RequestsBeforeInitializeAreMethodNotFound) {
  Client c;
  for (const std::string method :
       {"server/discover", "tools/list", "tools/call", "resources/list"}) {
    const json r = c.Call({{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}});
    EXPECT_EQ(ErrorCode(r), jsonrpc::kMethodNotFound) << method << " -> " << r.dump();
  }
  // ping is allowed before initialize (the spec says so).
  EXPECT_EQ(c.Call({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "ping"}})["result"], json::object());
  EXPECT_FALSE(c.engine->initialized());
  // The client falls back to the handshake, which works.
  EXPECT_EQ(c.Initialize()["result"]["protocolVersion"], "2025-11-25");
  EXPECT_TRUE(c.engine->initialized());
}

TEST(McpEngine, VersionNegotiation) {
  for (const std::string v : {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}) {
    Client c;
    const json r = c.Initialize(v);
    EXPECT_EQ(r["result"]["protocolVersion"], v);
    EXPECT_EQ(c.engine->protocol_version(), v);
    EXPECT_TRUE(r["result"]["capabilities"].contains("tools"));
    EXPECT_EQ(r["result"]["serverInfo"]["name"], "kiln");
  }
  for (const std::string v : {"1999-01-01", "2026-01-01", "latest"}) {
    Client c;
    EXPECT_EQ(c.Initialize(v)["result"]["protocolVersion"], "2025-11-25") << v;
  }
}

TEST(McpEngine, InitializeNeedsAVersionAndHappensOnce) {
  Client c;
  json r =
      c.Call({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", json::object()}});
  EXPECT_EQ(ErrorCode(r), jsonrpc::kInvalidParams);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("protocolVersion"), std::string::npos);
  r = c.Call({{"jsonrpc", "2.0"},
              {"id", 2},
              {"method", "initialize"},
              {"params", {{"protocolVersion", 2025}}}});
  EXPECT_EQ(ErrorCode(r), jsonrpc::kInvalidParams);
  EXPECT_FALSE(c.engine->initialized());
  c.Initialize();
  r = c.Call({{"jsonrpc", "2.0"},
              {"id", 3},
              {"method", "initialize"},
              {"params", {{"protocolVersion", "2025-11-25"}}}});
  EXPECT_EQ(ErrorCode(r), jsonrpc::kInvalidRequest);
}

TEST(McpEngine, UnknownMethodsAfterInitialize) {
  Client c;
  c.Initialize();
  for (const std::string method :
       {"resources/list", "prompts/list", "logging/setLevel", "tools/run", "x"}) {
    EXPECT_EQ(ErrorCode(c.Call({{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}})),
              jsonrpc::kMethodNotFound)
        << method;
  }
}

// --- Tools ------------------------------------------------------------------

TEST(McpEngine, ToolsListHasSchemasAndDescriptions) {
  Client c;
  c.Initialize();
  const json r = c.Call({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}});
  const json& tools = r["result"]["tools"];
  ASSERT_TRUE(tools.is_array());
  std::set<std::string> names;
  for (const auto& t : tools) {
    names.insert(t["name"]);
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t.dump();
    EXPECT_FALSE(t["inputSchema"].contains("$schema"));  // 2020-12 is the default
    EXPECT_GT(t["description"].get<std::string>().size(), 40u);
    EXPECT_TRUE(t.contains("title"));
    EXPECT_TRUE(t["annotations"].is_object());
  }
  EXPECT_EQ(names, (std::set<std::string>{"run_python", "upload_file", "download_file",
                                          "list_files", "reset"}));
  const json& run = tools[0];
  EXPECT_EQ(run["name"], "run_python");
  EXPECT_EQ(run["inputSchema"]["required"], json::array({"code"}));
  EXPECT_EQ(run["inputSchema"]["additionalProperties"], false);
  EXPECT_EQ(run["outputSchema"]["type"], "object");
  const std::string d = run["description"];
  for (const char* word :
       {"numpy", "pandas", "matplotlib", "no network", "persist", "30 seconds", "512 MiB"}) {
    EXPECT_NE(d.find(word), std::string::npos) << word;
  }
  for (const auto& t : tools) {
    if (t["name"] != "reset") {
      EXPECT_EQ(t["outputSchema"]["type"], "object") << t["name"];
    }
  }
}

TEST(McpEngine, OlderClientsGetNoStructuredContent) {
  Client c;
  c.Initialize("2025-03-26");
  const json tools =
      c.Call({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}})["result"]["tools"];
  for (const auto& t : tools) {
    EXPECT_FALSE(t.contains("outputSchema"));
    EXPECT_FALSE(t.contains("title"));
    EXPECT_TRUE(t.contains("annotations"));
  }
  const json r = c.Tool(2, "run_python", {{"code", "hello"}});
  EXPECT_FALSE(r["result"].contains("structuredContent"));
  EXPECT_EQ(Text(r), "hello");
  Client old;
  old.Initialize("2024-11-05");
  const json old_tools =
      old.Call({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}})["result"]["tools"];
  for (const auto& t : old_tools) {
    EXPECT_FALSE(t.contains("annotations"));
  }
}

TEST(McpEngine, InvalidArgumentsAreToolErrorsNamingTheArgument) {
  Client c;
  c.Initialize();
  struct Case {
    std::string tool;
    json args;
    std::string named;
  };
  const std::vector<Case> cases = {
      {"run_python", json::object(), "code"},
      {"run_python", {{"code", 5}}, "code"},
      {"run_python", {{"code", ""}}, "code"},
      {"run_python", {{"code", "1"}, {"timeout", "ten"}}, "timeout"},
      {"run_python", {{"code", "1"}, {"timeout", -1}}, "timeout"},
      {"run_python", {{"code", "1"}, {"timeout", 0}}, "timeout"},
      {"run_python", {{"code", "1"}, {"tiemout", 3}}, "tiemout"},
      {"upload_file", {{"path", "a.txt"}}, "content_base64"},
      {"upload_file", {{"path", "a.txt"}, {"content_base64", "!!notbase64"}}, "content_base64"},
      {"upload_file", {{"content_base64", "aGk="}}, "path"},
      {"upload_file", {{"path", "../etc/passwd"}, {"content_base64", "aGk="}}, "path"},
      {"upload_file", {{"path", "/etc/passwd"}, {"content_base64", "aGk="}}, "path"},
      {"upload_file", {{"path", "a/../../b"}, {"content_base64", "aGk="}}, "path"},
      {"download_file", {{"path", 3}}, "path"},
      {"download_file", json::object(), "path"},
      {"list_files", {{"all", true}}, "all"},
      {"reset", {{"hard", true}}, "hard"},
  };
  int id = 10;
  for (const auto& k : cases) {
    const json r = c.Tool(id++, k.tool, k.args);
    ASSERT_TRUE(r.contains("result")) << r.dump();
    EXPECT_EQ(r["result"]["isError"], true) << k.args.dump();
    EXPECT_NE(Text(r).find(k.named + ":"), std::string::npos)
        << k.tool << " " << k.args.dump() << " -> " << Text(r);
  }
  // Nothing reached the backend.
  EXPECT_TRUE(c.state->created.empty());
  // Unknown tools and non-object arguments are protocol errors (the spec's "malformed requests").
  EXPECT_EQ(ErrorCode(c.Tool(1, "run_bash", {{"cmd", "ls"}})), jsonrpc::kInvalidParams);
  EXPECT_EQ(
      ErrorCode(c.Call({{"jsonrpc", "2.0"},
                        {"id", 2},
                        {"method", "tools/call"},
                        {"params", {{"name", "run_python"}, {"arguments", json::array({"x"})}}}})),
      jsonrpc::kInvalidParams);
  EXPECT_EQ(
      ErrorCode(c.Call(
          {{"jsonrpc", "2.0"}, {"id", 3}, {"method", "tools/call"}, {"params", json::object()}})),
      jsonrpc::kInvalidParams);
  // A timeout the profile refuses is named too (the backend's message).
  const json t = c.Tool(4, "run_python", {{"code", "bad timeout"}, {"timeout", 900}});
  EXPECT_EQ(t["result"]["isError"], true);
  EXPECT_NE(Text(t).find("timeout:"), std::string::npos) << Text(t);
}

TEST(McpEngine, RunPythonKeepsOneSessionAcrossCalls) {
  Client c;
  c.Initialize();
  const json a = c.Tool(1, "run_python", {{"code", "x = 1"}, {"timeout", 5}});
  const json b = c.Tool(2, "run_python", {{"code", "print(x)"}});
  EXPECT_EQ(a["result"]["isError"], false);
  EXPECT_EQ(Text(b), "print(x)");
  ASSERT_EQ(c.state->executed.size(), 2u);
  EXPECT_EQ(c.state->executed[0].first, c.state->executed[1].first);
  EXPECT_EQ(c.state->created.size(), 1u);
  const json& s = b["result"]["structuredContent"];
  EXPECT_EQ(s["status"], "ok");
  EXPECT_EQ(s["stdout"], "print(x)\n");
  EXPECT_EQ(s["session_state"], "kept");
  EXPECT_TRUE(s["outputs"].is_array());
  // The engine shuts the kiln session down with the MCP session.
  const std::string session = c.engine->kiln_session();
  c.engine->Shutdown();
  EXPECT_EQ(c.state->deleted, std::vector<std::string>{session});
}

TEST(McpEngine, ExceptionsAreErrorsWithATraceback) {
  Client c;
  c.Initialize();
  const json r = c.Tool(1, "run_python", {{"code", "raise"}});
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_NE(Text(r).find("ZeroDivisionError: division by zero"), std::string::npos) << Text(r);
  EXPECT_NE(Text(r).find("Traceback (most recent call last):\n  File"), std::string::npos)
      << Text(r);
  EXPECT_EQ(r["result"]["structuredContent"]["error"]["name"], "ZeroDivisionError");
  // A backend refusal is an error too, never a crash.
  const json busy = c.Tool(2, "run_python", {{"code", "busy"}});
  EXPECT_EQ(busy["result"]["isError"], true);
  EXPECT_NE(Text(busy).find("busy"), std::string::npos);
}

TEST(McpEngine, PlotsAreImageBlocks) {
  Client c;
  c.Initialize();
  const json r = c.Tool(1, "run_python", {{"code", "plot"}});
  const json& content = r["result"]["content"];
  ASSERT_EQ(content.size(), 2u) << r.dump();
  EXPECT_EQ(content[1]["type"], "image");
  EXPECT_EQ(content[1]["mimeType"], "image/png");
  EXPECT_EQ(content[1]["data"], "iVBORw0KGgo=");
  EXPECT_EQ(r["result"]["isError"], false);
  // Not repeated in the structured result.
  const json& out = r["result"]["structuredContent"]["outputs"][0];
  EXPECT_FALSE(out["data"].contains("image/png"));
  EXPECT_EQ(out["data"]["text/plain"], "<Figure>");
  EXPECT_EQ(r["result"]["structuredContent"]["images"], 1);
}

TEST(McpEngine, LostSessionsAreReplacedAndSaidSo) {
  Client c;
  c.Initialize();
  // The cell killed the interpreter: this result says the state is lost ...
  const json r = c.Tool(1, "run_python", {{"code", "lost"}});
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_NE(Text(r).find("state (variables, imports, /workspace files) is lost"), std::string::npos)
      << Text(r);
  EXPECT_NE(Text(r).find("ran out of memory"), std::string::npos) << Text(r);
  // ... and the next call runs in a fresh session.
  c.Tool(2, "run_python", {{"code", "y = 2"}});
  ASSERT_EQ(c.state->created.size(), 2u);
  EXPECT_EQ(c.state->executed.back().first, c.state->created[1]);
  // A session that disappeared between calls (reaped): replaced, and the text says so.
  {
    std::lock_guard<std::mutex> lock(c.state->m);
    c.state->live.clear();
  }
  const json again = c.Tool(3, "run_python", {{"code", "z = 3"}});
  EXPECT_EQ(again["result"]["isError"], false);
  EXPECT_NE(Text(again).find("previous interpreter was lost"), std::string::npos) << Text(again);
  EXPECT_EQ(c.state->created.size(), 3u);
  EXPECT_EQ(c.state->executed.back().first, c.state->created[2]);
}

TEST(McpEngine, FilesAndReset) {
  Client c;
  c.Initialize();
  // Nothing yet: no session is started for a listing.
  json r = c.Tool(1, "list_files", json::object());
  EXPECT_EQ(Text(r), "/workspace is empty.");
  EXPECT_TRUE(c.state->created.empty());
  r = c.Tool(2, "upload_file",
             {{"path", "/workspace/data/a.csv"}, {"content_base64", "YSxiCjEsMgo="}});
  EXPECT_EQ(r["result"]["isError"], false) << r.dump();
  EXPECT_EQ(r["result"]["structuredContent"], json({{"path", "data/a.csv"}, {"size", 8}}));
  r = c.Tool(3, "download_file", {{"path", "data/a.csv"}});
  EXPECT_EQ(Text(r), "a,b\n1,2\n");
  EXPECT_EQ(r["result"]["structuredContent"]["encoding"], "utf-8");
  r = c.Tool(4, "list_files", json::object());
  EXPECT_EQ(r["result"]["structuredContent"]["files"][0]["path"], "data/a.csv");
  EXPECT_NE(Text(r).find("data/a.csv  8 bytes"), std::string::npos);
  r = c.Tool(5, "download_file", {{"path", "nope.txt"}});
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_NE(Text(r).find("path: no such file"), std::string::npos) << Text(r);
  // Binary and image files.
  c.Tool(6, "upload_file", {{"path", "b.bin"}, {"content_base64", "AAEC"}});
  r = c.Tool(7, "download_file", {{"path", "b.bin"}});
  EXPECT_EQ(r["result"]["structuredContent"]["encoding"], "base64");
  EXPECT_EQ(r["result"]["structuredContent"]["content"], "AAEC");
  c.Tool(8, "upload_file", {{"path", "p.png"}, {"content_base64", "iVBORw0KGgoAAAA="}});
  r = c.Tool(9, "download_file", {{"path", "p.png"}});
  EXPECT_EQ(r["result"]["content"][1]["type"], "image");
  r = c.Tool(10, "upload_file", {{"path", "too/big"}, {"content_base64", "AAEC"}});
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_NE(Text(r).find("too big"), std::string::npos);
  // reset: the old session deleted, a new one ready, no files.
  const std::string old = c.engine->kiln_session();
  r = c.Tool(11, "reset", json::object());
  EXPECT_EQ(r["result"]["isError"], false);
  EXPECT_FALSE(r["result"].contains("structuredContent"));
  EXPECT_EQ(c.state->deleted, std::vector<std::string>{old});
  EXPECT_NE(c.engine->kiln_session(), old);
  EXPECT_FALSE(c.engine->kiln_session().empty());
  r = c.Tool(12, "list_files", json::object());
  EXPECT_EQ(r["result"]["structuredContent"]["files"], json::array());
}

TEST(McpEngine, FilesOfALostSessionSaySo) {
  Client c;
  c.Initialize();
  c.Tool(1, "upload_file", {{"path", "a"}, {"content_base64", "AAEC"}});
  {
    std::lock_guard<std::mutex> lock(c.state->m);
    c.state->live.clear();
  }
  json r = c.Tool(2, "download_file", {{"path", "a"}});
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_NE(Text(r).find("interpreter was lost"), std::string::npos) << Text(r);
  EXPECT_TRUE(c.engine->kiln_session().empty());
}

// --- Cancellation and progress ---------------------------------------------

TEST(McpEngine, CancellationInterruptsTheCellAndSendsNoResponse) {
  Client c;
  c.Initialize();
  c.Send({{"jsonrpc", "2.0"},
          {"id", "long"},
          {"method", "tools/call"},
          {"params", {{"name", "run_python"}, {"arguments", {{"code", "block"}}}}}});
  ASSERT_TRUE(c.WaitRunning());
  const int finals = c.finals();
  // The reader still answers while the cell runs.
  EXPECT_EQ(c.Call({{"jsonrpc", "2.0"}, {"id", 5}, {"method", "ping"}})["result"], json::object());
  EXPECT_EQ(c.engine->in_flight(), 1u);
  c.Send({{"jsonrpc", "2.0"},
          {"method", "notifications/cancelled"},
          {"params", {{"requestId", "long"}, {"reason", "user"}}}});
  ASSERT_TRUE(c.WaitFinals(finals + 2));  // the ping's, then the cancelled call's
  EXPECT_TRUE(c.ResponseTo("long", 300ms).is_null());
  EXPECT_EQ(c.state->interrupted.size(), 1u);
  EXPECT_EQ(c.engine->in_flight(), 0u);
  // The session survives an interrupt.
  const json r = c.Tool(6, "run_python", {{"code", "after"}});
  EXPECT_EQ(Text(r), "after");
  EXPECT_EQ(c.state->created.size(), 1u);
}

TEST(McpEngine, ACellThatIgnoresInterruptsHasItsInterpreterKilled) {
  Client c;
  c.Initialize();
  c.Send({{"jsonrpc", "2.0"},
          {"id", 1},
          {"method", "tools/call"},
          {"params", {{"name", "run_python"}, {"arguments", {{"code", "stubborn"}}}}}});
  ASSERT_TRUE(c.WaitRunning());
  const std::string session = c.engine->kiln_session();
  c.Send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 1}}}});
  ASSERT_TRUE(c.WaitFinals(2));
  EXPECT_EQ(c.state->interrupted.size(), 2u);
  EXPECT_EQ(c.state->deleted.front(), session);
  EXPECT_TRUE(c.engine->kiln_session().empty());
  // Next call: a fresh interpreter, and its text says the state was lost.
  const json r = c.Tool(2, "run_python", {{"code", "fresh"}});
  EXPECT_NE(
      Text(r).find("previous interpreter was lost (the cancelled cell ignored two interrupts"),
      std::string::npos)
      << Text(r);
  EXPECT_NE(Text(r).find("fresh"), std::string::npos);
  EXPECT_EQ(c.state->created.size(), 2u);
  // Only once.
  EXPECT_EQ(Text(c.Tool(3, "run_python", {{"code", "again"}})), "again");
}

TEST(McpEngine, CancellingAWaitingCallNeverRunsIt) {
  Client c;
  c.Initialize();
  c.Send({{"jsonrpc", "2.0"},
          {"id", 1},
          {"method", "tools/call"},
          {"params", {{"name", "run_python"}, {"arguments", {{"code", "block"}}}}}});
  ASSERT_TRUE(c.WaitRunning());
  c.Send({{"jsonrpc", "2.0"},
          {"id", 2},
          {"method", "tools/call"},
          {"params", {{"name", "run_python"}, {"arguments", {{"code", "queued"}}}}}});
  c.Send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 2}}}});
  ASSERT_TRUE(c.WaitFinals(2));  // initialize's, the queued call's
  c.Send(
      {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 1}}}});
  ASSERT_TRUE(c.WaitFinals(3));
  for (const auto& [s, code] : c.state->executed) EXPECT_NE(code, "queued");
}

TEST(McpEngine, ToolCallsTakeTurnsInArrivalOrder) {
  Client c;
  c.Initialize();
  c.Send({{"jsonrpc", "2.0"},
          {"id", 1},
          {"method", "tools/call"},
          {"params", {{"name", "run_python"}, {"arguments", {{"code", "block"}}}}}});
  ASSERT_TRUE(c.WaitRunning());
  for (int id = 2; id <= 9; ++id) {
    const json call =
        id % 3 == 0 ? json{{"name", "list_files"}, {"arguments", json::object()}}
                    : json{{"name", "run_python"}, {"arguments", {{"code", std::to_string(id)}}}};
    c.Send({{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"}, {"params", call}});
    std::this_thread::sleep_for(5ms);  // the workers are waiting in line
  }
  {
    std::lock_guard<std::mutex> lock(c.state->m);
    c.state->interrupt_flag = true;
    c.state->cv.notify_all();
  }
  ASSERT_TRUE(c.WaitFinals(10));
  std::vector<int> order;
  for (const auto& m : c.All()) {
    if (m.contains("id") && m["id"].is_number() && m["id"] != 0) order.push_back(m["id"]);
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(McpEngine, DuplicateIdInFlightIsRefused) {
  Client c;
  c.Initialize();
  c.Send({{"jsonrpc", "2.0"},
          {"id", 1},
          {"method", "tools/call"},
          {"params", {{"name", "run_python"}, {"arguments", {{"code", "block"}}}}}});
  ASSERT_TRUE(c.WaitRunning());
  const json dup = c.Call({{"jsonrpc", "2.0"},
                           {"id", 1},
                           {"method", "tools/call"},
                           {"params", {{"name", "list_files"}, {"arguments", json::object()}}}});
  EXPECT_EQ(ErrorCode(dup), jsonrpc::kInvalidRequest) << dup.dump();
  c.engine->Shutdown();  // stops the blocked cell
  EXPECT_EQ(c.engine->in_flight(), 0u);
}

TEST(McpEngine, ProgressNotificationsCarryTheTokenAndIncrease) {
  EngineOptions o;
  o.progress_interval = std::chrono::milliseconds(50);
  o.heartbeat = std::chrono::milliseconds(100000);
  Client c(o);
  c.Initialize();
  const json r = c.Tool(1, "run_python", {{"code", "stream"}}, {{"progressToken", "tok-1"}});
  EXPECT_EQ(r["result"]["isError"], false);
  const auto progress = c.Notifications("notifications/progress");
  ASSERT_GE(progress.size(), 2u);
  double last = 0;
  for (const auto& p : progress) {
    EXPECT_EQ(p["params"]["progressToken"], "tok-1");
    const double v = p["params"]["progress"];
    EXPECT_GT(v, last);
    last = v;
    EXPECT_NE(p["params"]["message"].get<std::string>().find("line "), std::string::npos);
  }
  // Without a token: none.
  Client quiet(o);
  quiet.Initialize();
  quiet.Tool(1, "run_python", {{"code", "stream"}});
  EXPECT_TRUE(quiet.Notifications("notifications/progress").empty());
}

TEST(McpEngine, ProgressHeartbeatWhileACellIsSilent) {
  EngineOptions o;
  o.heartbeat = std::chrono::milliseconds(100);
  Client c(o);
  c.Initialize();
  c.Send({{"jsonrpc", "2.0"},
          {"id", 1},
          {"method", "tools/call"},
          {"params",
           {{"name", "run_python"},
            {"arguments", {{"code", "block"}}},
            {"_meta", {{"progressToken", 7}}}}}});
  ASSERT_TRUE(c.WaitRunning());
  // Two beats, 100 ms apart, waited for (a busy host may take longer than
  // 200 ms to run the heartbeat thread twice); the bound is for a broken one.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (c.Notifications("notifications/progress").size() < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  const auto beats = c.Notifications("notifications/progress");
  EXPECT_GE(beats.size(), 2u);
  for (const auto& b : beats) EXPECT_EQ(b["params"]["progressToken"], 7);
  {
    std::lock_guard<std::mutex> lock(c.state->m);
    c.state->interrupt_flag = true;  // the cell ends by itself
    c.state->cv.notify_all();
  }
  const json r = c.ResponseTo(1);
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_NE(Text(r).find("KeyboardInterrupt"), std::string::npos) << Text(r);
}

}  // namespace
}  // namespace kiln::mcp
