#include "mcp/http_backend.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/system/system_error.hpp>
#include <cctype>
#include <utility>

#include "base/log.h"
#include "base/unique_fd.h"

namespace kiln::mcp {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

// Largest answer read: a result with images, a downloaded file.
constexpr uint64_t kMaxReplyBytes = 512ULL << 20;

// A connected non-blocking TCP socket as a Beast SyncReadStream and
// SyncWriteStream whose every read and write waits at most `idle` for
// progress. (Asio's own synchronous calls wait forever once a socket timeout
// fires: they poll again without one.)
class TimedStream {
 public:
  TimedStream(int fd, std::chrono::milliseconds idle) : fd_(fd), idle_(idle) {}
  void set_idle(std::chrono::milliseconds idle) { idle_ = idle; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, beast::error_code& ec) {
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      for (;;) {
        const ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
        if (n > 0) {
          ec = {};
          return static_cast<size_t>(n);
        }
        if (n == 0) {
          ec = asio::error::eof;
          return 0;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          ec.assign(errno, boost::system::system_category());
          return 0;
        }
        if (!Wait(POLLIN, ec)) return 0;
      }
    }
    ec = {};
    return 0;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec)
      throw boost::system::system_error(ec);  // never called: Beast's calls here take an error_code
    return n;
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, beast::error_code& ec) {
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::const_buffer b = *it;
      if (b.size() == 0) continue;
      for (;;) {
        const ssize_t n = ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL);
        if (n >= 0) {
          ec = {};
          return static_cast<size_t>(n);
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          ec.assign(errno, boost::system::system_category());
          return 0;
        }
        if (!Wait(POLLOUT, ec)) return 0;
      }
    }
    ec = {};
    return 0;
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers) {
    beast::error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);  // never called, as above
    return n;
  }

 private:
  bool Wait(short events, beast::error_code& ec) {
    pollfd p{fd_, events, 0};
    for (;;) {
      const int r = ::poll(&p, 1, static_cast<int>(idle_.count()));
      if (r > 0) return true;
      if (r == 0) {
        ec = asio::error::timed_out;
        return false;
      }
      if (errno != EINTR) {
        ec.assign(errno, boost::system::system_category());
        return false;
      }
    }
  }
  int fd_;
  std::chrono::milliseconds idle_;
};

// A non-blocking TCP connection to `endpoint` within `timeout`.
Result<UniqueFd> Connect(const tcp::endpoint& endpoint, std::chrono::milliseconds timeout) {
  UniqueFd fd(
      ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("socket");
  if (::connect(fd.get(), endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0) {
    if (errno != EINPROGRESS) return ErrnoError("connect");
    pollfd p{fd.get(), POLLOUT, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return ErrnoError("connect", ETIMEDOUT);
    if (r < 0) return ErrnoError("poll");
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      return ErrnoError("getsockopt");
    if (err != 0) return ErrnoError("connect", err);
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool IsEventStream(const std::string& content_type) {
  return content_type.rfind("text/event-stream", 0) == 0;
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<HttpUrl> ParseHttpUrl(const std::string& url) {
  const std::string lower = Lower(url);
  if (lower.rfind("https://", 0) == 0) {
    return InvalidArgument(
        "--url: https is not supported: reach kiln serve over http:// on a trusted network or "
        "loopback (a TLS-terminating proxy may sit in front of it for others)");
  }
  if (lower.rfind("http://", 0) != 0)
    return InvalidArgument("--url: '" + url + "' is not an http:// URL");
  std::string rest = url.substr(7);
  HttpUrl out;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) {
    out.prefix = rest.substr(slash);
    while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
    if (out.prefix.find_first_of("?#") != std::string::npos) {
      return InvalidArgument("--url: '" + url + "' must not have a query or fragment");
    }
  }
  if (authority.find('@') != std::string::npos) {
    return InvalidArgument("--url: credentials in the URL are not supported: use --api-key-env");
  }
  std::string port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos)
      return InvalidArgument("--url: '" + url + "' has an unterminated [IPv6] host");
    out.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return InvalidArgument("--url: '" + url + "' is malformed after the host");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) return InvalidArgument("--url: '" + url + "' has no host");
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgument("--url: '" + url + "' has an invalid port");
    }
    const int p = std::stoi(port);
    if (p < 1 || p > 65535) return InvalidArgument("--url: '" + url + "' has an invalid port");
    out.port = static_cast<uint16_t>(p);
  }
  out.host_header = authority;
  return out;
}

std::string EncodePath(const std::string& path) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::vector<SseParser::Event> SseParser::Feed(std::string_view bytes) {
  std::vector<Event> out;
  for (char c : bytes) {
    if (c == '\n' && last_cr_) {  // the \n of a \r\n
      last_cr_ = false;
      continue;
    }
    last_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      Line(line_, &out);
      line_.clear();
    } else {
      line_ += c;
    }
  }
  return out;
}

void SseParser::Line(std::string_view line, std::vector<Event>* out) {
  if (line.empty()) {
    if (has_data_) out->push_back({event_.empty() ? "message" : event_, data_});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment (keep-alive)
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "event") {
    event_ = std::string(value);
  } else if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  }
}

