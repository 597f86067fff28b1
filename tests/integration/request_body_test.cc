// Integration tier: request bodies at `kiln serve`'s door. The key, the route
// and the body's size are checked as soon as the headers are in, so an
// unauthenticated or oversized upload is refused before a byte of its body is
// read (and costs the server no memory); a refused body is then drained, so
// that ordinary clients (curl, Python requests, Node fetch) read the 4xx
// instead of a connection reset; and the bodies being received across all
// connections have a budget (server.max_bodies_in_flight), past which the
// server answers 503 before reading.
//
// One server for the suite, on its own data directory, with small limits:
// max_body 64k, max_file 64m, max_bodies_in_flight 64m.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;

constexpr const char* kConfig = R"TOML(
[server]
concurrency = 2
max_body = "64k"
max_file = "64m"
max_bodies_in_flight = "64m"
client_timeout = "20s"

[tenants.default]
rate = 1000
burst = 1000

[pool]
enabled = false

[profiles.default]
interpreter = "/usr/bin/python3"

[profiles.default.defaults]
timeout = 30
memory = "256m"
)TOML";

// A raw loopback connection: the tests need to send headers without a body,
// or a body the server refuses, which no ordinary client does on request.
class Conn {
 public:
  explicit Conn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  bool ok() const { return fd_ >= 0; }

  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Sends `n` bytes of 'x' in 64 KiB pieces, reading whatever the server sends
  // meanwhile into `received` (so neither side blocks). false: the server
  // reset or closed the connection before all was sent.
  bool SendFiller(uint64_t n, std::string* received) {
    const std::string piece(64 * 1024, 'x');
    while (n > 0) {
      pollfd pfd{fd_, POLLOUT | POLLIN, 0};
      if (::poll(&pfd, 1, 10000) <= 0) return false;
      if (pfd.revents & POLLIN) {
        char buf[4096];
        const ssize_t r = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) received->append(buf, static_cast<size_t>(r));
      }
      if (pfd.revents & (POLLERR | POLLHUP)) return false;
      if (pfd.revents & POLLOUT) {
        const size_t len = static_cast<size_t>(std::min<uint64_t>(n, piece.size()));
        const ssize_t w = ::send(fd_, piece.data(), len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN) return false;
        if (w > 0) n -= static_cast<uint64_t>(w);
      }
    }
    return true;
  }

  // Reads one response (headers, and a Content-Length body) within `limit`.
  // `already`: bytes of it received before. nullopt: none came in time.
  std::optional<std::string> ReadResponse(std::chrono::milliseconds limit,
                                          std::string already = "") {
    std::string raw = std::move(already);
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const size_t end = raw.find("\r\n\r\n");
      if (end != std::string::npos) {
        const size_t cl = raw.find("Content-Length: ");
        const size_t want = cl != std::string::npos && cl < end
                                ? end + 4 + std::strtoul(raw.c_str() + cl + 16, nullptr, 10)
                                : end + 4;
        if (raw.size() >= want) return raw.substr(0, want);
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return raw.empty() ? std::nullopt : std::optional<std::string>(raw);
      raw.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
};

int StatusOf(const std::string& response) {
  return response.size() > 12 ? std::atoi(response.c_str() + 9) : 0;
}
json BodyOf(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return json::parse(end == std::string::npos ? "" : response.substr(end + 4), nullptr, false);
}

std::string Head(const std::string& method, const std::string& path, const std::string& auth_header,
                 uint64_t content_length, const std::string& extra = "") {
  std::string h = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!auth_header.empty()) h += auth_header + "\r\n";
  h += "Content-Type: application/octet-stream\r\nContent-Length: " +
       std::to_string(content_length) + "\r\n" + extra + "\r\n";
  return h;
}

// The server's peak resident set (VmHWM), in bytes.
std::optional<uint64_t> PeakRss(pid_t pid) {
  auto status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  if (!status) return std::nullopt;
  const size_t at = status->find("VmHWM:");
  if (at == std::string::npos) return std::nullopt;
  return std::strtoull(status->c_str() + at + 6, nullptr, 10) * 1024;
}

struct Shared {
  TempDir dir;
  KilnServer server;
  std::string key;
};

