#include "testlib/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace kiln::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

int ConnectTo(const std::string& host, uint16_t port, std::string* error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    *error = "not an IPv4 address: " + host;
    return -1;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *error = std::string("connect: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Milliseconds left until `deadline`, at least 0.
int Left(Clock::time_point deadline) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms > 0 ? static_cast<int>(ms) : 0;
}

// Parses what arrived; true once `raw` holds a whole response (by
// Content-Length, or at EOF when `eof`).
bool Parse(const std::string& raw, bool eof, HttpResponse* r) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  std::istringstream head(raw.substr(0, end));
  std::string line;
  std::getline(head, line);
  line = Trim(line);
  // "HTTP/1.1 200 OK"
  const size_t sp1 = line.find(' ');
  if (line.rfind("HTTP/", 0) != 0 || sp1 == std::string::npos) {
    r->error = "bad status line: " + line;
    return true;
  }
  const size_t sp2 = line.find(' ', sp1 + 1);
  r->status = std::atoi(
      line.substr(sp1 + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp1 - 1).c_str());
  r->reason = sp2 == std::string::npos ? "" : line.substr(sp2 + 1);
  r->headers.clear();
  while (std::getline(head, line)) {
    line = Trim(line);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    r->headers.emplace_back(Trim(line.substr(0, colon)), Trim(line.substr(colon + 1)));
  }
  const std::string rest = raw.substr(end + 4);
  if (auto cl = r->Header("Content-Length")) {
    const size_t n = std::strtoull(cl->c_str(), nullptr, 10);
    if (rest.size() < n) {
      if (eof)
        r->error =
            "connection closed after " + std::to_string(rest.size()) + " of " + *cl + " body bytes";
      r->body = rest;
      return eof;
    }
    r->body = rest.substr(0, n);
    return true;
  }
  if (auto te = r->Header("Transfer-Encoding");
      te && Lower(*te).find("chunked") != std::string::npos) {
    // Decode when complete; otherwise wait for more.
    std::string body;
    size_t pos = 0;
    for (;;) {
      const size_t crlf = rest.find("\r\n", pos);
      if (crlf == std::string::npos) break;
      const size_t size = std::strtoull(rest.substr(pos, crlf - pos).c_str(), nullptr, 16);
      if (size == 0) {
        r->body = body;
        return true;
      }
      if (rest.size() < crlf + 2 + size + 2) break;
      body += rest.substr(crlf + 2, size);
      pos = crlf + 2 + size + 2;
    }
    if (eof) r->error = "truncated chunked body";
    r->body = body;
    return eof;
  }
  r->body = rest;
  return eof;
}

}  // namespace

std::optional<std::string> HttpResponse::Header(const std::string& name) const {
  const std::string want = Lower(name);
  for (const auto& [k, v] : headers) {
    if (Lower(k) == want) return v;
  }
  return std::nullopt;
}

std::string HttpResponse::Describe() const {
  std::string out = "HTTP " + std::to_string(status) + " " + reason;
  if (!error.empty()) out += " [error: " + error + "]";
  for (const auto& [k, v] : headers) out += "\n" + k + ": " + v;
  out += "\n\n" + (body.size() > 2000 ? body.substr(0, 2000) + "..." : body);
  return out;
}

HttpResponse HttpCall(const std::string& host, uint16_t port, const HttpRequest& request) {
  HttpResponse r;
  const auto deadline = Clock::now() + request.timeout;
  const int fd = ConnectTo(host, port, &r.error);
  if (fd < 0) return r;

  std::string wire = request.method + " " + request.path + " HTTP/1.1\r\n";
  wire += "Host: " + host + ":" + std::to_string(port) + "\r\n";
  wire += "Connection: close\r\n";
  for (const auto& [k, v] : request.headers) wire += k + ": " + v + "\r\n";
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT") {
    wire += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  wire += "\r\n";
  wire += request.body;

  // Send and receive together: a server may answer (413) before reading the
  // whole body, and a full send buffer must not block us from reading it.
  size_t sent = 0;
  bool send_failed = false;
  std::string raw;
  bool eof = false, complete = false;
  while (!eof) {
    const int wait = Left(deadline);
    if (wait == 0) {
      r.error = "timed out after " + std::to_string(request.timeout.count()) + " ms";
      break;
    }
    pollfd pfd{fd, static_cast<short>(POLLIN | (sent < wire.size() && !send_failed ? POLLOUT : 0)),
               0};
    const int rc = ::poll(&pfd, 1, wait);
    if (rc < 0) {
      if (errno == EINTR) continue;
      r.error = std::string("poll: ") + std::strerror(errno);
      break;
    }
    if (rc == 0) continue;
    if ((pfd.revents & POLLOUT) && sent < wire.size()) {
      const ssize_t n =
          ::send(fd, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        send_failed = true;  // EPIPE/ECONNRESET: the server closed; read what it said
      }
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        raw.append(buf, static_cast<size_t>(n));
        if (Parse(raw, false, &r)) {
          complete = true;
          break;
        }
      } else if (n == 0) {
        eof = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        r.error = std::string("recv: ") + std::strerror(errno);
        break;
      }
    }
  }
  ::close(fd);
  if (complete) return r;
  const std::string why = r.error;
  if (raw.empty() || !Parse(raw, true, &r) || r.status == 0) {
    r.status = 0;
    r.error = why.empty() ? (raw.empty() ? "no response (connection closed)"
                                         : "incomplete response: " + raw.substr(0, 200))
                          : why;
    return r;
  }
  if (!why.empty()) r.error = r.error.empty() ? why : r.error + "; " + why;
  return r;
}

bool CanConnect(const std::string& host, uint16_t port) {
  std::string error;
  const int fd = ConnectTo(host, port, &error);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace kiln::testing
