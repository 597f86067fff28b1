// A scripted kiln::mcp::Backend for the engine's and the transports' unit
// tests: sessions are ids in a set; Execute answers from `script` (by code),
// can stream events, block until interrupted (or forever, until its session
// is deleted), and records every call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mcp/backend.h"

namespace kiln::mcp::testing {

struct FakeState {
  std::mutex m;
  std::condition_variable cv;
  int next_id = 1;
  std::set<std::string> live;
  std::vector<std::string> created, deleted, interrupted;
  std::vector<std::pair<std::string, std::string>> executed;        // (session, code)
  std::map<std::string, std::map<std::string, std::string>> files;  // session -> path -> bytes
  int running = 0;
  bool interrupt_flag = false;
  std::optional<double> last_timeout;
};

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(std::shared_ptr<FakeState> state) : s_(std::move(state)) {}

  Result<std::string> CreateSession() override {
    std::lock_guard<std::mutex> lock(s_->m);
    const std::string id = "s" + std::to_string(s_->next_id++);
    s_->live.insert(id);
    s_->created.push_back(id);
    return id;
  }
  Status DeleteSession(const std::string& session) override {
    std::lock_guard<std::mutex> lock(s_->m);
    s_->deleted.push_back(session);
    s_->cv.notify_all();
    if (s_->live.erase(session) == 0) return MakeError(Code::kNotFound, "no session " + session);
    return OkStatus();
  }
  // Codes: "raise" -> an exception; "plot" -> a PNG; "stream" -> three stdout
  // events 150 ms apart; "block" -> waits for an interrupt; "stubborn" -> waits
  // until the session is deleted; "lost" -> session_state lost; "busy" ->
  // kAborted; "timeout=" -> echoes the timeout; else prints the code.
  Result<nlohmann::json> Execute(
      const std::string& session, const std::string& code, std::optional<double> timeout_s,
      const std::function<void(const nlohmann::json&)>& on_event) override {
    std::unique_lock<std::mutex> lock(s_->m);
    if (s_->live.count(session) == 0)
      return MakeError(Code::kNotFound, "session " + session + " is gone");
    s_->executed.emplace_back(session, code);
    s_->last_timeout = timeout_s;
    nlohmann::json r = {{"status", "ok"},
                        {"stdout", ""},
                        {"stderr", ""},
                        {"outputs", nlohmann::json::array()},
                        {"error", nullptr},
                        {"execution_count", 1},
                        {"session_state", "kept"},
                        {"session_id", session}};
    if (code == "raise") {
      nlohmann::json tb = {
          "Traceback (most recent call last):", "  File \"<cell>\", line 1, in <module>",
          "ZeroDivisionError: division by zero"};
      r["status"] = "error";
      r["exit_code"] = 1;
      r["error"] = {
          {"name", "ZeroDivisionError"}, {"value", "division by zero"}, {"traceback", tb}};
      r["outputs"].push_back({{"output_type", "error"},
                              {"ename", "ZeroDivisionError"},
                              {"evalue", "division by zero"},
                              {"traceback", tb}});
    } else if (code == "plot") {
      r["outputs"].push_back({{"output_type", "display_data"},
                              {"data", {{"image/png", "iVBORw0KGgo="}, {"text/plain", "<Figure>"}}},
                              {"metadata", nlohmann::json::object()}});
    } else if (code == "stream") {
      for (int i = 0; i < 3; ++i) {
        lock.unlock();
        if (on_event)
          on_event({{"event", "stdout"}, {"data", {{"text", "line " + std::to_string(i) + "\n"}}}});
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        lock.lock();
      }
      r["stdout"] = "line 0\nline 1\nline 2\n";
    } else if (code == "block" || code == "stubborn") {
      ++s_->running;
      s_->interrupt_flag = false;
      s_->cv.notify_all();
      const bool stubborn = code == "stubborn";
      s_->cv.wait_for(lock, std::chrono::seconds(20), [&] {
        return (!stubborn && s_->interrupt_flag) || s_->live.count(session) == 0;
      });
      --s_->running;
      if (s_->live.count(session) == 0)
        return MakeError(Code::kNotFound, "session " + session + " was deleted");
      r["status"] = "error";
      r["error"] = {
          {"name", "KeyboardInterrupt"}, {"value", ""}, {"traceback", nlohmann::json::array()}};
    } else if (code == "lost") {
      r["status"] = "memory_limit";
      r["session_state"] = "lost";
      s_->live.erase(session);
    } else if (code == "busy") {
      return MakeError(Code::kAborted, "session_busy");
    } else if (code == "bad timeout") {
      return MakeError(Code::kInvalidArgument,
                       "timeout: 900 s is over the profile's maximum of 300 s");
    } else {
      r["stdout"] = code + "\n";
      r["outputs"].push_back(
          {{"output_type", "stream"}, {"name", "stdout"}, {"text", code + "\n"}});
    }
    return r;
  }
  Status Interrupt(const std::string& session) override {
    std::lock_guard<std::mutex> lock(s_->m);
    s_->interrupted.push_back(session);
    s_->interrupt_flag = true;
    s_->cv.notify_all();
    return OkStatus();
  }
  Status PutFile(const std::string& session, const std::string& path,
                 const std::string& bytes) override {
    std::lock_guard<std::mutex> lock(s_->m);
    if (s_->live.count(session) == 0) return MakeError(Code::kNotFound, "session gone");
    if (path == "too/big") return MakeError(Code::kResourceExhausted, "over the workspace");
    s_->files[session][path] = bytes;
    return OkStatus();
  }
  Result<std::string> GetFile(const std::string& session, const std::string& path) override {
    std::lock_guard<std::mutex> lock(s_->m);
    if (s_->live.count(session) == 0) return MakeError(Code::kNotFound, "session gone");
    auto it = s_->files[session].find(path);
    if (it == s_->files[session].end()) return MakeError(Code::kNotFound, "no file " + path);
    return it->second;
  }
  Result<nlohmann::json> ListFiles(const std::string& session) override {
    std::lock_guard<std::mutex> lock(s_->m);
    if (s_->live.count(session) == 0) return MakeError(Code::kNotFound, "session gone");
    nlohmann::json files = nlohmann::json::array();
    for (const auto& [p, b] : s_->files[session])
      files.push_back({{"path", p}, {"size", b.size()}, {"directory", false}});
    return nlohmann::json{{"files", files}};
  }

 private:
  std::shared_ptr<FakeState> s_;
};

}  // namespace kiln::mcp::testing