class RequestBody : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SandboxMissingReason()) return;
    shared_ = new Shared;
    const std::string config = shared_->dir.path() + "/kiln.toml";
    WriteFile(config, kConfig);
    if (!shared_->server.Start(shared_->dir.path() + "/data", config, "body", &setup_error_))
      return;
    shared_->key = Trim(shared_->server.Stdout());
  }
  static void TearDownTestSuite() {
    if (shared_ != nullptr) {
      const KilnServer::Exit e = shared_->server.Terminate(20s);
      EXPECT_TRUE(e.in_time) << "the server did not stop within 20 s of SIGTERM";
    }
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override {
    RequireSandbox();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NE(shared_, nullptr);
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }
  static const KilnServer& srv() { return shared_->server; }
  static std::string Bearer() { return "Authorization: Bearer " + shared_->key; }
  static std::string Url(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(srv().port()) + path;
  }
  // A file of `bytes` bytes in the suite's directory (for the outside clients).
  static std::string BigFile(uint64_t bytes) {
    const std::string path = shared_->dir.path() + "/big-" + std::to_string(bytes);
    if (!ReadFile(path)) WriteFile(path, std::string(bytes, 'x'));
    return path;
  }

  static Shared* shared_;
  static std::string setup_error_;
};
Shared* RequestBody::shared_ = nullptr;
std::string RequestBody::setup_error_;

