// The MCP Backend in process, over kiln::sessions::SessionManager: `kiln mcp`
// without --url (sandboxes run locally, as `kiln run` does) and the /mcp
// endpoint of `kiln serve`. Every call is made as `caller` (its tenant owns
// the sessions; its key id and address go to the audit log). The manager's
// kGone (a session reaped or killed, with the reason) is kNotFound here, as
// the Backend contract says.
#pragma once

#include <string>

#include "config/config.h"
#include "mcp/backend.h"
#include "sessions/session_manager.h"

namespace kiln::mcp {

// What the tool descriptions say of `profile`'s limits (EngineOptions::limits_text).
std::string LimitsText(const config::Profile& profile);

class LocalBackend final : public Backend {
 public:
  // `manager` outlives the backend.
  LocalBackend(sessions::SessionManager* manager, sessions::Caller caller,
               sessions::SessionOptions options = {})
      : manager_(manager), caller_(std::move(caller)), options_(std::move(options)) {}

  Result<std::string> CreateSession() override;
  Status DeleteSession(const std::string& session) override;
  Result<nlohmann::json> Execute(
      const std::string& session, const std::string& code, std::optional<double> timeout_s,
      const std::function<void(const nlohmann::json&)>& on_event) override;
  Status Interrupt(const std::string& session) override;
  Status PutFile(const std::string& session, const std::string& path,
                 const std::string& bytes) override;
  Result<std::string> GetFile(const std::string& session, const std::string& path) override;
  Result<nlohmann::json> ListFiles(const std::string& session) override;

 private:
  sessions::SessionManager* manager_;
  sessions::Caller caller_;
  sessions::SessionOptions options_;
};

}  // namespace kiln::mcp
