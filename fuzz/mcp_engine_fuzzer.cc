// The MCP engine (src/mcp/engine.h, src/mcp/jsonrpc.h, src/mcp/tools.h): one
// MCP session's JSON-RPC messages from a client (a line of stdio or an HTTP
// body each), through HandleText, over a scripted kiln backend (as
// src/mcp/engine_test.cc drives it, but deterministic and without sleeps).
//
// Input: byte 0 picks the client's pace (bit 0: each message waits for the
// answer of the one before, as a simple client does; else they are
// pipelined, so cancellations meet calls in flight); the rest is messages,
// one per line. The backend's answers come from the messages too: a cell whose
// code is a JSON object is returned as the cell's result (a result of any
// shape, as a newer or broken `kiln serve` could send to HttpBackend), a file
// named ".listing" as the listing; other codes are printed, and a few words
// make it fail ("lost", "gone", "busy", "bad", "fail").
//
// Checked after Shutdown(): every message answered gets exactly one final
// emit and a notification or a client response none; every message sent is
// JSON-RPC 2.0 that serializes to one line and parses back; a response carries
// the request's id and exactly one of result and error (an integer code and a
// message); a tool result has content blocks and isError; progress
// notifications come only before their call's final message.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/log.h"
#include "fuzz_util.h"
#include "mcp/engine.h"
#include "mcp/jsonrpc.h"

namespace {

using kiln::Code;
using kiln::MakeError;
using kiln::OkStatus;
using kiln::Result;
using kiln::Status;
using nlohmann::json;

class ScriptedBackend final : public kiln::mcp::Backend {
 public:
  Result<std::string> CreateSession() override {
    std::lock_guard<std::mutex> lock(m_);
    const std::string id = "s" + std::to_string(next_++);
    live_.insert(id);
    return id;
  }
  Status DeleteSession(const std::string& session) override {
    std::lock_guard<std::mutex> lock(m_);
    files_.erase(session);
    if (live_.erase(session) == 0) return MakeError(Code::kNotFound, "no session " + session);
    return OkStatus();
  }
  Result<json> Execute(const std::string& session, const std::string& code, std::optional<double>,
                       const std::function<void(const json&)>& on_event) override {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (live_.count(session) == 0)
        return MakeError(Code::kNotFound, "session " + session + " is gone");
      if (code == "gone") {
        live_.erase(session);
        return MakeError(Code::kNotFound, "session " + session + " was reaped");
      }
    }
    if (on_event) {
      on_event({{"event", "stdout"}, {"data", {{"text", code}}}});
      on_event({{"event", "stderr"}, {"data", {{"text", code}}}});
      on_event({{"event", "display"}, {"data", json::object()}});
      on_event({{"event", "error"}, {"data", nullptr}});
      on_event(code);
    }
    if (code == "busy") return MakeError(Code::kAborted, "session_busy");
    if (code == "bad") return MakeError(Code::kInvalidArgument, "timeout: over the maximum");
    if (code == "fail") return MakeError(Code::kInternal, "the supervisor died");
    if (!code.empty() && code.front() == '{') {
      if (auto j = kiln::mcp::jsonrpc::Parse(code); j && j->is_object()) return *j;
    }
    json r = {{"status", "ok"},           {"stdout", code + "\n"}, {"stderr", ""},
              {"outputs", json::array()}, {"error", nullptr},      {"execution_count", 1},
              {"session_state", "kept"},  {"session_id", session}};
    if (code == "lost") {
      r["status"] = "memory_limit";
      r["session_state"] = "lost";
      std::lock_guard<std::mutex> lock(m_);
      live_.erase(session);
    }
    return r;
  }
  Status Interrupt(const std::string&) override { return OkStatus(); }
  Status PutFile(const std::string& session, const std::string& path,
                 const std::string& bytes) override {
    std::lock_guard<std::mutex> lock(m_);
    if (live_.count(session) == 0) return MakeError(Code::kNotFound, "session gone");
    if (path == "full") return MakeError(Code::kResourceExhausted, "over the workspace");
    if (path == "bad") return MakeError(Code::kInvalidArgument, "path: refused");
    files_[session][path] = bytes;
    return OkStatus();
  }
  Result<std::string> GetFile(const std::string& session, const std::string& path) override {
    std::lock_guard<std::mutex> lock(m_);
    if (live_.count(session) == 0) return MakeError(Code::kNotFound, "session gone");
    auto it = files_[session].find(path);
    if (it == files_[session].end()) return MakeError(Code::kNotFound, "no file " + path);
    return it->second;
  }
  Result<json> ListFiles(const std::string& session) override {
    std::lock_guard<std::mutex> lock(m_);
    if (live_.count(session) == 0) return MakeError(Code::kNotFound, "session gone");
    auto& files = files_[session];
    if (auto it = files.find(".listing"); it != files.end()) {
      if (auto j = kiln::mcp::jsonrpc::Parse(it->second)) return *j;
    }
    json list = json::array();
    for (const auto& [p, b] : files)
      list.push_back({{"path", p}, {"size", b.size()}, {"directory", false}});
    return json{{"files", list}};
  }

