#include "mcp/http_transport.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <deque>

#include "base/log.h"
#include "fleet/node_id.h"
#include "mcp/jsonrpc.h"
#include "mcp/tools.h"

namespace kiln::mcp {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// 256 bits from the CSPRNG, as 64 hex digits (visible ASCII, as the spec asks).
std::optional<std::string> NewSessionId() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return std::nullopt;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

HttpReply JsonReply(int status, const json& body, HttpHeaders headers = {}) {
  HttpReply r;
  r.status = status;
  r.headers = std::move(headers);
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = jsonrpc::Serialize(body);
  return r;
}

// A transport-level refusal: the status, and a JSON-RPC error body.
HttpReply Refuse(int status, int code, const std::string& message, const json& id = nullptr,
                 HttpHeaders headers = {}) {
  return JsonReply(status, jsonrpc::ErrorResponse(id, code, message), std::move(headers));
}

std::string SseEvent(const json& message) {
  return "event: message\ndata: " + jsonrpc::Serialize(message) + "\n\n";
}

// The messages of one request, from the engine's threads to the HTTP thread.
struct Channel {
  std::mutex m;
  std::condition_variable cv;
  std::deque<json> messages;
  bool final = false;
  bool answered = false;  // the final message was a response (not a cancellation)
};

}  // namespace

bool OriginAllowed(std::string_view origin, const std::vector<std::string>& allowed) {
  if (origin.empty()) return true;
  const std::string o = Lower(origin);
  for (const auto& a : allowed) {
    if (a == "*" || Lower(a) == o) return true;
  }
  std::string_view rest;
  if (o.rfind("http://", 0) == 0) {
    rest = std::string_view(o).substr(7);
  } else if (o.rfind("https://", 0) == 0) {
    rest = std::string_view(o).substr(8);
  } else {
    return false;  // "null", other schemes
  }
  std::string_view host = rest;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(0, close + 1);
    rest = rest.substr(close + 1);
  } else {
    const size_t colon = rest.find(':');
    host = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon);
  }
  if (!rest.empty()) {  // ":port", digits only, nothing after
    if (rest.front() != ':' || rest.size() < 2 ||
        rest.substr(1).find_first_not_of("0123456789") != std::string_view::npos) {
      return false;
    }
  }
  return host == "localhost" || host == "127.0.0.1" || host == "[::1]";
}

HttpService::HttpService(BackendFactory factory, HttpServiceOptions options)
    : factory_(std::move(factory)), options_(std::move(options)) {
  reaper_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::seconds(1));
      if (stopping_) break;
      lock.unlock();
      ReapIdle();
      lock.lock();
    }
  });
}

HttpService::~HttpService() { Shutdown(); }

size_t HttpService::sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void HttpService::ReapIdle() {
  std::vector<std::shared_ptr<Session>> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      const Engine& e = *it->second->engine;
      if (e.in_flight() == 0 && now - e.last_active() > options_.idle_ttl) {
        idle.push_back(it->second);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : idle) {
    KILN_LOG_INFO("mcp: session {}... of tenant {} idle: ended", s->id.substr(0, 8), s->tenant);
    s->engine->Shutdown();
  }
}

void HttpService::Shutdown() {
  std::map<std::string, std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    all.swap(sessions_);
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  for (auto& [id, s] : all) s->engine->Shutdown();
}

std::shared_ptr<HttpService::Session> HttpService::Find(const std::string& id,
                                                        const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = sessions_.find(id);
  // Another tenant's session is "not found", exactly as an unknown one.
  if (it == sessions_.end() || it->second->tenant != tenant) return nullptr;
  return it->second;
}

