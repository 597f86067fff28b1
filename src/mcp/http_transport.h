// MCP's Streamable HTTP transport (2025-11-25), as a library the HTTP server
// calls for its MCP endpoint (/mcp) once it has authenticated the request.
//
// - POST carries one JSON-RPC message. A notification or a client's response
//   is answered 202 with no body; a request gets one JSON object, or an SSE
//   stream (its progress notifications, then its response) as the client's
//   Accept allows: tools/call streams when the client accepts
//   text/event-stream, everything else is JSON when it accepts that.
// - MCP sessions: initialize (without Mcp-Session-Id) creates one and answers
//   with its id (256 random bits, hex) in Mcp-Session-Id. Every later request
//   must carry it: missing -> 400, unknown, ended or another tenant's -> 404
//   (the spec's "start a new session"). DELETE ends it and its kiln session.
//   Idle sessions (no call in flight for `idle_ttl`) are reaped.
// - A request before initialize (no session: e.g. a `server/discover` probe)
//   is 400 with a JSON-RPC error body, so such clients fall back to the
//   handshake. Batches (arrays) are 400 Invalid Request.
// - GET is 405: the server sends nothing unprompted.
// - Origin: absent, or an http(s) origin on localhost, 127.0.0.1 or [::1], or
//   one of `allowed_origins`; anything else is 403 (DNS rebinding).
// - MCP-Protocol-Version, when sent, must be a supported version (else 400).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "mcp/backend.h"
#include "mcp/engine.h"

namespace kiln::mcp {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// What the transport needs of one HTTP request to the MCP endpoint.
struct HttpRequest {
  std::string method;  // "POST", "GET", "DELETE", ...
  std::string accept;
  std::string content_type;
  std::string origin;                           // empty: none sent
  std::optional<std::string> session_id;        // Mcp-Session-Id
  std::optional<std::string> protocol_version;  // MCP-Protocol-Version
  std::string body;
  std::string tenant;  // the authenticated tenant
  std::string key_id;  // the API key's id and the client's address, for the backend's audit
  std::string peer;
};

struct HttpReply {
  int status = 200;
  HttpHeaders headers;
  std::string body;
};

// Streams one SSE response (the server implements it over its socket).
class SseWriter {
 public:
  virtual ~SseWriter() = default;
  // Sends the status line and these headers (Content-Type among them).
  // false: the client is gone.
  virtual bool Begin(int status, const HttpHeaders& headers) = 0;
  // Sends whole events. false: the client is gone.
  virtual bool Write(std::string_view events) = 0;
  // Ends the stream.
  virtual void End() = 0;
};

struct HttpServiceOptions {
  std::vector<std::string> allowed_origins;  // exact "scheme://host[:port]", or "*"
  std::chrono::milliseconds idle_ttl{std::chrono::seconds(600)};
  size_t max_sessions = 256;  // MCP sessions of all tenants
  size_t max_sessions_per_tenant = 32;
  std::chrono::milliseconds keepalive{std::chrono::seconds(15)};  // an SSE comment this often
  EngineOptions engine;
  // In a fleet (docs/adr/0020): Mcp-Session-Id carries this node's id, so a
  // router sends every later request to it; a session of a node that
  // node_gone says is gone is answered 404 (MCP's "start a new session")
  // saying "node lost".
  std::string node_id{};
  std::function<bool(std::string_view node)> node_gone{};
};

// The allowed-origin rule above.
bool OriginAllowed(std::string_view origin, const std::vector<std::string>& allowed);

class HttpService final {
 public:
  // Makes the backend of a new MCP session for the request's tenant.
  using BackendFactory = std::function<std::unique_ptr<Backend>(const HttpRequest& request)>;

  HttpService(BackendFactory factory, HttpServiceOptions options);
  ~HttpService();  // Shutdown()
  HttpService(const HttpService&) = delete;
  HttpService& operator=(const HttpService&) = delete;

  // Answers one request: a complete reply, or nullopt once it has streamed
  // the reply through `sse` (Begin ... End).
  std::optional<HttpReply> Handle(const HttpRequest& request, SseWriter* sse);

  size_t sessions() const;
  // Ends sessions idle for longer than idle_ttl (a thread does it every second).
  void ReapIdle();
  // Ends every session (their cells are stopped, their kiln sessions deleted).
  void Shutdown();

 private:
  struct Session {
    std::string id;
    std::string tenant;
    std::shared_ptr<Engine> engine;
  };
  std::optional<HttpReply> Post(const HttpRequest& request, SseWriter* sse);
  std::optional<HttpReply> Initialize(const HttpRequest& request, const nlohmann::json& message,
                                      SseWriter* sse, bool sse_only);
  // Runs a request on `engine` and answers it as JSON or SSE.
  std::optional<HttpReply> Answer(Engine& engine, const nlohmann::json& message, bool stream,
                                  SseWriter* sse, const HttpHeaders& extra_headers);
  std::shared_ptr<Session> Find(const std::string& id, const std::string& tenant);

  BackendFactory factory_;
  const HttpServiceOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace kiln::mcp