 private:
  std::mutex m_;
  int next_ = 1;
  std::set<std::string> live_;
  std::map<std::string, std::map<std::string, std::string>> files_;
};

// What the engine emitted for one incoming message.
struct Exchange {
  std::vector<json> messages;
  int finals = 0;
  bool final_seen = false;
  bool progress_after_final = false;
};

class Client final {
 public:
  kiln::mcp::Engine::Emit EmitterFor(size_t index) {
    return [this, index](const json& message, bool final) {
      std::lock_guard<std::mutex> lock(m_);
      Exchange& x = exchanges_[index];
      if (!message.is_null()) {
        if (!final && x.final_seen) x.progress_after_final = true;
        x.messages.push_back(message);
      }
      if (final) {
        ++x.finals;
        x.final_seen = true;
      }
      cv_.notify_all();
    };
  }
  void WaitFinal(size_t index) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return exchanges_[index].finals > 0; });
  }
  std::map<size_t, Exchange>& exchanges() { return exchanges_; }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::map<size_t, Exchange> exchanges_;
};

void CheckMessage(const json& m, bool is_final, const json& request_id) {
  FUZZ_CHECK(m.is_object() && m.value("jsonrpc", "") == "2.0");
  const std::string line = kiln::mcp::jsonrpc::Serialize(m);
  FUZZ_CHECK(line.find('\n') == std::string::npos);
  FUZZ_CHECK(kiln::mcp::jsonrpc::Parse(line).has_value());
  if (!is_final) {
    FUZZ_CHECK(m.value("method", "") == "notifications/progress");
    FUZZ_CHECK(m.contains("params") && m["params"].contains("progressToken"));
    return;
  }
  FUZZ_CHECK(m.contains("id") &&
             (m["id"].is_null() || m["id"].is_string() || m["id"].is_number_integer()));
  if (!request_id.is_null()) FUZZ_CHECK(m["id"] == request_id);
  FUZZ_CHECK(m.contains("result") != m.contains("error"));
  if (m.contains("error")) {
    const json& e = m["error"];
    FUZZ_CHECK(e.is_object() && e.contains("code") && e["code"].is_number_integer() &&
               e.contains("message") && e["message"].is_string());
    return;
  }
  const json& r = m["result"];
  FUZZ_CHECK(r.is_object());
  if (r.contains("content")) {  // a tool result
    FUZZ_CHECK(r["content"].is_array() && !r["content"].empty());
    for (const auto& block : r["content"]) FUZZ_CHECK(block.is_object() && block.contains("type"));
    FUZZ_CHECK(r.contains("isError") && r["isError"].is_boolean());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::log::Init("off");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  std::string_view rest = input.text();
  const uint8_t mode = kiln::fuzz::TakeByte(&rest);
  const bool lockstep = (mode & 1) != 0;

  kiln::mcp::EngineOptions options;
  options.progress_interval = std::chrono::milliseconds(0);
  options.heartbeat = std::chrono::milliseconds(0);
  options.interrupt_grace = std::chrono::milliseconds(0);
  options.max_in_flight = 4;
  Client client;
  std::vector<std::pair<kiln::mcp::Engine::Disposition, json>> sent;  // disposition, request id
  {
    kiln::mcp::Engine engine(std::make_unique<ScriptedBackend>(), options);
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
      const size_t index = sent.size();
      json id;
      if (auto parsed = kiln::mcp::jsonrpc::Parse(line)) {
        // A raw NUL is never JSON text (RFC 8259); nlohmann stops reading at one.
        FUZZ_CHECK(line.find('\0') == std::string_view::npos);
        const auto m = kiln::mcp::jsonrpc::Classify(*parsed);
        if (m.kind == kiln::mcp::jsonrpc::Kind::kRequest) id = m.id;
      }
      const auto d = engine.HandleText(line, client.EmitterFor(index));
      sent.emplace_back(d, id);
      if (lockstep && d == kiln::mcp::Engine::Disposition::kPending) client.WaitFinal(index);
    }
    engine.Shutdown();
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    const auto [disposition, id] = sent[i];
    const Exchange& x = client.exchanges()[i];
    FUZZ_CHECK(x.finals == (disposition == kiln::mcp::Engine::Disposition::kNoReply ? 0 : 1));
    FUZZ_CHECK(!x.progress_after_final);
    for (size_t k = 0; k < x.messages.size(); ++k) {
      const bool is_final = k + 1 == x.messages.size() && x.messages[k].contains("id");
      CheckMessage(x.messages[k], is_final, id);
    }
  }
  return 0;
}
