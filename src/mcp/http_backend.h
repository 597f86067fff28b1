// The MCP Backend as a client of a running `kiln serve` (`kiln mcp --url`):
// its session routes (docs/api.md), one HTTP/1.1 connection per call with
// Boost.Beast's synchronous API, `Authorization: Bearer KEY`. A cell runs as
// POST /v1/sessions/{id}/execute with `Accept: text/event-stream`, so its
// stdout, stderr and display events arrive while it runs; Interrupt and
// DeleteSession use connections of their own.
//
// http:// only: TLS is out of scope (put kiln behind a TLS-terminating proxy
// and reach it over loopback, or use `kiln mcp` without --url locally).
// Every wait is bounded (SO_RCVTIMEO/SO_SNDTIMEO, which also bound connect):
// a cell gets its timeout plus a margin, everything else `request_timeout`.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "mcp/backend.h"

namespace kiln::mcp {

struct HttpBackendOptions {
  std::string url;  // "http://127.0.0.1:8080" (a path prefix is kept: "http://h/kiln")
  std::string api_key;
  std::string profile;  // for new sessions; empty: the server's default
  std::chrono::seconds request_timeout{60};
  // A cell without a timeout of its own may run this long before the wait ends.
  std::chrono::seconds default_cell_wait{300};
};

// The URL split up; kInvalidArgument naming "--url" for anything but http://HOST[:PORT][/PATH].
struct HttpUrl {
  std::string host;  // without brackets
  uint16_t port = 80;
  std::string prefix;       // "" or "/path" (no trailing slash)
  std::string host_header;  // as it goes in Host:
};
Result<HttpUrl> ParseHttpUrl(const std::string& url);

// "a/b c.txt" -> "a/b%20c.txt": each byte outside RFC 3986's unreserved set
// and '/' is percent-encoded.
std::string EncodePath(const std::string& path);

// Reads Server-Sent Events incrementally (WHATWG rules: "event:" and "data:"
// fields, a blank line dispatches, comments and other fields ignored).
class SseParser {
 public:
  struct Event {
    std::string name;  // "message" when the stream named none
    std::string data;
  };
  // Feeds bytes; returns the events they completed.
  std::vector<Event> Feed(std::string_view bytes);

 private:
  void Line(std::string_view line, std::vector<Event>* out);
  std::string line_;
  bool last_cr_ = false;
  std::string event_, data_;
  bool has_data_ = false;
};

class HttpBackend final : public Backend {
 public:
  static Result<std::unique_ptr<HttpBackend>> Create(HttpBackendOptions options);

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

  // GET of a route of kiln serve at `url` that needs no key (/readyz,
  // /metrics: `kiln doctor --server`): the status and the body.
  static Result<std::pair<int, std::string>> GetPublic(const std::string& url,
                                                       const std::string& route,
                                                       std::chrono::seconds timeout);

 private:
  struct Reply {
    int status = 0;
    std::string content_type;
    std::string body;
  };
  HttpBackend(HttpBackendOptions options, HttpUrl url)
      : options_(std::move(options)), url_(std::move(url)) {}
  // One exchange. `on_sse`, when set and the answer is a 200 event stream,
  // gets its events as they arrive instead of the body being kept.
  Result<Reply> Exchange(const std::string& method, const std::string& target,
                         const std::string& body, const std::string& content_type,
                         const std::string& accept, std::chrono::seconds timeout,
                         const std::function<Status(const SseParser::Event&)>& on_sse = nullptr);
  std::string SessionPath(const std::string& session) const;

  HttpBackendOptions options_;
  HttpUrl url_;
};

// The kiln error of a non-2xx answer of kiln serve ({"error": {"code", "message"}}).
Error ErrorFromReply(int status, const std::string& body);

}  // namespace kiln::mcp
