#include "server/server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "base/base64.h"
#include "base/log.h"
#include "mcp/http_transport.h"
#include "mcp/local_backend.h"
#include "server/e2b.h"
#include "server/request.h"
#include "store/api_key.h"
#include "store/time_format.h"
#include "web/assets.h"

namespace kiln::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// Request ids (log lines, X-Request-Id): unique, not secret. Execution and
// session ids come from executions::NewId (a CSPRNG).
std::string NewId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

Response Json(http::status status, const nlohmann::json& body, unsigned version, bool keep_alive) {
  Response res{status, version};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::server, "kiln");
  res.keep_alive(keep_alive);
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.prepare_payload();
  return res;
}

// The one table from an error to HTTP (P7). An error a client sees is
// {code, reason, field} (base/result.h): its API code is Error::api_code, or
// when that is empty the default of its canonical Code (ApiCodeOf); the code
// alone decides the status. Codes not listed are 500.
struct HttpError {
  std::string_view api_code;
  http::status status;
  bool retry_after = false;  // passing (a spawner being restarted): "Retry-After: 1"
};
constexpr HttpError kHttpErrors[] = {
    {"invalid_value", http::status::bad_request},
    {"out_of_range", http::status::bad_request},
    {"cancelled", http::status::bad_request},
    {"unauthenticated", http::status::unauthorized},
    {"permission_denied", http::status::forbidden},
    {"output_blocked", http::status::forbidden},      // the output audit withheld a file
    {"tenant_quarantined", http::status::forbidden},  // an operator or a rule quarantined it
    {"lockdown", http::status::service_unavailable},  // until an operator lifts it: no Retry-After
    {"not_found", http::status::not_found},
    {"already_exists", http::status::conflict},
    {"aborted", http::status::conflict},
    {"session_busy", http::status::conflict},  // one cell of a session at a time
    {"conflict", http::status::conflict},      // a file path that clashes
    {"session_gone", http::status::gone},
    {"too_large", http::status::payload_too_large},  // a file over its caps
    {"resource_exhausted", http::status::too_many_requests},
    {"session_limit", http::status::too_many_requests},  // the tenant's live sessions
    {"failed_precondition", http::status::service_unavailable},
    {"unavailable", http::status::service_unavailable, /*retry_after=*/true},
    {"deadline_exceeded", http::status::gateway_timeout},
    {"unimplemented", http::status::not_implemented},
};

std::string ApiCodeOf(const Error& e) {
  if (!e.api_code.empty()) return e.api_code;
  // A field over a profile's limit is the same kind of 400 as any bad field.
  if (e.code == Code::kInvalidArgument) return "invalid_value";
  if (e.code == Code::kGone) return "session_gone";
  return std::string(ToString(e.code));
}

HttpError HttpErrorOf(const std::string& api_code) {
  for (const HttpError& h : kHttpErrors) {
    if (h.api_code == api_code) return h;
  }
  return {"", http::status::internal_server_error};
}

}  // namespace

const std::vector<std::string>& Routes() {
  static const std::vector<std::string> kRoutes = {"GET /healthz",
                                                   "GET /readyz",
                                                   "GET /metrics",
                                                   "GET /openapi.json",
                                                   "POST /v1/execute",
                                                   "GET /v1/stats",
                                                   "GET /v1/profiles",
                                                   "POST /execute",
                                                   "POST /v1/sessions",
                                                   "GET /v1/sessions",
                                                   "GET /v1/sessions/{id}",
                                                   "DELETE /v1/sessions/{id}",
                                                   "POST /v1/sessions/{id}/execute",
                                                   "POST /v1/sessions/{id}/interrupt",
                                                   "GET /v1/sessions/{id}/files",
                                                   "PUT /v1/sessions/{id}/files/{path}",
                                                   "GET /v1/sessions/{id}/files/{path}",
                                                   "DELETE /v1/sessions/{id}/files/{path}",
                                                   "POST /mcp",
                                                   "GET /mcp",
                                                   "DELETE /mcp",
                                                   "GET /v1/admin/events",
                                                   "GET /v1/admin/tenants",
                                                   "POST /v1/admin/tenants/{tenant}/quarantine",
                                                   "POST /v1/admin/tenants/{tenant}/release",
                                                   "POST /v1/admin/keys/{id}/revoke",
                                                   "GET /v1/admin/lockdown",
                                                   "POST /v1/admin/lockdown"};
  return kRoutes;
}

namespace {

// Spawner::PoolStatus's profiles as the metrics' (the spawner is kiln's own
// process: its JSON is trusted, read with defaults all the same).
std::vector<metrics::Metrics::PoolProfile> PoolProfilesOf(const nlohmann::json& status) {
  std::vector<metrics::Metrics::PoolProfile> out;
  const auto profiles = status.find("profiles");
  if (profiles == status.end() || !profiles->is_object()) return out;
  for (const auto& [name, p] : profiles->items()) {
    if (!p.is_object()) continue;
    metrics::Metrics::PoolProfile m;
    m.profile = name;
    m.ready = p.value("ready", int64_t{0});
    m.refilling = p.value("refilling", int64_t{0});
    m.in_use = p.value("in_use", int64_t{0});
    m.target = p.value("target", int64_t{0});
    m.hits = p.value("hits", uint64_t{0});
    m.cold_fallbacks = p.value("cold_fallbacks", uint64_t{0});
    m.refills = p.value("refills", uint64_t{0});
    m.failures = p.value("failures", uint64_t{0});
    m.zygote_starts = p.value("zygote_starts", uint64_t{0});
    m.refill_seconds_total = p.value("refill_ms_total", 0.0) / 1e3;
    out.push_back(std::move(m));
  }
  return out;
}

// "/v1/sessions/ab12/files/x/y.csv" -> pattern "/v1/sessions/{id}/files/{path}",
// id "ab12", path "x/y.csv" (still percent-encoded). Other paths: themselves.
struct RouteMatch {
  std::string pattern;
  std::string id;
  std::string path;
};

RouteMatch MatchAdmin(const std::string& target) {
  // /v1/admin/tenants/{tenant}/quarantine|release, /v1/admin/keys/{id}/revoke
  for (const auto& [prefix, pattern, tails] :
       {std::tuple<std::string, std::string, std::vector<std::string>>{
            "/v1/admin/tenants/", "/v1/admin/tenants/{tenant}/", {"quarantine", "release"}},
        std::tuple<std::string, std::string, std::vector<std::string>>{
            "/v1/admin/keys/", "/v1/admin/keys/{id}/", {"revoke"}}}) {
    if (target.rfind(prefix, 0) != 0) continue;
    const std::string rest = target.substr(prefix.size());
    const auto slash = rest.find('/');
    if (slash == std::string::npos || slash == 0) break;
    const std::string tail = rest.substr(slash + 1);
    for (const auto& t : tails) {
      if (tail == t) return {pattern + t, rest.substr(0, slash), ""};
    }
    break;
  }
  return {target, "", ""};
}

RouteMatch MatchPath(const std::string& target) {
  if (target.rfind("/v1/admin/", 0) == 0) return MatchAdmin(target);
  static const std::string kPrefix = "/v1/sessions/";
  if (target.rfind(kPrefix, 0) != 0 || target.size() == kPrefix.size()) return {target, "", ""};
  const std::string rest = target.substr(kPrefix.size());
  const auto slash = rest.find('/');
  RouteMatch m;
  m.id = rest.substr(0, slash);
  if (slash == std::string::npos) {
    m.pattern = "/v1/sessions/{id}";
    return m;
  }
  const std::string tail = rest.substr(slash + 1);
  if (tail == "execute" || tail == "interrupt" || tail == "files") {
    m.pattern = "/v1/sessions/{id}/" + tail;
  } else if (tail.rfind("files/", 0) == 0) {
    m.pattern = "/v1/sessions/{id}/files/{path}";
    m.path = tail.substr(6);
  } else {
    m.pattern = target;
  }
  return m;
}

// Writes all of `data` to a client socket, waiting at most `timeout_s` for
// each bit of progress. Asio's synchronous writes would wait forever once
// SO_SNDTIMEO fires; a client that stops reading a stream must not hold the
// thread (and, behind it, a sandbox's supervisor). On failure the socket is
// shut down, which the execution's hangup watch sees.
bool BoundedWrite(int fd, std::string_view data, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
  }
  if (data.empty()) return true;
  ::shutdown(fd, SHUT_RDWR);
  return false;
}

