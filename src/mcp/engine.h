// The MCP protocol engine of one MCP session, independent of its transport
// (stdio: src/mcp/stdio.h; Streamable HTTP: src/mcp/http_transport.h).
//
// It speaks JSON-RPC 2.0 (src/mcp/jsonrpc.h): the lifecycle (initialize with
// version negotiation, notifications/initialized), ping, tools/list and
// tools/call for kiln's tools (src/mcp/tools.h), notifications/cancelled (the
// running cell is interrupted; a cell that ignores two interrupts has its
// interpreter killed) and notifications/progress while a cell runs, when the
// client sent a progressToken (at most one per progress_interval while output
// arrives, and a heartbeat at least every `heartbeat`).
//
// Threads: Handle() is called by the transport's reader and answers
// everything but tools/call at once. A tools/call runs on a worker thread of
// its own, so the reader keeps receiving pings and cancellations while a cell
// runs; its messages go to the `emit` it came with, from that thread. Tool
// calls of one session take turns on its kiln session: one at a time, in the
// order they arrived, each cancellable while it waits.
//
// The MCP session owns one kiln session (docs/adr/0010): created by the first
// tool call that needs it, replaced when it is lost (the next run_python says
// so in its text), deleted and created again by `reset`, and deleted by
// Shutdown().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mcp/backend.h"
#include "mcp/tools.h"

namespace kiln::mcp {

struct EngineOptions {
  std::string server_version = "0.1.0";
  std::string limits_text;  // what the tool descriptions say of limits; empty: DefaultLimitsText()
  size_t max_in_flight = 16;  // tool calls at once; more are refused with isError
  std::chrono::milliseconds progress_interval{500};
  std::chrono::milliseconds heartbeat{5000};
  // After a cancellation's interrupt: a second interrupt after one grace, the
  // interpreter killed (state lost) after two.
  std::chrono::milliseconds interrupt_grace{2000};
};

class Engine final {
 public:
  // The messages to the client that belong to one incoming request: progress
  // notifications (final false), then its response (final true). A request the
  // client cancelled ends with a null `message` and final true: MCP sends no
  // response to it. Called from the thread that called Handle() or from a
  // worker thread, never after Shutdown() has returned.
  using Emit = std::function<void(const nlohmann::json& message, bool final)>;

  enum class Disposition {
    kNoReply,  // a notification or a client's response: nothing is sent back
    kReplied,  // `emit` got the final message before Handle() returned
    kPending,  // a worker thread will call `emit` with the final message
  };

  Engine(std::unique_ptr<Backend> backend, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One message's text (a line of stdio, an HTTP body): unparsable text is
  // answered with a Parse error (-32700) and a null id.
  Disposition HandleText(std::string_view text, const Emit& emit);
  Disposition Handle(const nlohmann::json& message, const Emit& emit);

  // Cancels every call in flight (their cells are stopped), waits for their
  // threads and deletes the kiln session. Idempotent; later messages are
  // answered with an error.
  void Shutdown();

  bool initialized() const;
  std::string protocol_version() const;  // the negotiated one; empty before initialize
  size_t in_flight() const;
  std::chrono::steady_clock::time_point last_active() const;
  std::string kiln_session() const;  // empty when there is none

 private:
  struct Call;
  struct RunState;
  // A tools/call whose arguments passed validation.
  struct ToolRequest {
    std::string tool;
    RunArgs run;
    UploadArgs upload;
    std::string path;
    nlohmann::json progress_token;  // null: no progress notifications
  };

  Disposition HandleRequest(const std::string& method, const nlohmann::json& id,
                            const nlohmann::json& params, const Emit& emit);
  void HandleNotification(const std::string& method, const nlohmann::json& params);
  nlohmann::json Initialize(const nlohmann::json& params, std::string* error);
  Disposition CallTool(const nlohmann::json& id, const nlohmann::json& params, const Emit& emit);
  void Work(std::shared_ptr<Call> call, ToolRequest request, Emit emit);

  // Tool bodies, on the worker thread, holding the kiln session's turn.
  // null: the call was cancelled (no response).
  nlohmann::json RunPython(Call& call, const RunArgs& args, const nlohmann::json& progress_token,
                           const Emit& emit);
  nlohmann::json UploadFile(const UploadArgs& args);
  nlohmann::json DownloadFile(const std::string& path);
  nlohmann::json ListFiles();
  nlohmann::json Reset();

  bool AcquireTurn(Call& call);
  void ReleaseTurn();
  // The kiln session, created if there is none. Holds the turn.
  Result<std::string> EnsureSession();
  // Drops `session` if it is still the current one (lost, or to be deleted),
  // and then deletes it when `kill` (best effort).
  void ForgetSession(const std::string& session, bool kill);
  bool structured() const;
  void JoinFinished();

  std::unique_ptr<Backend> backend_;
  const EngineOptions options_;
  std::string limits_text_;

  std::mutex join_mu_;  // one joiner of worker threads at a time
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool initialized_ = false;
  bool shut_down_ = false;
  std::string version_;
  std::string session_;            // the kiln session; empty: none yet (or lost)
  std::string lost_note_;          // why it was lost, when no result has said so yet
  bool turn_taken_ = false;        // a tool call is using the kiln session
  std::deque<const Call*> queue_;  // tool calls waiting for their turn, in arrival order
  std::map<std::string, std::shared_ptr<Call>> calls_;  // in flight, by the id's JSON text
  std::vector<std::shared_ptr<Call>> finished_;         // threads to join
  std::chrono::steady_clock::time_point last_active_;
};

}  // namespace kiln::mcp
