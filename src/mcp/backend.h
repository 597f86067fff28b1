// What the MCP engine needs from kiln: sessions (a stateful interpreter each),
// one cell at a time, and the session's workspace files. Two implementations:
// HttpBackend (a proxy to a running `kiln serve`, src/mcp/http_backend.h) and
// the local one over kiln::sessions::SessionManager (`kiln mcp` without --url,
// and /mcp inside `kiln serve`).
//
// Errors: Code::kNotFound for a gone or unknown session (and, from the file
// calls, a missing file), kInvalidArgument for a bad path or argument (the
// message starts with the field it is about), kResourceExhausted for too big
// or over a quota, kAborted when the session is busy with another cell.
// Everything is called from several threads: Interrupt and DeleteSession while
// Execute runs on another thread.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/result.h"

namespace kiln::mcp {

class Backend {
 public:
  virtual ~Backend() = default;
  // Starts a kiln session; returns its id.
  virtual Result<std::string> CreateSession() = 0;
  virtual Status DeleteSession(const std::string& session) = 0;
  // Runs one cell; returns the result JSON (docs/api.md's result shape, with
  // "session_state": "kept" | "lost"). `on_event` (may be empty) gets the
  // streaming events {"event": "stdout"|"stderr"|"display"|"result"|"error",
  // "data": {...}} while the cell runs, on the calling thread.
  virtual Result<nlohmann::json> Execute(
      const std::string& session, const std::string& code, std::optional<double> timeout_s,
      const std::function<void(const nlohmann::json&)>& on_event) = 0;
  // Interrupts the running cell (KeyboardInterrupt), from another thread.
  virtual Status Interrupt(const std::string& session) = 0;
  virtual Status PutFile(const std::string& session, const std::string& path,
                         const std::string& bytes) = 0;
  virtual Result<std::string> GetFile(const std::string& session, const std::string& path) = 0;
  // {"files": [{"path", "size", "directory"}]}
  virtual Result<nlohmann::json> ListFiles(const std::string& session) = 0;
};

}  // namespace kiln::mcp