// A chunked, non-keep-alive response head with these fields.
std::string StreamHead(int status, const std::vector<std::pair<std::string, std::string>>& fields,
                       const std::string& request_id) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                     std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
  for (const auto& [name, value] : fields) head += name + ": " + value + "\r\n";
  head += "Server: kiln\r\nX-Request-Id: " + request_id +
          "\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  return head;
}

std::string Chunk(std::string_view data) {
  char size[20];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out = size;
  out.append(data);
  out += "\r\n";
  return out;
}

// Whether some route has this path pattern (with any method).
bool KnownPath(const std::string& pattern) {
  for (const auto& r : Routes()) {
    if (r.compare(r.find(' ') + 1, std::string::npos, pattern) == 0) return true;
  }
  return false;
}

bool WantsEventStream(const Request& req) {
  auto it = req.find(http::field::accept);
  return it != req.end() && std::string(it->value()).find("text/event-stream") != std::string::npos;
}

// Server-Sent Events on the connection (chunked): the headers go out with the
// first event, so a request refused before anything ran still gets its
// ordinary status and JSON body.
class SseWriter final {
 public:
  SseWriter(tcp::socket& socket, std::string request_id, double timeout_s)
      : fd_(socket.native_handle()), request_id_(std::move(request_id)), timeout_s_(timeout_s) {}
  bool started() const { return started_; }
  bool failed() const { return failed_; }

  void Event(std::string_view name, const nlohmann::json& data, int64_t id = 0) {
    std::string event = id > 0 ? "id: " + std::to_string(id) + "\n" : std::string();
    event += "event: ";
    event += name;
    event += "\ndata: ";
    event += data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    event += "\n\n";
    Write(event);
  }
  // A comment line (": text"): keeps an idle stream's connection alive.
  void Comment(std::string_view text) { Write(": " + std::string(text) + "\n\n"); }
  void Write(const std::string& text) {
    if (failed_) return;
    std::string out;
    if (!started_) {
      started_ = true;
      out = StreamHead(200, {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}},
                       request_id_);
    }
    out += Chunk(text);
    failed_ = !BoundedWrite(fd_, out, timeout_s_);
  }
  void End() {
    if (failed_ || !started_) return;
    failed_ = !BoundedWrite(fd_, "0\r\n\r\n", timeout_s_);
  }

 private:
  int fd_;
  std::string request_id_;
  double timeout_s_;
  bool started_ = false;
  bool failed_ = false;
};

class McpSseWriter final : public mcp::SseWriter {
 public:
  McpSseWriter(tcp::socket& socket, std::string request_id, double timeout_s)
      : fd_(socket.native_handle()), request_id_(std::move(request_id)), timeout_s_(timeout_s) {}
  bool Begin(int status, const mcp::HttpHeaders& headers) override {
    std::vector<std::pair<std::string, std::string>> fields;
    for (const auto& [name, value] : headers) fields.emplace_back(name, value);
    return BoundedWrite(fd_, StreamHead(status, fields, request_id_), timeout_s_);
  }
  bool Write(std::string_view events) override {
    return BoundedWrite(fd_, Chunk(events), timeout_s_);
  }
  void End() override { (void)BoundedWrite(fd_, "0\r\n\r\n", timeout_s_); }

 private:
  int fd_;
  std::string request_id_;
  double timeout_s_;
};

}  // namespace

struct HttpServer::Impl {
  Deps deps;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  std::atomic<bool> stopping{false};

  std::mutex mu;
  std::condition_variable cv;
  int connections = 0;
  std::set<int> sockets;  // open client sockets (for shutdown)
  // Sockets in the middle of reading a request, and since when: a client that
  // trickles bytes (each within SO_RCVTIMEO) still gets client_timeout in all.
  std::map<int, Clock::time_point> reading;
  std::thread reaper;
  std::unique_ptr<mcp::HttpService> mcp;  // /mcp (with sessions only)
  std::unique_ptr<e2b::Front> e2b;        // E2B's API and sandbox routes (with sessions only)

  // --- connections ---------------------------------------------------------

  void AcceptLoop() {
    for (;;) {
      beast::error_code ec;
      tcp::socket socket(io);
      acceptor.accept(socket, ec);
      if (stopping) return;
      if (ec) {
        if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EMFILE and friends
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (connections >= deps.config->server.max_connections) {
          // Over the connection cap: answer 503 right here and close.
          Response res = Json(http::status::service_unavailable,
                              V1ErrorBody("server_full", "too many connections"), 11, false);
          res.set(http::field::retry_after, "1");
          beast::error_code ignored;
          http::write(socket, res, ignored);
          deps.metrics->RecordRejection("connections");
          continue;
        }
        ++connections;
        sockets.insert(socket.native_handle());
      }
      std::thread([this, s = std::move(socket)]() mutable { Serve(std::move(s)); }).detach();
    }
  }

