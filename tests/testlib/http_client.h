// A small blocking HTTP/1.1 client for the integration tier: one request per
// connection (Connection: close) over a TCP socket to a loopback server. Plain
// sockets, every wait bounded, no exceptions. It never half-closes the
// connection after sending: a server may read that as the client going away.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

struct HttpResponse {
  int status = 0;      // 0 when no response came (see `error`)
  std::string reason;  // "OK", ...
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;
  std::string error;  // connect/send/receive/parse failure; empty on success
  // The first header named `name` (case-insensitive), if any.
  std::optional<std::string> Header(const std::string& name) const;
  // "HTTP 200 ... <body>" for assertion messages (the body cut at 2000 chars).
  std::string Describe() const;
};

struct HttpRequest {
  std::string method = "GET";
  std::string path = "/";
  std::vector<std::pair<std::string, std::string>> headers;  // Host, Content-Length and
                                                             // Connection are added
  std::string body;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // for the whole exchange
};

// Sends `request` to host:port and reads the whole response.
HttpResponse HttpCall(const std::string& host, uint16_t port, const HttpRequest& request);

// True when a TCP connection to host:port is accepted (closed right away).
bool CanConnect(const std::string& host, uint16_t port);

}  // namespace kiln::testing