Error ErrorFromReply(int status, const std::string& body) {
  std::string message, code;
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    message = j["error"].value("message", "");
    code = j["error"].value("code", "");
  }
  if (message.empty()) message = body.substr(0, 300);
  if (message.empty()) message = "HTTP " + std::to_string(status);
  switch (status) {
    case 400:
    case 422: return MakeError(Code::kInvalidArgument, message);
    case 401:
      return MakeError(Code::kUnauthenticated, "kiln serve refused the API key: " + message);
    case 403: return MakeError(Code::kPermissionDenied, message);
    case 404: return MakeError(Code::kNotFound, message);
    case 409: return MakeError(Code::kAborted, message);
    case 410: return MakeError(Code::kNotFound, "the session is gone: " + message);
    case 413:
    case 429: return MakeError(Code::kResourceExhausted, message);
    case 503: return MakeError(Code::kUnavailable, message);
    default: break;
  }
  return MakeError(Code::kInternal,
                   "kiln serve answered " + std::to_string(status) + ": " + message);
}

Result<std::unique_ptr<HttpBackend>> HttpBackend::Create(HttpBackendOptions options) {
  KILN_ASSIGN_OR_RETURN(HttpUrl url, ParseHttpUrl(options.url));
  if (options.api_key.empty())
    return InvalidArgument("--api-key: an API key of kiln serve is required");
  if (options.api_key.find_first_of("\r\n") != std::string::npos) {
    return InvalidArgument("--api-key: must be one line");
  }
  return std::unique_ptr<HttpBackend>(new HttpBackend(std::move(options), std::move(url)));
}

Result<std::pair<int, std::string>> HttpBackend::GetPublic(const std::string& url,
                                                           const std::string& route,
                                                           std::chrono::seconds timeout) {
  KILN_ASSIGN_OR_RETURN(HttpUrl parsed, ParseHttpUrl(url));
  HttpBackendOptions o;
  o.url = url;
  o.request_timeout = timeout;
  HttpBackend backend(std::move(o), parsed);
  KILN_ASSIGN_OR_RETURN(Reply r,
                        backend.Exchange("GET", parsed.prefix + route, "", "", "", timeout));
  return std::make_pair(r.status, std::move(r.body));
}

std::string HttpBackend::SessionPath(const std::string& session) const {
  return url_.prefix + "/v1/sessions/" + EncodePath(session);
}

Result<HttpBackend::Reply> HttpBackend::Exchange(
    const std::string& method, const std::string& target, const std::string& body,
    const std::string& content_type, const std::string& accept, std::chrono::seconds timeout,
    const std::function<Status(const SseParser::Event&)>& on_sse) {
  const std::string what = method + " " + target;
  auto fail = [&](const std::string& why) {
    return MakeError(Code::kUnavailable,
                     "kiln serve at " + url_.host_header + ": " + what + ": " + why);
  };
  asio::io_context io;
  beast::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(url_.host, std::to_string(url_.port), ec);
  if (ec) return fail("cannot resolve " + url_.host + ": " + ec.message());
  UniqueFd fd;
  std::string why = "no address";
  for (const auto& e : endpoints) {
    auto c = Connect(e.endpoint(), options_.request_timeout);
    if (c.ok()) {
      fd = std::move(*c);
      break;
    }
    why = c.error().ToString();
  }
  if (!fd) return fail("cannot connect: " + why);
  TimedStream socket(fd.get(), options_.request_timeout);

  const http::verb verb = http::string_to_verb(method);
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, url_.host_header);
  req.set(http::field::user_agent, "kiln-mcp");
  if (!options_.api_key.empty()) req.set(http::field::authorization, "Bearer " + options_.api_key);
  if (!accept.empty()) req.set(http::field::accept, accept);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  req.keep_alive(false);
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req, ec);
  if (ec) return fail("sending the request: " + ec.message());
  socket.set_idle(timeout);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(kMaxReplyBytes);
  parser.header_limit(64 * 1024);
  http::read_header(socket, buffer, parser, ec);
  if (ec) return fail("reading the answer: " + ec.message());
  Reply reply;
  reply.status = static_cast<int>(parser.get().result_int());
  reply.content_type = Lower(std::string(parser.get()[http::field::content_type]));
  const bool stream = on_sse && reply.status == 200 && IsEventStream(reply.content_type);
  SseParser sse;
  uint64_t total = 0;
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    // read_some: events are handed on as they arrive, not when a chunk fills.
    http::read_some(socket, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec && ec != http::error::end_of_stream) return fail("reading the answer: " + ec.message());
    const size_t n = sizeof chunk - parser.get().body().size;
    total += n;
    if (total > kMaxReplyBytes)
      return fail("the answer is over " + std::to_string(kMaxReplyBytes) + " bytes");
    if (stream) {
      for (const auto& event : sse.Feed(std::string_view(chunk, n))) KILN_TRY(on_sse(event));
    } else {
      reply.body.append(chunk, n);
    }
    if (ec == http::error::end_of_stream) break;
  }
  return reply;
}