  void Serve(tcp::socket socket) {
    const int fd = socket.native_handle();
    // Slow clients: every receive and send must progress within client_timeout.
    const double t = deps.config->server.client_timeout_s;
    timeval tv{static_cast<time_t>(t), static_cast<suseconds_t>((t - std::floor(t)) * 1e6)};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string peer;
    {
      beast::error_code ec;
      auto ep = socket.remote_endpoint(ec);
      if (!ec) peer = ep.address().to_string();
    }
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      // The body's limit is decided once the headers are in (Admit), so the
      // headers are read without one.
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      parser.header_limit(64 * 1024);
      beast::error_code ec;
      {
        std::lock_guard<std::mutex> lock(mu);
        reading[fd] = Clock::now();
      }
      auto stop_reading = [&] {
        std::lock_guard<std::mutex> lock(mu);
        reading.erase(fd);
      };
      http::read_header(socket, buffer, parser, ec);
      if (ec) {  // closed, timed out, or malformed: drop the connection
        stop_reading();
        break;
      }
      // Key, route and body size are checked before a byte of the body is
      // read: an unauthenticated or oversized upload costs no memory.
      const auto started = Clock::now();
      Gate gate = Admit(parser.get(), peer);
      const auto length = parser.content_length();
      const bool has_body = parser.chunked() || (length && *length > 0);
      if (!gate.refusal && has_body && length && *length > gate.body_limit) {
        gate.refusal = TooLarge(gate.body_limit, parser.get().version());
      }
      BodyReservation reservation(this);
      if (!gate.refusal && has_body && !reservation.Take(length ? *length : gate.body_limit)) {
        Response res = Json(
            http::status::service_unavailable,
            V1ErrorBody("server_busy", "the server is receiving too many request bodies; retry"),
            parser.get().version(), false);
        res.set(http::field::retry_after, "1");
        deps.metrics->RecordRejection("bodies_in_flight");
        gate.refusal = std::move(res);
      }
      if (gate.refusal) {
        stop_reading();
        Response& res = *gate.refusal;
        res.set(http::field::server, "kiln");
        res.set("X-Request-Id", request_id);
        // The body (if any) is not read: the connection cannot go on.
        if (has_body) res.keep_alive(false);
        LogRequest(parser.get(), res, started, peer);
        http::write(socket, res, ec);
        if (ec || !res.keep_alive()) {
          // Drain what the client still sends, so that it reads the answer
          // rather than a reset (bounded in bytes and time).
          if (!ec && has_body) DrainBeforeClose(fd, length.value_or(kMaxDrainBytes));
          break;
        }
        continue;
      }
      if (has_body) {
        const auto expect = parser.get().find(http::field::expect);
        if (expect != parser.get().end() && beast::iequals(expect->value(), "100-continue")) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          if (!BoundedWrite(fd, kContinue, deps.config->server.client_timeout_s)) {
            stop_reading();
            break;
          }
        }
        parser.body_limit(gate.body_limit);  // chunked bodies are counted as they come
        http::read(socket, buffer, parser, ec);
      }
      stop_reading();
      if (ec == http::error::body_limit) {
        Response res = TooLarge(gate.body_limit, parser.get().version());
        res.set(http::field::server, "kiln");
        res.set("X-Request-Id", request_id);
        LogRequest(parser.get(), res, started, peer);
        http::write(socket, res, ec);
        if (!ec) DrainBeforeClose(fd, kMaxDrainBytes);
        break;
      }
      if (ec) break;  // closed, timed out, or malformed: drop the connection
      Request req = parser.release();
      const bool keep_alive = req.keep_alive() && !stopping;
      streamed = false;
      Response res = Handle(req, peer, socket, gate.key, started);
      if (streamed) break;  // the handler wrote an event stream; it ends the connection
      res.keep_alive(keep_alive && res.keep_alive());
      http::write(socket, res, ec);
      if (ec || !res.keep_alive()) break;
    }
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    std::lock_guard<std::mutex> lock(mu);
    sockets.erase(fd);
    socket.close(ignored);
    --connections;
    cv.notify_all();
  }

  // What a request may do, decided from its headers alone.
  struct Gate {
    std::optional<Response> refusal;    // answered without reading the body
    std::optional<store::KeyInfo> key;  // set for every route that needs one
    uint64_t body_limit = 0;
  };

  Gate Admit(const Request& head, const std::string& peer) {
    Gate gate;
    gate.body_limit = deps.config->server.max_body_bytes;
    request_id = NewId().substr(0, 16);
    request_tenant = "-";
    std::string target(head.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    const std::string method(head.method_string());
    const RouteMatch match = MatchPath(target);
    const unsigned v = head.version();
    // E2B's routes (src/server/e2b.h): its API by the key, in E2B's error
    // shape; its in-sandbox routes by the sandbox's access token (e2b::Front).
    if (const auto kind = e2b ? e2b::Classify(head) : e2b::Kind::kNone; kind != e2b::Kind::kNone) {
      if (kind == e2b::Kind::kApi) {
        auto auth = Authenticate(head);
        if (!auth.ok() || !*auth) {
          const int status = auth.ok() ? 401 : 503;
          if (auth.ok() && deps.events != nullptr) deps.events->AuthFailure(peer);
          const e2b::Reply r =
              e2b::Error(status, auth.ok() ? "a valid kiln API key is required in X-API-KEY"
                                           : auth.error().message);
          gate.refusal =
              Json(static_cast<http::status>(status), nlohmann::json::parse(r.body), v, true);
        } else {
          gate.key = **auth;
          // A quarantined tenant (docs/api.md, "Operator controls"), in E2B's shape.
          if (auto message = QuarantineMessage(*gate.key)) {
            gate.refusal = Json(http::status::forbidden,
                                nlohmann::json::parse(e2b::Error(403, *message).body), v, true);
          }
        }
      } else if (auto refused = e2b->Refusal(head)) {
        gate.refusal = Json(static_cast<http::status>(refused->status),
                            nlohmann::json::parse(refused->body), v, true);
      }
      return gate;
    }
    switch (Classify(method, target, match)) {
      case Access::kOpen: return gate;
      case Access::kNotFound:
        gate.refusal =
            Json(http::status::not_found, V1ErrorBody("not_found", "no route " + target), v, true);
        return gate;
      case Access::kMethodNotAllowed:
        gate.refusal = Json(
            http::status::method_not_allowed,
            V1ErrorBody("method_not_allowed", method + " is not allowed on " + target), v, true);
        return gate;
      case Access::kReference: {
        auto auth = Authenticate(head);
        if (!auth.ok()) {
          gate.refusal =
              Json(http::status::service_unavailable, {{"detail", auth.error().message}}, v, true);
          gate.refusal->set(http::field::retry_after, "5");
        } else if (!*auth) {
          if (deps.events != nullptr) deps.events->AuthFailure(peer);
          gate.refusal = Json(http::status::unauthorized, {{"detail", "Invalid API Key"}}, v, true);
        } else {
          gate.key = **auth;
          gate.refusal = Quarantined(*gate.key, v, /*reference=*/true);
        }
        return gate;
      }
      case Access::kAdmin: {
        auto auth = Authenticate(head);
        if (!auth.ok()) {
          gate.refusal = Json(http::status::service_unavailable,
                              V1ErrorBody("unavailable", auth.error().message), v, true);
          gate.refusal->set(http::field::retry_after, "5");
        } else if (!*auth) {
          if (deps.events != nullptr) deps.events->AuthFailure(peer);
          gate.refusal =
              Json(http::status::unauthorized,
                   V1ErrorBody("unauthenticated", "a valid admin API key is required"), v, true);
          gate.refusal->set(http::field::www_authenticate, "Bearer");
        } else if (!(*auth)->admin) {
          // Exactly the 404 of a route that does not exist.
          gate.refusal = Json(http::status::not_found,
                              V1ErrorBody("not_found", "no route " + target), v, true);
        } else {
          gate.key = **auth;
        }
        return gate;
      }
      case Access::kKey: {
        auto auth = Authenticate(head);
        if (!auth.ok()) {
          gate.refusal = Json(http::status::service_unavailable,
                              V1ErrorBody("unavailable", auth.error().message), v, true);
          gate.refusal->set(http::field::retry_after, "5");
        } else if (!*auth) {
          if (deps.events != nullptr) deps.events->AuthFailure(peer);
          gate.refusal = Json(http::status::unauthorized,
                              V1ErrorBody("unauthenticated",
                                          "a valid API key is required (Authorization: "
                                          "Bearer KEY or X-API-Key: KEY)"),
                              v, true);
          gate.refusal->set(http::field::www_authenticate, "Bearer");
        } else {
          gate.key = **auth;
          gate.refusal = Quarantined(*gate.key, v, /*reference=*/false);
          // The larger limit of the files API, for its callers only.
          if (method == "PUT" && match.pattern == "/v1/sessions/{id}/files/{path}") {
            gate.body_limit = std::max(gate.body_limit, deps.config->server.max_file_bytes);
          }
        }
        return gate;
      }
    }
    return gate;
  }

  enum class Access { kOpen, kReference, kKey, kAdmin, kNotFound, kMethodNotAllowed };

  // A quarantined tenant's key (admin keys never are): 403 with the reason.
  std::optional<Response> Quarantined(const store::KeyInfo& key, unsigned v, bool reference) {
    auto message = QuarantineMessage(key);
    if (!message) return std::nullopt;
    return Json(http::status::forbidden,
                reference ? nlohmann::json{{"detail", *message}}
                          : V1ErrorBody("tenant_quarantined", *message),
                v, true);
  }
  std::optional<std::string> QuarantineMessage(const store::KeyInfo& key) const {
    if (deps.controls == nullptr || key.admin) return std::nullopt;
    auto reason = deps.controls->QuarantineReason(key.tenant);
    if (!reason) return std::nullopt;
    return "tenant '" + key.tenant + "' is quarantined: " + *reason;
  }

  // Which routes need a key, from the method and path alone.
  static Access Classify(const std::string& method, const std::string& target,
                         const RouteMatch& match) {
    const std::string route = method + " " + target;
    if (route == "GET /healthz" || route == "GET /readyz" || route == "GET /metrics" ||
        route == "GET /openapi.json") {
      return Access::kOpen;
    }
    if (route == "POST /execute") return Access::kReference;
    if (route == "POST /v1/execute" || route == "GET /v1/stats" || route == "GET /v1/profiles" ||
        target == "/mcp") {
      return Access::kKey;
    }
    // The web pages (docs/adr/0016): open, like /openapi.json; they hold no
    // data, and every call they make carries the key the person typed.
    if (IsWebPath(target)) return method == "GET" ? Access::kOpen : Access::kMethodNotAllowed;
    const bool known_path = KnownPath(match.pattern);
    // Admin routes: a tenant's key gets 404, as for a route that does not exist.
    if (target.rfind("/v1/admin/", 0) == 0) return known_path ? Access::kAdmin : Access::kNotFound;
    // Sessions answer 405 themselves, after the key (their ids are secret).
    if (known_path && match.pattern.rfind("/v1/sessions", 0) == 0) return Access::kKey;
    return known_path ? Access::kMethodNotAllowed : Access::kNotFound;
  }

  static Response TooLarge(uint64_t limit, unsigned version) {
    return Json(http::status::payload_too_large,
                V1ErrorBody("body_too_large",
                            "the request body is over " + std::to_string(limit) + " bytes", "body"),
                version, false);
  }

  // Bytes of request bodies being received or held (server.max_bodies_in_flight).
  uint64_t bodies_in_flight = 0;  // guarded by mu
  class BodyReservation final {
   public:
    explicit BodyReservation(Impl* impl) : impl_(impl) {}
    ~BodyReservation() {
      if (bytes_ == 0) return;
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->bodies_in_flight -= bytes_;
    }
    BodyReservation(const BodyReservation&) = delete;
    BodyReservation& operator=(const BodyReservation&) = delete;
    bool Take(uint64_t bytes) {
      std::lock_guard<std::mutex> lock(impl_->mu);
      if (impl_->bodies_in_flight + bytes > impl_->deps.config->server.max_bodies_in_flight_bytes)
        return false;
      impl_->bodies_in_flight += bytes;
      bytes_ = bytes;
      return true;
    }

   private:
    Impl* impl_;
    uint64_t bytes_ = 0;
  };

  // A refused body is read and dropped, at most this much, so that the client
  // reads the answer instead of a reset (Python requests sends the whole body
  // before it reads anything).
  static constexpr uint64_t kMaxDrainBytes = 256ULL << 20;

  // Stop sending, then read and discard up to `max` bytes, for at most
  // client_timeout, until the client closes.
  void DrainBeforeClose(int fd, uint64_t max) {
    ::shutdown(fd, SHUT_WR);
    max = std::min(max, kMaxDrainBytes);
    char buf[65536];
    uint64_t total = 0;
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(deps.config->server.client_timeout_s));
    while (total < max && !stopping) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 250))) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        break;
      }
      total += static_cast<uint64_t>(n);
    }
  }

  void ReapSlowClients() {
    const auto limit = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(deps.config->server.client_timeout_s));
    while (!stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      std::lock_guard<std::mutex> lock(mu);
      const auto now = Clock::now();
      for (const auto& [fd, since] : reading) {
        // The connection's thread sees its read fail and closes the socket.
        if (now - since > limit) ::shutdown(fd, SHUT_RDWR);
      }
    }
  }

  // --- routing -------------------------------------------------------------

  // `key`: the caller's, checked by Admit for every route that needs one.
  Response Handle(const Request& req, const std::string& peer, tcp::socket& socket,
                  const std::optional<store::KeyInfo>& key, Clock::time_point started) {
    const int client_fd = socket.native_handle();
    std::string target(req.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    const std::string method(req.method_string());
    const std::string route = method + " " + target;
    Response res;
    const RouteMatch match = MatchPath(target);
    const std::string pattern_route = method + " " + match.pattern;
    if (const auto kind = e2b ? e2b::Classify(req) : e2b::Kind::kNone; kind != e2b::Kind::kNone) {
      res = E2b(req, kind, key, peer, socket);
    } else if (route == "GET /healthz") {
      res = Json(http::status::ok, {{"status", "ok"}}, req.version(), true);
    } else if (route == "GET /readyz") {
      bool ready = Ready();
      nlohmann::json body = deps.readiness;
      body["ready"] = ready;
      if (!deps.spawner->Alive()) body["spawner"] = "dead";
      if (stopping) body["shutting_down"] = true;
      if (deps.controls != nullptr) {
        const store::LockdownState lockdown = deps.controls->lockdown();
        body["lockdown"] = admin::Controls::LockdownJson(lockdown);
        if (lockdown.on) {
          ready = false;
          body["ready"] = false;
        }
      }
      // The warm pool in plain sight (informational: a pool that is off or
      // refilling does not make the node unready; executions start cold).
      auto pool = deps.spawner->PoolStatus();
      body["pool"] = pool.ok() ? *pool : nlohmann::json{{"error", pool.error().message}};
      res = Json(ready ? http::status::ok : http::status::service_unavailable, body, req.version(),
                 true);
    } else if (route == "GET /metrics") {
      deps.metrics->SetActive(deps.admission->active());
      deps.metrics->SetQueued(deps.admission->queued());
      if (deps.sessions != nullptr)
        deps.metrics->SetSessions(static_cast<int64_t>(deps.sessions->live()));
      if (auto pool = deps.spawner->PoolStatus(); pool.ok())
        deps.metrics->SetPool(PoolProfilesOf(*pool));
      res = Response{http::status::ok, req.version()};
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = deps.metrics->Render();
      res.prepare_payload();
    } else if (route == "GET /openapi.json") {
      res = Response{http::status::ok, req.version()};
      res.set(http::field::content_type, "application/json");
      res.body() = std::string(OpenApiText());
      res.prepare_payload();
    } else if (method == "GET" && IsWebPath(target)) {
      res = WebPage(req, target);
    } else if (!key) {
      // Admit refuses every other route without a key; never reached.
      res = Json(http::status::internal_server_error, V1ErrorBody("internal", "no key checked"),
                 req.version(), false);
    } else if (route == "POST /v1/execute") {
      res = ExecuteV1(req, *key, peer, socket);
    } else if (route == "GET /v1/stats") {
      res = Json(http::status::ok, Stats(), req.version(), true);
    } else if (route == "GET /v1/profiles") {
      res = Json(http::status::ok, Profiles(), req.version(), true);
    } else if (match.pattern.rfind("/v1/sessions", 0) == 0) {
      res = SessionRoute(req, *key, peer, socket, pattern_route, match);
    } else if (match.pattern.rfind("/v1/admin/", 0) == 0) {
      res = AdminRoute(req, *key, peer, socket, pattern_route, match);
    } else if (route == "POST /execute") {
      res = ExecuteReference(req, *key, peer, client_fd);
    } else {  // /mcp
      res = Mcp(req, *key, peer, socket);
    }
    res.set(http::field::server, "kiln");
    res.set("X-Request-Id", request_id);
    LogRequest(req, res, started, peer);
    return res;
  }

  // /readyz's verdict: ready at start, the spawner running, not stopping, and
  // no lockdown.
  bool Ready() const {
    return deps.readiness.value("ready", false) && deps.spawner->Alive() && !stopping &&
           (deps.controls == nullptr || !deps.controls->lockdown().on) &&
           !(deps.draining && deps.draining());
  }

  // GET /v1/stats: the operator console's numbers (docs/api.md). The same
  // server-wide figures /metrics already shows anyone, as JSON, plus latency
  // percentiles over the last minute.
  nlohmann::json Stats() {
    constexpr auto kWindow = std::chrono::seconds(60);
    const metrics::Metrics::Snapshot snap = deps.metrics->Snap(kWindow);
    nlohmann::json latency = {{"window_s", kWindow.count()},
                              {"count", snap.recent_seconds.size()},
                              {"p50", nullptr},
                              {"p90", nullptr},
                              {"p99", nullptr},
                              {"max", nullptr}};
    if (!snap.recent_seconds.empty()) {
      latency["p50"] = metrics::Metrics::Quantile(snap.recent_seconds, 0.5) * 1e3;
      latency["p90"] = metrics::Metrics::Quantile(snap.recent_seconds, 0.9) * 1e3;
      latency["p99"] = metrics::Metrics::Quantile(snap.recent_seconds, 0.99) * 1e3;
      latency["max"] = metrics::Metrics::Quantile(snap.recent_seconds, 1.0) * 1e3;
    }
    auto pool = deps.spawner->PoolStatus();
    return {
        {"time_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()},
        {"ready", Ready()},
        {"executions", snap.executions},
        {"rejections", snap.rejections},
        {"latency_ms", latency},
        {"active", deps.admission->active()},
        {"queued", deps.admission->queued()},
        {"concurrency", deps.admission->limit()},
        {"queue", deps.config->server.queue},
        {"sessions_live", deps.sessions != nullptr
                              ? nlohmann::json(static_cast<int64_t>(deps.sessions->live()))
                              : nlohmann::json(nullptr)},
        {"pool", pool.ok() ? *pool : nlohmann::json{{"error", pool.error().message}}},
    };
  }

  // GET /v1/profiles: the profiles a request may name, with their default and
  // maximum limits (docs/api.md).
  nlohmann::json Profiles() const {
    auto limits = [](const config::LimitSpec& l) {
      nlohmann::json j = nlohmann::json::object();
      if (l.timeout_s) j["timeout_s"] = *l.timeout_s;
      if (l.cpu_time_s) j["cpu_time_s"] = *l.cpu_time_s;
      if (l.memory_bytes) j["memory_bytes"] = *l.memory_bytes;
      if (l.cpus) j["cpus"] = *l.cpus;
      if (l.pids) j["pids"] = *l.pids;
      if (l.output_bytes) j["output_bytes"] = *l.output_bytes;
      if (l.disk_bytes) j["disk_bytes"] = *l.disk_bytes;
      return j;
    };
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [name, p] : deps.config->profiles) {
      list.push_back({{"name", name},
                      {"preload", p.preload},
                      {"pool", p.pool && deps.config->pool.enabled},
                      {"backend", std::string(policy::ToString(p.backend))},
                      {"defaults", limits(p.defaults)},
                      {"max", limits(p.max)}});
    }
    return {{"default", deps.config->server.default_profile}, {"profiles", list}};
  }

  // "/", "/console" and "/ui/...": the web pages' paths (served or not).
  static bool IsWebPath(const std::string& target) {
    return target == "/" || target == "/console" || target.rfind("/ui/", 0) == 0;
  }

  // A web page or asset (src/web): strict CSP, no sniffing, no referrer; the
  // hashed assets cached for good, the pages revalidated (ETag).
  Response WebPage(const Request& req, const std::string& target) {
    const unsigned v = req.version();
    auto secure = [](Response& r) {
      r.set("Content-Security-Policy", std::string(web::kContentSecurityPolicy));
      r.set("X-Content-Type-Options", "nosniff");
      r.set("Referrer-Policy", "no-referrer");
      r.set("X-Frame-Options", "DENY");
      r.set("Cross-Origin-Opener-Policy", "same-origin");
      r.set("Cross-Origin-Resource-Policy", "same-origin");
    };
    const web::Asset* asset = web::Find(target);
    if (asset == nullptr) {
      const std::string_view reason = web::UnavailableReason();
      if (reason.empty() || target.rfind("/ui/", 0) == 0) {
        return Json(http::status::not_found, V1ErrorBody("not_found", "no route " + target), v,
                    true);
      }
      // Built without the pages: say why, as text (never HTML: no markup to escape).
      Response res{http::status::service_unavailable, v};
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.set(http::field::cache_control, "no-store");
      secure(res);
      res.keep_alive(true);
      res.body() = "kiln: " + std::string(reason) +
                   "\nThe HTTP API works as usual: docs/api.md, /openapi.json.\n";
      res.prepare_payload();
      return res;
    }
    Response res{http::status::ok, v};
    secure(res);
    res.set(http::field::etag, std::string(asset->etag));
    res.set(http::field::cache_control,
            asset->immutable ? "public, max-age=31536000, immutable" : "no-cache");
    res.keep_alive(true);
    const auto match = req.find(http::field::if_none_match);
    if (match != req.end() &&
        match->value().find(std::string(asset->etag)) != beast::string_view::npos) {
      res.result(http::status::not_modified);
      res.prepare_payload();
      return res;
    }
    res.set(http::field::content_type, std::string(asset->content_type));
    res.body() = std::string(asset->body);
    res.prepare_payload();
    return res;
  }

  // Metrics and one log line per request. Never the code or its output (P14).
  void LogRequest(const Request& req, const Response& res, Clock::time_point started,
                  const std::string& peer) {
    std::string target(req.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    const RouteMatch match = MatchPath(target);
    const bool known_path = KnownPath(match.pattern);
    const int code = static_cast<int>(res.result_int());
    std::string label = known_path ? match.pattern : "other";
    if (IsWebPath(target)) label = target.rfind("/ui/", 0) == 0 ? "/ui/{asset}" : target;
    deps.metrics->RecordHttp(label, code);
    KILN_LOG_INFO("request id={} peer={} method={} path={} tenant={} status={} duration_ms={:.1f}",
                  request_id, peer, std::string(req.method_string()), target, request_tenant, code,
                  std::chrono::duration<double, std::milli>(Clock::now() - started).count());
  }

  // --- auth ----------------------------------------------------------------

  // nullopt: no valid key (401). An error: the key store failed (503): never
  // treated as either a valid or an invalid key.
  Result<std::optional<store::KeyInfo>> Authenticate(const Request& req) {
    std::string key;
    if (auto it = req.find(http::field::authorization); it != req.end()) {
      const std::string v(it->value());
      if (v.size() > 7 && (v.compare(0, 7, "Bearer ") == 0 || v.compare(0, 7, "bearer ") == 0)) {
        key = v.substr(7);
      }
    }
    if (key.empty()) {
      if (auto it = req.find("X-API-Key"); it != req.end()) key = std::string(it->value());
    }
    if (key.empty()) return std::optional<store::KeyInfo>();
    auto info = deps.store->Authenticate(key);
    if (!info.ok()) {
      KILN_LOG_ERROR("key store: {}", info.error().ToString());
      return MakeError(Code::kUnavailable, "the key store is unavailable");
    }
    if (*info) request_tenant = (*info)->tenant;
    return *info;
  }

  // --- execution -----------------------------------------------------------

  // Per connection thread: the request being handled, for its log line.
  static thread_local std::string request_id;
  static thread_local std::string request_tenant;
  static thread_local bool streamed;  // the handler wrote the response itself (SSE)

  Response Rejected(const admission::Rejection& r, unsigned version, bool reference) {
    const auto status =
        r.tenant_quota ? http::status::too_many_requests : http::status::service_unavailable;
    nlohmann::json body = reference ? nlohmann::json{{"detail", r.error.message}}
                                    : V1ErrorBody(r.reason, r.error.message);
    Response res = Json(status, body, version, true);
    res.set(http::field::retry_after, std::to_string(std::max(1, r.retry_after_s)));
    return res;
  }

  // An error of a /v1 call as its JSON response (the one table, P7).
  Response V1Error(const Error& e, unsigned version) {
    const std::string code = ApiCodeOf(e);
    const HttpError h = HttpErrorOf(code);
    Response res = Json(h.status, V1ErrorBody(code, e.message, e.field), version, true);
    if (h.retry_after) res.set(http::field::retry_after, "1");
    return res;
  }

  Response ExecuteV1(const Request& req, const store::KeyInfo& key, const std::string& peer,
                     tcp::socket& socket) {
    const int client_fd = socket.native_handle();
    V1Request parsed;
    if (auto e = ParseV1Execute(req.body(), deps.config->server.default_profile, &parsed)) {
      return Json(http::status::bad_request, V1ErrorBody(e->code, e->message, e->field),
                  req.version(), true);
    }
    std::optional<SseWriter> sse;
    spawner::EventFn on_event;
    if (WantsEventStream(req)) {
      sse.emplace(socket, request_id, deps.config->server.client_timeout_s);
      on_event = [&sse](std::string_view event, const nlohmann::json& data) {
        sse->Event(event, data);
      };
    }
    executions::Outcome out = deps.executions->RunOneShot(
        parsed.exec, executions::Caller{key.tenant, key.id, peer}, client_fd, on_event, request_id);
    if (out.rejection) return Rejected(*out.rejection, req.version(), false);
    if (out.error) {
      if (sse && sse->started()) return StreamError(&*sse, *out.error);
      return V1Error(*out.error, req.version());
    }
    nlohmann::json body = executions::ResultJson(*out.response);
    body["id"] = out.id;
    if (parsed.return_files) {
      nlohmann::json files = nlohmann::json::array();
      for (const auto& f : out.response->result.returned_files) {
        files.push_back({{"path", f.path},
                         {"size", f.content.size()},
                         {"content_base64", Base64Encode(f.content)}});
      }
      body["files"] = files;
    }
    if (sse) return StreamDone(&*sse, body);
    return Json(http::status::ok, body, req.version(), true);
  }

  // Ends an event stream with its "done" event (the whole result, or the
  // error body). The returned response is not sent (streamed).
  Response StreamDone(SseWriter* sse, const nlohmann::json& done) {
    sse->Event("done", done);
    sse->End();
    streamed = true;
    return Response{http::status::ok, 11};  // for the log line: the stream began with 200
  }
  // An error after the stream began: "done" carries the error body.
  Response StreamError(SseWriter* sse, const Error& e) {
    return StreamDone(sse, nlohmann::json::parse(V1Error(e, 11).body(), nullptr, false));
  }

  Response ExecuteReference(const Request& req, const store::KeyInfo& key, const std::string& peer,
                            int client_fd) {
    // The reference design's contract, exactly (docs/api.md, "POST /execute");
    // its 401 and 503 are Admit's.
    ReferenceRequest parsed;
    if (auto e = ParseReferenceExecute(req.body(), deps.config->server.default_profile, &parsed)) {
      return Json(http::status::unprocessable_entity, ReferenceValidationBody(*e), req.version(),
                  true);
    }
    executions::Outcome out =
        deps.executions->RunOneShot(parsed.exec, executions::Caller{key.tenant, key.id, peer},
                                    client_fd, /*on_event=*/{}, request_id);
    if (out.rejection) return Rejected(*out.rejection, req.version(), true);
    if (out.error) {
      // The one table, but a bad field is the reference's 422.
      const Error& e = *out.error;
      const HttpError h = HttpErrorOf(ApiCodeOf(e));
      const bool invalid = e.code == Code::kInvalidArgument;
      nlohmann::json body =
          invalid ? ReferenceValidationBody(FieldError{e.field, "value_error", e.message})
                  : nlohmann::json{{"detail", e.message}};
      Response res =
          Json(invalid ? http::status::unprocessable_entity : h.status, body, req.version(), true);
      if (h.retry_after) res.set(http::field::retry_after, "1");
      return res;
    }
    const supervisor::ExecutionResult& r = out.response->result;
    if (r.outcome == supervisor::Outcome::kTimeout) {
      return Json(http::status::request_timeout,
                  {{"detail", "Execution timeout after " + FormatSeconds(parsed.timeout_s) + " s"}},
                  req.version(), true);
    }
    int exit_code = 0;
    if (r.exit_code >= 0) {
      exit_code = r.exit_code;
    } else if (r.signal > 0) {
      exit_code = 128 + r.signal;  // as a container's exit code would say
    } else {
      exit_code = r.outcome == supervisor::Outcome::kOk ? 0 : 1;
    }
    nlohmann::json body = {{"task_id", out.id},
                           {"stdout", r.stdout_data},
                           {"stderr", r.stderr_data},
                           {"exit_code", exit_code},
                           {"execution_time", r.duration_ms / 1e3}};
    if (parsed.return_output_files) {
      nlohmann::json files = nlohmann::json::object();
      for (const auto& f : r.returned_files) files[f.path] = f.content;  // text, as the reference
      body["output_files"] = files;
    } else {
      body["output_files"] = nullptr;
    }
    return Json(http::status::ok, body, req.version(), true);
  }

  // --- E2B (docs/e2b.md) -----------------------------------------------------

  Response E2b(const Request& req, e2b::Kind kind, const std::optional<store::KeyInfo>& key,
               const std::string& peer, tcp::socket& socket) {
    e2b::Reply reply;
    if (kind == e2b::Kind::kApi) {
      // Admit refuses the API without a key.
      reply = key ? e2b->Api(req, *key, peer) : e2b::Error(401, "no key checked");
    } else {
      McpSseWriter writer(socket, request_id, deps.config->server.client_timeout_s);
      reply = e2b->Sandbox(req, peer, &writer, socket.native_handle());
    }
    if (reply.streamed) {
      streamed = true;
      return Response{http::status::ok, 11};  // for the log line: the stream began with 200
    }
    Response res{static_cast<http::status>(reply.status), req.version()};
    for (const auto& [name, value] : reply.headers) res.set(name, value);
    res.keep_alive(true);
    res.body() = std::move(reply.body);
    res.prepare_payload();
    return res;
  }

  // --- MCP (docs/mcp.md) -----------------------------------------------------

  Response Mcp(const Request& req, const store::KeyInfo& key, const std::string& peer,
               tcp::socket& socket) {
    if (!mcp)
      return Json(http::status::service_unavailable, V1ErrorBody("unavailable", "sessions are off"),
                  req.version(), true);
    auto header = [&req](std::string_view name) -> std::optional<std::string> {
      auto it = req.find(boost::beast::string_view(name.data(), name.size()));
      if (it == req.end()) return std::nullopt;
      return std::string(it->value());
    };
    mcp::HttpRequest m;
    m.method = std::string(req.method_string());
    m.accept = header("Accept").value_or("");
    m.content_type = header("Content-Type").value_or("");
    m.origin = header("Origin").value_or("");
    m.session_id = header("Mcp-Session-Id");
    m.protocol_version = header("MCP-Protocol-Version");
    m.body = req.body();
    m.tenant = key.tenant;
    m.key_id = key.id;
    m.peer = peer;
    McpSseWriter sse(socket, request_id, deps.config->server.client_timeout_s);
    auto reply = mcp->Handle(m, &sse);
    if (!reply) {
      streamed = true;
      return Response{http::status::ok, 11};  // for the log line: the stream began with 200
    }
    Response res{static_cast<http::status>(reply->status), req.version()};
    for (const auto& [name, value] : reply->headers) res.set(name, value);
    res.keep_alive(true);
    res.body() = std::move(reply->body);
    res.prepare_payload();
    return res;
  }

  // --- Operator controls (docs/api.md, "Operator controls") -------------------

  // The query string's parameters, percent-decoded (nullopt: a malformed escape).
  static std::optional<std::map<std::string, std::string>> QueryOf(const Request& req) {
    std::map<std::string, std::string> out;
    const std::string target(req.target());
    const auto q = target.find('?');
    if (q == std::string::npos) return out;
    std::string_view rest = std::string_view(target).substr(q + 1);
    while (!rest.empty()) {
      const auto amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      if (pair.empty()) continue;
      const auto eq = pair.find('=');
      std::string plus(pair.substr(eq == std::string_view::npos ? pair.size() : eq + 1));
      for (char& c : plus) c = c == '+' ? ' ' : c;
      auto key = PercentDecode(pair.substr(0, eq));
      auto value = PercentDecode(plus);
      if (!key || !value) return std::nullopt;
      out[*key] = *value;
    }
    return out;
  }

  static Response BadField(const std::string& field, const std::string& message, unsigned v) {
    return Json(http::status::bad_request, V1ErrorBody("invalid_value", message, field), v, true);
  }

  // A JSON object body (empty: {}), with only `allowed` members.
  static std::optional<Response> ObjectBody(const Request& req,
                                            const std::vector<std::string>& allowed,
                                            nlohmann::json* out) {
    *out = req.body().empty() ? nlohmann::json::object()
                              : nlohmann::json::parse(req.body(), nullptr, false);
    if (!out->is_object()) return BadField("body", "the body must be a JSON object", req.version());
    for (const auto& [k, _] : out->items()) {
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        return BadField(k, k + ": unknown field", req.version());
      }
    }
    return std::nullopt;
  }

  Response AdminRoute(const Request& req, const store::KeyInfo& key, const std::string& peer,
                      tcp::socket& socket, const std::string& route, const RouteMatch& m) {
    const unsigned v = req.version();
    if (deps.controls == nullptr || deps.events == nullptr) {
      return Json(http::status::service_unavailable,
                  V1ErrorBody("unavailable", "operator controls are off"), v, true);
    }
    const admin::Actor actor{key.id, peer, "key " + key.id};
    if (route == "GET /v1/admin/events") return AdminEvents(req, socket);
    if (route == "GET /v1/admin/tenants") {
      auto tenants = deps.controls->TenantsJson();
      return tenants.ok() ? Json(http::status::ok, *tenants, v, true) : V1Error(tenants.error(), v);
    }
    if (route == "GET /v1/admin/lockdown") {
      return Json(http::status::ok, admin::Controls::LockdownJson(deps.controls->lockdown()), v,
                  true);
    }
    if (route == "POST /v1/admin/lockdown") {
      nlohmann::json body;
      if (auto bad = ObjectBody(req, {"on", "reason"}, &body)) return *bad;
      if (!body.contains("on") || !body["on"].is_boolean())
        return BadField("on", "on: required, true or false", v);
      if (body.contains("reason") && !body["reason"].is_string())
        return BadField("reason", "reason: must be a string", v);
      const std::string reason = body.value("reason", "");
      if (reason.size() > 1000) return BadField("reason", "reason: at most 1000 bytes", v);
      auto state = deps.controls->SetLockdown(body["on"].get<bool>(), reason, actor);
      return state.ok() ? Json(http::status::ok, admin::Controls::LockdownJson(*state), v, true)
                        : V1Error(state.error(), v);
    }
    if (route == "POST /v1/admin/tenants/{tenant}/quarantine") {
      nlohmann::json body;
      if (auto bad = ObjectBody(req, {"reason"}, &body)) return *bad;
      if (body.contains("reason") && !body["reason"].is_string())
        return BadField("reason", "reason: must be a string", v);
      const std::string reason = body.value("reason", "");
      if (reason.size() > 1000) return BadField("reason", "reason: at most 1000 bytes", v);
      auto row = deps.controls->Quarantine(m.id, reason, actor);
      if (!row.ok()) return V1Error(row.error(), v);
      return Json(http::status::ok,
                  {{"tenant", row->tenant},
                   {"quarantine",
                    {{"since", store::FormatTimeMs(row->since_ms, true)},
                     {"reason", row->reason},
                     {"by", row->by}}}},
                  v, true);
    }
    if (route == "POST /v1/admin/tenants/{tenant}/release") {
      auto was = deps.controls->Release(m.id, actor);
      if (!was.ok()) return V1Error(was.error(), v);
      return Json(http::status::ok, {{"tenant", m.id}, {"released", *was}, {"quarantine", nullptr}},
                  v, true);
    }
    if (route == "POST /v1/admin/keys/{id}/revoke") {
      Status st = deps.controls->RevokeKey(m.id, actor);
      if (!st.ok()) {
        Error e = st.error();
        if (e.code == Code::kInvalidArgument) e.field = "id";
        return V1Error(e, v);
      }
      return Json(http::status::ok, {{"id", m.id}, {"revoked", true}}, v, true);
    }
    return Json(
        http::status::method_not_allowed,
        V1ErrorBody("method_not_allowed", std::string(req.method_string()) + " is not allowed on " +
                                              std::string(req.target())),
        v, true);
  }

  // GET /v1/admin/events: JSON {"events": [...]} (newest first; with `after`,
  // oldest first from it), or with Accept: text/event-stream the events as
  // they are recorded (after `after` or Last-Event-ID, if given), until the
  // client goes away or the server stops.
  Response AdminEvents(const Request& req, tcp::socket& socket) {
    const unsigned v = req.version();
    auto query = QueryOf(req);
    if (!query) return BadField("query", "a malformed %-escape in the query string", v);
    store::EventQuery q;
    for (const auto& [name, value] : *query) {
      if (name == "kind") {
        if (!executions::ParseEventKind(value)) {
          return BadField(
              "kind",
              "kind: '" + value.substr(0, 80) + "' is not one of " + executions::EventKindNames(),
              v);
        }
        q.kind = value;
      } else if (name == "tenant") {
        if (!store::IsValidTenant(value)) return BadField("tenant", "tenant: not a tenant name", v);
        q.tenant = value;
      } else if (name == "since") {
        auto since = store::ParseTimeSpec(value, store::NowMs());
        if (!since.ok()) return BadField("since", "since: " + since.error().message, v);
        q.since_ms = *since;
      } else if (name == "after" || name == "limit") {
        int64_t n = -1;
        try {
          size_t used = 0;
          n = std::stoll(value, &used);
          if (used != value.size()) n = -1;
        } catch (...) {
          n = -1;
        }
        if (name == "after") {
          if (n < 0) return BadField("after", "after: a non-negative event id", v);
          q.after_id = n;
        } else {
          if (n < 1 || n > 1000) return BadField("limit", "limit: 1..1000", v);
          q.limit = static_cast<int>(n);
        }
      } else {
        return BadField(name,
                        name.substr(0, 80) +
                            ": unknown parameter (known: kind, tenant, "
                            "since, after, limit)",
                        v);
      }
    }
    if (!WantsEventStream(req)) {
      q.oldest_first = q.after_id.has_value();
      auto rows = deps.store->QueryEvents(q);
      if (!rows.ok()) return V1Error(rows.error(), v);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& r : *rows) list.push_back(executions::EventJson(r));
      return Json(http::status::ok, {{"events", list}}, v, true);
    }
    if (auto it = req.find("Last-Event-ID"); it != req.end()) {
      try {
        q.after_id = std::stoll(std::string(it->value()));
      } catch (...) {
        return BadField("Last-Event-ID", "Last-Event-ID: an event id", v);
      }
    }
    return AdminEventStream(q, socket);
  }

  Response AdminEventStream(store::EventQuery q, tcp::socket& socket) {
    struct Queue {
      std::mutex mu;
      std::condition_variable cv;
      std::deque<store::EventRow> rows;
      bool overflowed = false;
    };
    auto queue = std::make_shared<Queue>();
    // Subscribed before the backlog is read: nothing recorded in between is lost
    // (what both hold is sent once, by id).
    const int handle = deps.events->Subscribe([queue](const store::EventRow& r) {
      std::lock_guard<std::mutex> lock(queue->mu);
      if (queue->rows.size() >= 10000) {
        queue->overflowed = true;  // a reader that cannot keep up is dropped
        return;
      }
      queue->rows.push_back(r);
      queue->cv.notify_one();
    });
    SseWriter sse(socket, request_id, deps.config->server.client_timeout_s);
    int64_t last = 0;
    auto matches = [&q](const store::EventRow& r) {
      return (!q.kind || r.kind == *q.kind) && (!q.tenant || r.tenant == *q.tenant) &&
             (!q.since_ms || r.at_ms >= *q.since_ms);
    };
    auto send = [&](const store::EventRow& r) {
      if (r.id <= last || !matches(r)) return;
      last = r.id;
      sse.Event("security_event", executions::EventJson(r), r.id);
    };
    sse.Comment("kiln security events");
    if (q.after_id) {
      store::EventQuery backlog = q;
      backlog.oldest_first = true;
      backlog.limit = 1000;
      auto rows = deps.store->QueryEvents(backlog);
      if (rows.ok()) {
        for (const auto& r : *rows) send(r);
      }
    }
    auto idle_since = Clock::now();
    while (!sse.failed() && !stopping) {
      std::deque<store::EventRow> batch;
      bool overflowed = false;
      {
        std::unique_lock<std::mutex> lock(queue->mu);
        queue->cv.wait_for(lock, std::chrono::milliseconds(500),
                           [&queue] { return !queue->rows.empty() || queue->overflowed; });
        batch.swap(queue->rows);
        overflowed = queue->overflowed;
      }
      if (overflowed) break;
      for (const auto& r : batch) send(r);
      if (!batch.empty()) {
        idle_since = Clock::now();
      } else if (Clock::now() - idle_since > std::chrono::seconds(15)) {
        sse.Comment("keep-alive");
        idle_since = Clock::now();
      }
      // A client that hung up: its socket reads EOF.
      char c;
      if (::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) break;
    }
    deps.events->Unsubscribe(handle);
    sse.End();
    streamed = true;
    return Response{http::status::ok, 11};  // for the log line: the stream began with 200
  }

  // --- sessions --------------------------------------------------------------

  Response SessionRoute(const Request& req, const store::KeyInfo& key, const std::string& peer,
                        tcp::socket& socket, const std::string& route, const RouteMatch& m) {
    const unsigned v = req.version();
    if (deps.sessions == nullptr) {
      return Json(http::status::service_unavailable, V1ErrorBody("unavailable", "sessions are off"),
                  v, true);
    }
    const sessions::Caller caller{key.tenant, key.id, peer};
    auto no_content = [v] {
      Response res{http::status::no_content, v};
      res.keep_alive(true);
      res.prepare_payload();
      return res;
    };
    if (route == "POST /v1/sessions") {
      sessions::SessionOptions options;
      if (auto e = ParseSessionCreate(req.body(), &options)) {
        return Json(http::status::bad_request, V1ErrorBody(e->code, e->message, e->field), v, true);
      }
      auto created = deps.sessions->Create(caller, options);
      if (!created.ok()) return V1Error(created.error(), v);
      Response res = Json(http::status::created, *created, v, true);
      res.set(http::field::location, "/v1/sessions/" + created->value("id", ""));
      return res;
    }
    if (route == "GET /v1/sessions")
      return Json(http::status::ok, deps.sessions->List(caller), v, true);

    const std::string& id = m.id;
    if (route == "GET /v1/sessions/{id}") {
      auto got = deps.sessions->Get(caller, id);
      return got.ok() ? Json(http::status::ok, *got, v, true) : V1Error(got.error(), v);
    }
    if (route == "DELETE /v1/sessions/{id}") {
      Status st = deps.sessions->Delete(caller, id);
      return st.ok() ? no_content() : V1Error(st.error(), v);
    }
    if (route == "POST /v1/sessions/{id}/interrupt") {
      auto r = deps.sessions->Interrupt(caller, id);
      return r.ok() ? Json(http::status::ok, {{"interrupted", *r}}, v, true)
                    : V1Error(r.error(), v);
    }
    if (route == "POST /v1/sessions/{id}/execute") {
      SessionExecuteRequest parsed;
      if (auto e = ParseSessionExecute(req.body(), &parsed)) {
        return Json(http::status::bad_request, V1ErrorBody(e->code, e->message, e->field), v, true);
      }
      std::optional<SseWriter> sse;
      spawner::EventFn on_event;
      if (WantsEventStream(req)) {
        sse.emplace(socket, request_id, deps.config->server.client_timeout_s);
        on_event = [&sse](std::string_view event, const nlohmann::json& data) {
          sse->Event(event, data);
        };
      }
      auto out = deps.sessions->Execute(caller, id, parsed.code, parsed.timeout_s, on_event,
                                        socket.native_handle());
      if (!out.ok()) {
        if (sse && sse->started()) return StreamError(&*sse, out.error());
        return V1Error(out.error(), v);
      }
      if (out->rejection) return Rejected(*out->rejection, v, false);
      nlohmann::json body = executions::ResultJson(*out->response);
      body["id"] = out->execution_id;
      body["session_id"] = id;
      if (sse) return StreamDone(&*sse, body);
      return Json(http::status::ok, body, v, true);
    }
    if (route == "GET /v1/sessions/{id}/files") {
      auto files = deps.sessions->ListFiles(caller, id);
      return files.ok() ? Json(http::status::ok, {{"files", *files}}, v, true)
                        : V1Error(files.error(), v);
    }
    // /v1/sessions/{id}/files/{path}
    const auto path = PercentDecode(m.path);
    if (!path) {
      return Json(http::status::bad_request,
                  V1ErrorBody("invalid_value",
                              "the path has a malformed %-escape or an encoded NUL", "path"),
                  v, true);
    }
    if (route == "PUT /v1/sessions/{id}/files/{path}") {
      Status st = deps.sessions->PutFile(caller, id, *path, req.body());
      if (!st.ok()) return V1Error(st.error(), v);
      return Json(http::status::created, {{"path", *path}, {"size", req.body().size()}}, v, true);
    }
    if (route == "GET /v1/sessions/{id}/files/{path}") {
      auto bytes = deps.sessions->GetFile(caller, id, *path);
      if (!bytes.ok()) return V1Error(bytes.error(), v);
      Response res{http::status::ok, v};
      res.set(http::field::content_type, "application/octet-stream");
      res.keep_alive(true);
      res.body() = std::move(*bytes);
      res.prepare_payload();
      return res;
    }
    if (route == "DELETE /v1/sessions/{id}/files/{path}") {
      Status st = deps.sessions->DeleteFile(caller, id, *path);
      return st.ok() ? no_content() : V1Error(st.error(), v);
    }
    return Json(
        http::status::method_not_allowed,
        V1ErrorBody("method_not_allowed", std::string(req.method_string()) + " is not allowed on " +
                                              std::string(req.target())),
        v, true);
  }
};