std::optional<HttpReply> HttpService::Handle(const HttpRequest& request, SseWriter* sse) {
  if (!OriginAllowed(request.origin, options_.allowed_origins)) {
    KILN_LOG_WARN("mcp: refused origin {}", request.origin.substr(0, 200));
    return Refuse(403, jsonrpc::kServerError,
                  "Forbidden: the Origin " + request.origin.substr(0, 200) +
                      " is not allowed (see server.mcp_allowed_origins)");
  }
  if (request.method == "POST") return Post(request, sse);
  if (request.method == "DELETE") {
    if (!request.session_id) {
      return Refuse(400, jsonrpc::kServerError,
                    "Bad Request: DELETE needs the Mcp-Session-Id header");
    }
    std::shared_ptr<Session> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = sessions_.find(*request.session_id);
      if (it != sessions_.end() && it->second->tenant == request.tenant) {
        s = it->second;
        sessions_.erase(it);
      }
    }
    if (!s) return Refuse(404, jsonrpc::kSessionNotFound, "Session not found");
    s->engine->Shutdown();
    HttpReply r;
    r.status = 204;
    return r;
  }
  const HttpHeaders allow = {{"Allow", "POST, DELETE"}};
  if (request.method == "GET") {
    return Refuse(
        405, jsonrpc::kServerError,
        "Method Not Allowed: this server sends no messages outside the responses to requests",
        nullptr, allow);
  }
  return Refuse(405, jsonrpc::kServerError, "Method Not Allowed: use POST", nullptr, allow);
}

std::optional<HttpReply> HttpService::Post(const HttpRequest& request, SseWriter* sse) {
  const std::string content_type = Lower(request.content_type);
  if (content_type.rfind("application/json", 0) != 0) {
    return Refuse(415, jsonrpc::kServerError,
                  "Unsupported Media Type: the body must be application/json");
  }
  const std::string accept = Lower(request.accept);
  const bool any = accept.empty() || accept.find("*/*") != std::string::npos;
  const bool json_ok = any || accept.find("application/json") != std::string::npos ||
                       accept.find("application/*") != std::string::npos;
  const bool sse_ok = (any || accept.find("text/event-stream") != std::string::npos ||
                       accept.find("text/*") != std::string::npos) &&
                      sse != nullptr;
  if (!json_ok && !sse_ok) {
    return Refuse(406, jsonrpc::kServerError,
                  "Not Acceptable: the client must accept application/json and text/event-stream");
  }
  const auto parsed = jsonrpc::Parse(request.body);
  if (!parsed) return Refuse(400, jsonrpc::kParseError, "Parse error: the body is not valid JSON");
  const jsonrpc::Message m = jsonrpc::Classify(*parsed);
  if (m.kind == jsonrpc::Kind::kInvalid) return Refuse(400, m.error_code, m.error, m.id);
  if (m.kind == jsonrpc::Kind::kNotification && m.error_code != 0)
    return Refuse(400, m.error_code, m.error);
  // The header follows the negotiation; initialize negotiates in its body.
  const bool initialize = m.kind == jsonrpc::Kind::kRequest && m.method == "initialize";
  if (!initialize && request.protocol_version &&
      !IsSupportedProtocolVersion(*request.protocol_version)) {
    return Refuse(400, jsonrpc::kServerError,
                  "Bad Request: unsupported MCP-Protocol-Version " +
                      request.protocol_version->substr(0, 100) +
                      " (supported: 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05)",
                  m.id);
  }

  if (initialize) {
    if (request.session_id) {
      return Refuse(
          400, jsonrpc::kInvalidRequest,
          "Invalid Request: initialize starts a new session: send it without Mcp-Session-Id", m.id);
    }
    return Initialize(request, *parsed, sse, !json_ok);
  }
  if (!request.session_id) {
    return Refuse(400, jsonrpc::kServerError,
                  "Bad Request: no Mcp-Session-Id header: send initialize first to start a session",
                  m.id);
  }
  std::shared_ptr<Session> s = Find(*request.session_id, request.tenant);
  if (!s) {
    const std::string_view node = fleet::NodeOfSessionId(*request.session_id);
    if (options_.node_gone && !node.empty() && node != options_.node_id &&
        options_.node_gone(node)) {
      return Refuse(404, jsonrpc::kSessionNotFound,
                    "Session not found: node lost (the node that held it is gone); start a new "
                    "one with initialize",
                    m.id);
    }
    return Refuse(404, jsonrpc::kSessionNotFound,
                  "Session not found: it ended or never existed; start a new one with initialize",
                  m.id);
  }
  if (m.kind != jsonrpc::Kind::kRequest) {
    s->engine->Handle(*parsed, [](const json&, bool) {});
    HttpReply r;
    r.status = 202;
    return r;
  }
  const bool stream = sse_ok && (!json_ok || m.method == "tools/call");
  return Answer(*s->engine, *parsed, stream, sse, {});
}

