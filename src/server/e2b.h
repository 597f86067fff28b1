// kiln serve as a self-hosted E2B endpoint (docs/e2b.md, docs/adr/0018): the
// official, unchanged E2B SDKs work against kiln when E2B_API_URL and
// E2B_SANDBOX_URL are the kiln server's address and E2B_API_KEY a kiln key.
//
// An E2B sandbox is a kiln session (src/sessions) of the key's tenant: its
// sandboxID is the session id, and every cell runs through the session
// manager and so through the executions service (admission, audit, metrics).
// Two kinds of requests reach this front:
//   - the control plane (E2B's API: POST /v2/sandboxes, GET/DELETE
//     /sandboxes/{id}, ...), authenticated by the kiln key in X-API-KEY;
//   - the in-sandbox services (what E2B serves inside the VM: POST /execute
//     of the code interpreter, GET /health of envd), told apart by the
//     E2b-Sandbox-Id header the SDK sends with each of them, and
//     authenticated by the sandbox's access token (X-Access-Token or
//     E2B-Traffic-Access-Token), which the create answer gave the SDK.
// Errors are E2B's shape, {code, message}.
//
// Thread-safe.
#pragma once

#include <boost/beast/http.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "mcp/http_transport.h"
#include "sessions/session_manager.h"
#include "store/store.h"

namespace kiln::server::e2b {

using Request = boost::beast::http::request<boost::beast::http::string_body>;

// Which E2B surface a request is for, from its head alone.
enum class Kind { kNone, kApi, kSandbox };
Kind Classify(const Request& head);

// An answer, or nothing when the handler streamed it itself.
struct Reply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool streamed = false;
};

// {code, message} with that status.
Reply Error(int status, const std::string& message);

class Front final {
 public:
  Front(const config::Config* config, sessions::SessionManager* sessions)
      : config_(config), sessions_(sessions) {}
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;

  // The control plane; `key` is the caller's (checked by the server).
  Reply Api(const Request& req, const store::KeyInfo& key, const std::string& peer);
  // An in-sandbox request's refusal from its headers alone (an unknown
  // sandbox: 502; a missing or wrong access token: 401), so that the server
  // answers it before reading its body; nullopt: it may proceed.
  std::optional<Reply> Refusal(const Request& head) { return Refusal(head, nullptr); }
  // The in-sandbox services. `stream`: the connection, for /execute's
  // newline-delimited events; `hangup_fd`: the client's socket.
  Reply Sandbox(const Request& req, const std::string& peer, mcp::SseWriter* stream, int hangup_fd);

 private:
  struct Entry {
    std::string tenant;
    std::string key_id;
    std::string template_id;
    std::string access_token;
    nlohmann::json metadata;
    int64_t started_ms = 0;
    // Code contexts besides "default": id -> {id, language, cwd}; and the
    // contexts restarted or removed since the last cell, emptied in the
    // runtime before the next one runs (docs/protocol.md, reset_contexts).
    std::map<std::string, nlohmann::json> contexts;
    std::vector<std::string> resets;
  };
  std::optional<Reply> Refusal(const Request& head, Entry* entry);
  std::optional<Entry> Lookup(const std::string& id, const std::string& tenant);
  nlohmann::json Info(const std::string& id, const Entry& e, const nlohmann::json& session) const;
  nlohmann::json Created(const std::string& id, const Entry& e) const;
  Reply Files(const Request& req, const std::string& id, const sessions::Caller& caller);
  Reply ConnectFilesystem(const Request& req, const std::string& rpc, const std::string& id,
                          const sessions::Caller& caller);
  Reply Execute(const Request& req, const std::string& id, const sessions::Caller& caller,
                mcp::SseWriter* stream, int hangup_fd);
  Reply Contexts(const Request& req, const std::string& id);
  // process.Process (E2B's commands): Start streams, List/SendSignal/SendInput are unary.
  Reply ProcessStart(const Request& req, const std::string& id, const sessions::Caller& caller,
                     mcp::SseWriter* stream, int hangup_fd);
  Reply ProcessUnary(const Request& req, const std::string& rpc, const std::string& id,
                     const sessions::Caller& caller);

  // The command a sandbox runs now (one at a time: a session runs one cell at
  // a time), for List and SendSignal.
  struct Running {
    int64_t pid = 0;
    nlohmann::json config;  // process.ProcessConfig as Start received it
  };

  const config::Config* config_;
  sessions::SessionManager* sessions_;
  std::mutex mu_;
  std::map<std::string, Entry> sandboxes_;  // by sandboxID (= the session id)
  std::map<std::string, Running> running_;  // by sandboxID: its command, while it runs
};

}  // namespace kiln::server::e2b