thread_local std::string HttpServer::Impl::request_id;
thread_local std::string HttpServer::Impl::request_tenant;
thread_local bool HttpServer::Impl::streamed = false;

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<HttpServer>> HttpServer::Bind(const std::string& listen, Deps deps) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument("listen: '" + listen + "' is not ADDR:PORT");
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535)
    return InvalidArgument("listen: '" + listen + "' has no valid port");
  auto impl = std::make_unique<Impl>();
  impl->deps = std::move(deps);
  if (impl->deps.sessions != nullptr) {
    // MCP sessions own kiln sessions of the request's tenant (docs/adr/0010).
    const config::Config& cfg = *impl->deps.config;
    mcp::HttpServiceOptions options;
    options.allowed_origins = cfg.server.mcp_allowed_origins;
    options.node_id = impl->deps.node_id;
    options.node_gone = impl->deps.node_gone;
    options.idle_ttl =
        std::chrono::milliseconds(static_cast<int64_t>(cfg.server.session_idle_ttl_s * 1000));
    if (auto profile = cfg.Find(cfg.server.default_profile); profile.ok()) {
      options.engine.limits_text = mcp::LimitsText(**profile);
    }
    sessions::SessionManager* manager = impl->deps.sessions;
    impl->mcp = std::make_unique<mcp::HttpService>(
        [manager](const mcp::HttpRequest& r) {
          return std::make_unique<mcp::LocalBackend>(manager,
                                                     sessions::Caller{r.tenant, r.key_id, r.peer});
        },
        options);
    impl->e2b = std::make_unique<e2b::Front>(&cfg, manager);
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("listen: '" + host + "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return MakeError(Code::kUnavailable, "listen on " + listen + ": " + ec.message());
  const uint16_t bound = impl->acceptor.local_endpoint().port();
  auto server = std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
  server->port_ = bound;
  return server;
}

void HttpServer::Start() {
  impl_->accept_thread = std::thread([this] { impl_->AcceptLoop(); });
  impl_->reaper = std::thread([this] { impl_->ReapSlowClients(); });
}

void HttpServer::Shutdown(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) {
    if (s.accept_thread.joinable()) s.accept_thread.join();
    if (s.reaper.joinable()) s.reaper.join();
    return;
  }
  // 1. Stop accepting.
  beast::error_code ec;
  s.acceptor.cancel(ec);
  ::shutdown(s.acceptor.native_handle(), SHUT_RDWR);
  s.acceptor.close(ec);
  if (s.accept_thread.joinable()) s.accept_thread.join();
  // 2. No new executions; queued ones fail with 503.
  s.deps.admission->BeginShutdown();
  // 3. Running executions get the grace period, then are cancelled.
  s.deps.executions->Drain(grace);
  if (s.mcp) s.mcp->Shutdown();  // its cells, then their sessions
  if (s.deps.sessions != nullptr) s.deps.sessions->Shutdown();
  s.deps.admission->WaitIdle(std::chrono::seconds(30));
  // 4. Idle keep-alive connections: wake their reads so the threads exit.
  std::unique_lock<std::mutex> lock(s.mu);
  for (int fd : s.sockets) ::shutdown(fd, SHUT_RD);
  s.cv.wait_for(lock, std::chrono::seconds(10), [&s] { return s.connections == 0; });
  lock.unlock();
  if (s.reaper.joinable()) s.reaper.join();
}

}  // namespace kiln::server