std::optional<HttpReply> HttpService::Initialize(const HttpRequest& request, const json& message,
                                                 SseWriter* sse, bool sse_only) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Refuse(503, jsonrpc::kServerError, "the server is shutting down");
    size_t mine = 0;
    for (const auto& [id, s] : sessions_) mine += s->tenant == request.tenant ? 1 : 0;
    if (mine >= options_.max_sessions_per_tenant) {
      return Refuse(429, jsonrpc::kServerError,
                    "Too Many Requests: this tenant has " + std::to_string(mine) +
                        " MCP sessions open (the limit); end one with DELETE",
                    message.value("id", json()), {{"Retry-After", "10"}});
    }
    if (sessions_.size() >= options_.max_sessions) {
      return Refuse(503, jsonrpc::kServerError, "Service Unavailable: too many MCP sessions",
                    message.value("id", json()), {{"Retry-After", "10"}});
    }
  }
  auto id = NewSessionId();
  if (!id) return Refuse(500, jsonrpc::kInternalError, "no randomness for a session id");
  auto backend = factory_(request);
  if (!backend) return Refuse(503, jsonrpc::kServerError, "Service Unavailable: no backend");
  auto session = std::make_shared<Session>();
  session->id = options_.node_id.empty() ? *id : fleet::SessionIdFor(options_.node_id, *id);
  session->tenant = request.tenant;
  session->engine = std::make_shared<Engine>(std::move(backend), options_.engine);
  json response;
  session->engine->Handle(message, [&response](const json& m, bool) { response = m; });
  if (!response.contains("result")) {
    // A failed initialize starts no session.
    return JsonReply(400, response);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[*id] = session;
  }
  KILN_LOG_INFO("mcp: session {}... for tenant {} (protocol {})", id->substr(0, 8), request.tenant,
                session->engine->protocol_version());
  const HttpHeaders headers = {{"Mcp-Session-Id", *id}};
  if (sse_only) {
    const std::string event = SseEvent(response);
    if (sse->Begin(200, {{"Content-Type", "text/event-stream"},
                         {"Cache-Control", "no-cache"},
                         {"Mcp-Session-Id", *id}})) {
      sse->Write(event);
    }
    sse->End();
    return std::nullopt;
  }
  return JsonReply(200, response, headers);
}

std::optional<HttpReply> HttpService::Answer(Engine& engine, const json& message, bool stream,
                                             SseWriter* sse, const HttpHeaders& extra_headers) {
  auto channel = std::make_shared<Channel>();
  const Engine::Emit emit = [channel](const json& m, bool final) {
    std::lock_guard<std::mutex> lock(channel->m);
    if (!m.is_null()) channel->messages.push_back(m);
    if (final) {
      channel->final = true;
      channel->answered = !m.is_null();
    }
    channel->cv.notify_all();
  };
  const json id = message.value("id", json());
  engine.Handle(message, emit);
  if (!stream) {
    std::unique_lock<std::mutex> lock(channel->m);
    channel->cv.wait(lock, [&] { return channel->final; });
    // Only the response goes in a JSON reply (progress needs a stream).
    if (!channel->answered) {
      return JsonReply(200, jsonrpc::ErrorResponse(id, jsonrpc::kServerError, "Request cancelled"),
                       extra_headers);
    }
    return JsonReply(200, channel->messages.back(), extra_headers);
  }
  HttpHeaders headers = {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}};
  for (const auto& h : extra_headers) headers.push_back(h);
  if (!sse->Begin(200, headers)) return std::nullopt;
  std::unique_lock<std::mutex> lock(channel->m);
  for (;;) {
    channel->cv.wait_for(lock, options_.keepalive,
                         [&] { return channel->final || !channel->messages.empty(); });
    std::string out;
    while (!channel->messages.empty()) {
      out += SseEvent(channel->messages.front());
      channel->messages.pop_front();
    }
    const bool done = channel->final;
    if (out.empty() && !done) out = ": keep-alive\n\n";
    lock.unlock();
    // A client that went away does not cancel the call (the spec says so):
    // its result is dropped when it comes.
    const bool alive = out.empty() || sse->Write(out);
    if (done || !alive) {
      if (alive) sse->End();
      return std::nullopt;
    }
    lock.lock();
  }
}

}  // namespace kiln::mcp