// The 401 comes while the client has sent only the headers: the server did
// not wait for (or read) the body it announced.
TEST_F(RequestBody, UnauthenticatedUploadIsRefusedBeforeItsBody) {
  struct Case {
    const char* name;
    std::string head;
    std::string code;  // the v1 error code, or "" for the reference's {"detail"}
  };
  const std::vector<Case> cases = {
      {"v1 execute, no key", Head("POST", "/v1/execute", "", 50u << 20), "unauthenticated"},
      {"file upload, wrong key",
       Head("PUT", "/v1/sessions/0123456789abcdef/files/a.bin",
            "Authorization: Bearer kiln_000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 60u << 20),
       "unauthenticated"},
      {"mcp, no key", Head("POST", "/mcp", "", 50u << 20), "unauthenticated"},
      {"reference execute, wrong key",
       Head("POST", "/execute", "X-API-Key: kiln_000000000000_wrong", 50u << 20), ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Conn conn(srv().port());
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE(conn.Send(c.head));
    const auto r = conn.ReadResponse(10s);
    ASSERT_TRUE(r.has_value()) << "no answer to the headers alone: the server waits for the body";
    EXPECT_EQ(StatusOf(*r), 401) << *r;
    if (c.code.empty()) {
      EXPECT_EQ(BodyOf(*r), json({{"detail", "Invalid API Key"}})) << *r;
    } else {
      EXPECT_EQ(BodyOf(*r)["error"].value("code", ""), c.code) << *r;
    }
    EXPECT_NE(r->find("Connection: close"), std::string::npos) << *r;
  }
}

// Over the route's limit: 413 naming the body, before the body. The files
// API's larger limit is for authenticated callers of its route only.
TEST_F(RequestBody, OversizedBodyIsRefusedBeforeItIsRead) {
  struct Case {
    const char* name;
    std::string head;
    int status;
  };
  const std::vector<Case> cases = {
      {"execute over max_body", Head("POST", "/v1/execute", Bearer(), 1u << 20), 413},
      {"reference execute over max_body",
       Head("POST", "/execute", "X-API-Key: " + shared_->key, 1u << 20), 413},
      {"a file over max_file",
       Head("PUT", "/v1/sessions/0123456789abcdef/files/a.bin", Bearer(), 65u << 20), 413},
      {"a session create with a file-sized body", Head("POST", "/v1/sessions", Bearer(), 1u << 20),
       413},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Conn conn(srv().port());
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE(conn.Send(c.head));
    const auto r = conn.ReadResponse(10s);
    ASSERT_TRUE(r.has_value()) << "no answer to the headers alone";
    EXPECT_EQ(StatusOf(*r), c.status) << *r;
    const json body = BodyOf(*r);
    EXPECT_EQ(body["error"].value("code", ""), "body_too_large") << *r;
    EXPECT_EQ(body["error"].value("field", ""), "body") << *r;
  }
}

// Two unauthenticated 60 MB uploads, sent in full: the server drops their
// bodies as they come instead of holding them (it used to read each whole
// before checking the key, and its peak memory doubled).
TEST_F(RequestBody, UnauthenticatedUploadsCostTheServerNoMemory) {
  const auto before = PeakRss(srv().pid());
  ASSERT_TRUE(before.has_value()) << "cannot read the server's /proc/PID/status";
  auto upload = [] {
    Conn conn(srv().port());
    if (!conn.ok()) return std::string("connect failed");
    if (!conn.Send(Head("PUT", "/v1/sessions/0123456789abcdef/files/big.bin",
                        "X-API-Key: kiln_000000000000_wrong", 60u << 20))) {
      return std::string("send failed");
    }
    std::string received;
    (void)conn.SendFiller(60u << 20, &received);  // the server may close once drained
    return conn.ReadResponse(20s, received).value_or("no response");
  };
  auto a = std::async(std::launch::async, upload);
  auto b = std::async(std::launch::async, upload);
  const std::string ra = a.get(), rb = b.get();
  EXPECT_EQ(StatusOf(ra), 401) << ra;
  EXPECT_EQ(StatusOf(rb), 401) << rb;
  const auto after = PeakRss(srv().pid());
  ASSERT_TRUE(after.has_value());
  // 120 MB of bodies went by; a few MiB of stacks and buffers may come and go.
  EXPECT_LT(*after - *before, 16u << 20) << "peak RSS went from " << *before << " to " << *after;
}

// The answer first, then the body drained: a client that sends its whole
// body before reading (as Python requests does) reads the 413, not a reset.
TEST_F(RequestBody, ClientThatSendsItsWholeBodyReadsThe413) {
  Conn conn(srv().port());
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Send(Head("POST", "/v1/execute", Bearer(), 20u << 20)));
  std::string received;
  EXPECT_TRUE(conn.SendFiller(20u << 20, &received))
      << "the server reset the connection during the body";
  const auto r = conn.ReadResponse(10s, received);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(StatusOf(*r), 413) << *r;
}

// A chunked body has no length to check up front: it is counted as it comes,
// and past the limit the client still reads the 413.
TEST_F(RequestBody, ChunkedBodyOverTheLimitIs413) {
  Conn conn(srv().port());
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(
      conn.Send("POST /v1/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n" + Bearer() +
                "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"));
  std::string chunks;
  for (int i = 0; i < 4; ++i) chunks += "8000\r\n" + std::string(0x8000, ' ') + "\r\n";  // 128 KiB
  chunks += "0\r\n\r\n";
  ASSERT_TRUE(conn.Send(chunks));
  const auto r = conn.ReadResponse(10s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(StatusOf(*r), 413) << *r;
  EXPECT_EQ(BodyOf(*r)["error"].value("field", ""), "body") << *r;
}

// Expect: 100-continue gets its interim answer once the headers pass, so
// curl and friends do not wait a second before sending the body.
TEST_F(RequestBody, Expect100ContinueIsAnswered) {
  Conn conn(srv().port());
  ASSERT_TRUE(conn.ok());
  const std::string body = json({{"code", "print('continued')"}}).dump();
  ASSERT_TRUE(
      conn.Send(Head("POST", "/v1/execute", Bearer(), body.size(), "Expect: 100-continue\r\n")));
  const auto interim = conn.ReadResponse(5s);
  ASSERT_TRUE(interim.has_value()) << "no 100 Continue";
  EXPECT_EQ(StatusOf(*interim), 100) << *interim;
  ASSERT_TRUE(conn.Send(body));
  const auto r = conn.ReadResponse(60s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(StatusOf(*r), 200) << *r;
  EXPECT_EQ(BodyOf(*r).value("stdout", ""), "continued\n") << *r;
}

// The budget of bodies in flight (64m): one announced 60 MiB upload holds
// most of it while its body is read; another of 10 MiB is refused with 503
// and Retry-After before its body, and goes through once the first is done.
TEST_F(RequestBody, BodiesOverTheServersBudgetGet503) {
  const std::string path = "/v1/sessions/0123456789abcdef/files/a.bin";
  auto first = std::make_unique<Conn>(srv().port());
  ASSERT_TRUE(first->ok());
  ASSERT_TRUE(first->Send(Head("PUT", path, Bearer(), 60u << 20)));
  // No answer within a second: the server took its reservation and waits for
  // its body.
  const auto early = first->ReadResponse(1s);
  ASSERT_FALSE(early.has_value()) << *early;
  std::string last;
  bool busy = false;
  {
    Conn second(srv().port());
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE(second.Send(Head("PUT", path, Bearer(), 10u << 20)));
    last = second.ReadResponse(10s).value_or("no response");
    busy = StatusOf(last) == 503;
  }
  ASSERT_TRUE(busy) << last;
  EXPECT_EQ(BodyOf(last)["error"].value("code", ""), "server_busy") << last;
  EXPECT_NE(last.find("Retry-After: 1"), std::string::npos) << last;
  first.reset();  // gone without its body: its reservation is released
  bool through = false;
  const auto deadline2 = Clock::now() + 10s;
  while (!through && Clock::now() < deadline2) {
    Conn again(srv().port());
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE(again.Send(Head("PUT", path, Bearer(), 10u << 20)));
    std::string received;
    ASSERT_TRUE(again.SendFiller(10u << 20, &received));
    last = again.ReadResponse(10s, received).value_or("no response");
    through = StatusOf(last) != 503;
    if (!through) std::this_thread::sleep_for(100ms);
  }
  // Read in full, then answered by the session routes (no such session).
  EXPECT_EQ(StatusOf(last), 404) << last;
}

// --- Ordinary clients read the 413 of a 20 MiB body over max_body -------------

TEST_F(RequestBody, CurlReadsThe413) {
  const ProcessResult which = RunProcess({"/bin/sh", "-c", "command -v curl"});
  if (which.exit_code != 0) GTEST_SKIP() << "curl is not installed";
  const std::string curl = Trim(which.out);
  const std::string file = BigFile(20u << 20);
  // With Expect: 100-continue (curl's default for large bodies) the 413 comes
  // before the body; without it, after the body is sent and drained.
  for (const char* expect : {"Expect: 100-continue", "Expect:"}) {
    SCOPED_TRACE(expect);
    const ProcessResult p =
        RunProcess({curl, "-sS", "-o", "-", "-w", "\n%{http_code}", "-H", Bearer(), "-H", expect,
                    "--data-binary", "@" + file, Url("/v1/execute")});
    EXPECT_EQ(p.exit_code, 0) << p.err;
    EXPECT_NE(p.out.find("\n413"), std::string::npos) << p.out << p.err;
    EXPECT_NE(p.out.find("body_too_large"), std::string::npos) << p.out;
  }
}

TEST_F(RequestBody, PythonRequestsReadsThe413) {
  const ProcessResult probe = RunProcess({"/usr/bin/python3", "-c", "import requests"});
  if (probe.exit_code != 0) GTEST_SKIP() << "Debian's python3-requests is not installed";
  const ProcessResult p =
      RunProcess({"/usr/bin/python3", "-c",
                  "import sys, requests\n"
                  "r = requests.post(sys.argv[1], data=b'x' * (20 << 20), "
                  "headers={'Authorization': sys.argv[2]})\n"
                  "print(r.status_code, r.json()['error']['code'])\n",
                  Url("/v1/execute"), Bearer().substr(std::string("Authorization: ").size())});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, "413 body_too_large\n") << p.err;
}

TEST_F(RequestBody, NodeFetchReadsThe413) {
  const ProcessResult probe = RunProcess(
      {"/bin/sh", "-c", "node -e 'process.exit(typeof fetch === \"function\" ? 0 : 1)'"});
  if (probe.exit_code != 0) GTEST_SKIP() << "node with a global fetch (Node 18+) is not installed";
  const ProcessResult p = RunProcess(
      {"/bin/sh", "-c",
       "exec node -e '"
       "fetch(process.argv[1], {method: \"POST\", body: Buffer.alloc(20 << 20, 120),"
       " headers: {Authorization: process.argv[2]}})"
       ".then(async r => console.log(r.status, (await r.json()).error.code))"
       ".catch(e => { console.error(String(e), e.cause); process.exit(1); })' \"$0\" \"$1\"",
       Url("/v1/execute"), Bearer().substr(std::string("Authorization: ").size())});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, "413 body_too_large\n") << p.err;
}

}  // namespace
}  // namespace kiln::testing