Result<std::string> HttpBackend::CreateSession() {
  json body = json::object();
  if (!options_.profile.empty()) body["profile"] = options_.profile;
  KILN_ASSIGN_OR_RETURN(
      Reply r, Exchange("POST", url_.prefix + "/v1/sessions", body.dump(), "application/json",
                        "application/json", options_.request_timeout));
  if (r.status != 201 && r.status != 200) return ErrorFromReply(r.status, r.body);
  const json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string() ||
      j["id"].get<std::string>().empty()) {
    return MakeError(Code::kInternal,
                     "kiln serve: POST /v1/sessions answered without a session id");
  }
  return j["id"].get<std::string>();
}

Status HttpBackend::DeleteSession(const std::string& session) {
  KILN_ASSIGN_OR_RETURN(Reply r, Exchange("DELETE", SessionPath(session), "", "",
                                          "application/json", options_.request_timeout));
  if (r.status / 100 != 2) return ErrorFromReply(r.status, r.body);
  return OkStatus();
}

Result<json> HttpBackend::Execute(const std::string& session, const std::string& code,
                                  std::optional<double> timeout_s,
                                  const std::function<void(const json&)>& on_event) {
  json body = {{"code", code}};
  if (timeout_s) body["timeout"] = *timeout_s;
  // The cell's own limit, plus the time to start and report it.
  const auto wait = timeout_s ? std::chrono::seconds(static_cast<int64_t>(*timeout_s) + 120)
                              : options_.default_cell_wait + std::chrono::seconds(120);
  std::optional<json> done;
  auto on_sse = [&](const SseParser::Event& e) -> Status {
    json data = json::parse(e.data, nullptr, /*allow_exceptions=*/false);
    if (data.is_discarded())
      return MakeError(Code::kInternal, "kiln serve sent an event that is not JSON");
    if (e.name == "done") {
      done = std::move(data);
    } else if (on_event && (e.name == "stdout" || e.name == "stderr" || e.name == "display" ||
                            e.name == "result" || e.name == "error")) {
      on_event({{"event", e.name}, {"data", std::move(data)}});
    }
    return OkStatus();
  };
  KILN_ASSIGN_OR_RETURN(Reply r, Exchange("POST", SessionPath(session) + "/execute", body.dump(),
                                          "application/json", "text/event-stream", wait, on_sse));
  if (r.status != 200) return ErrorFromReply(r.status, r.body);
  if (!IsEventStream(r.content_type)) {
    // A server that answered with one JSON object instead of a stream.
    json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object())
      return MakeError(Code::kInternal, "kiln serve: the execute answer is not a JSON object");
    return j;
  }
  if (!done || !done->is_object()) {
    return MakeError(Code::kUnavailable, "kiln serve ended the execute stream without a result");
  }
  // A failure after the stream began: "done" carries the error body.
  if (!done->contains("status") && done->contains("error") && (*done)["error"].is_object()) {
    const std::string kind = (*done)["error"].value("code", "");
    const int status = kind == "session_gone"                               ? 410
                       : kind == "not_found"                                ? 404
                       : kind == "session_busy" || kind == "conflict"       ? 409
                       : kind == "invalid_value" || kind == "invalid_field" ? 400
                                                                            : 503;
    return ErrorFromReply(status, done->dump());
  }
  return std::move(*done);
}

Status HttpBackend::Interrupt(const std::string& session) {
  KILN_ASSIGN_OR_RETURN(
      Reply r, Exchange("POST", SessionPath(session) + "/interrupt", "{}", "application/json",
                        "application/json", options_.request_timeout));
  if (r.status / 100 != 2) return ErrorFromReply(r.status, r.body);
  return OkStatus();
}

Status HttpBackend::PutFile(const std::string& session, const std::string& path,
                            const std::string& bytes) {
  KILN_ASSIGN_OR_RETURN(
      Reply r, Exchange("PUT", SessionPath(session) + "/files/" + EncodePath(path), bytes,
                        "application/octet-stream", "application/json", options_.request_timeout));
  if (r.status / 100 != 2) return ErrorFromReply(r.status, r.body);
  return OkStatus();
}

Result<std::string> HttpBackend::GetFile(const std::string& session, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(
      Reply r, Exchange("GET", SessionPath(session) + "/files/" + EncodePath(path), "", "", "*/*",
                        options_.request_timeout));
  if (r.status != 200) return ErrorFromReply(r.status, r.body);
  return std::move(r.body);
}

Result<json> HttpBackend::ListFiles(const std::string& session) {
  KILN_ASSIGN_OR_RETURN(Reply r, Exchange("GET", SessionPath(session) + "/files", "", "",
                                          "application/json", options_.request_timeout));
  if (r.status != 200) return ErrorFromReply(r.status, r.body);
  json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) {
    return MakeError(Code::kInternal, "kiln serve: the file listing has no \"files\" array");
  }
  return j;
}

}  // namespace kiln::mcp
