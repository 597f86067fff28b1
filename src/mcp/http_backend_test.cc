// HttpBackend against a small in-process stand-in for kiln serve's session
// routes (loopback, a thread per connection): the requests it sends, the SSE
// it reads while a cell runs, an interrupt on a second connection, the error
// mapping, and bounded waits. Also the URL, path and SSE parsers.
#include "mcp/http_backend.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::mcp {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// --- Parsers ------------------------------------------------------------------

TEST(McpHttpBackend, ParsesHttpUrls) {
  auto u = ParseHttpUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->prefix, "");
  u = ParseHttpUrl("http://[::1]:9/kiln/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9);
  EXPECT_EQ(u->prefix, "/kiln");
  EXPECT_EQ(u->host_header, "[::1]:9");
  u = ParseHttpUrl("HTTP://example.org");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 80);
  for (const std::string bad :
       {"https://x", "ftp://x", "x:80", "http://", "http://:80", "http://h:0", "http://h:99999",
        "http://h:8a", "http://u:p@h", "http://[::1", "http://h/?q"}) {
    auto r = ParseHttpUrl(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Code::kInvalidArgument);
    EXPECT_EQ(r.error().message.rfind("--url:", 0), 0u) << r.error().message;
  }
  EXPECT_NE(ParseHttpUrl("https://x").error().message.find("https is not supported"),
            std::string::npos);
}

TEST(McpHttpBackend, EncodesPaths) {
  EXPECT_EQ(EncodePath("a/b c.txt"), "a/b%20c.txt");
  EXPECT_EQ(EncodePath("x?y#z%"), "x%3Fy%23z%25");
  EXPECT_EQ(EncodePath("\xc3\xa9"), "%C3%A9");
  EXPECT_EQ(EncodePath("A-z_0.9~"), "A-z_0.9~");
}

TEST(McpHttpBackend, ParsesServerSentEvents) {
  SseParser p;
  std::vector<SseParser::Event> all;
  const std::string stream =
      ": keep-alive\r\n\r\nevent: stdout\r\ndata: {\"text\": \"a\"}\r\n\r\n"
      "data: one\ndata: two\n\nevent: done\ndata:{}\n\nid: 5\nretry: 10\n\nevent: x\ndata";
  // One byte at a time: events split anywhere.
  for (char c : stream) {
    for (auto& e : p.Feed(std::string_view(&c, 1))) all.push_back(e);
  }
  for (auto& e : p.Feed("\n\n")) all.push_back(e);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].name, "stdout");
  EXPECT_EQ(all[0].data, "{\"text\": \"a\"}");
  EXPECT_EQ(all[1].name, "message");
  EXPECT_EQ(all[1].data, "one\ntwo");
  EXPECT_EQ(all[2].name, "done");
  EXPECT_EQ(all[2].data, "{}");
  EXPECT_EQ(all[3].name, "x");
  EXPECT_EQ(all[3].data, "");
}

TEST(McpHttpBackend, MapsErrors) {
  EXPECT_EQ(
      ErrorFromReply(410, R"({"error":{"code":"session_gone","message":"reaped after idle"}})")
          .code,
      Code::kNotFound);
  EXPECT_NE(ErrorFromReply(410, R"({"error":{"message":"reaped"}})").message.find("reaped"),
            std::string::npos);
  EXPECT_EQ(ErrorFromReply(404, "").code, Code::kNotFound);
  EXPECT_EQ(ErrorFromReply(409, R"({"error":{"code":"session_busy"}})").code, Code::kAborted);
  EXPECT_EQ(ErrorFromReply(400, R"({"error":{"message":"path: has .."}})").message, "path: has ..");
  EXPECT_EQ(ErrorFromReply(400, "").code, Code::kInvalidArgument);
  EXPECT_EQ(ErrorFromReply(413, "").code, Code::kResourceExhausted);
  EXPECT_EQ(ErrorFromReply(429, "").code, Code::kResourceExhausted);
  EXPECT_EQ(ErrorFromReply(401, "").code, Code::kUnauthenticated);
  EXPECT_EQ(ErrorFromReply(503, "").code, Code::kUnavailable);
  EXPECT_EQ(ErrorFromReply(500, "boom").code, Code::kInternal);
}

// --- A stand-in for kiln serve -------------------------------------------------

struct Seen {
  std::string method, target, auth, accept, content_type, body;
};

class FakeKilnServer {
 public:
  FakeKilnServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    sockaddr* sa = static_cast<sockaddr*>(static_cast<void*>(&a));
    EXPECT_EQ(::bind(fd_, sa, sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, sa, &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeKilnServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    {
      std::lock_guard<std::mutex> lock(m_);
      interrupted_ = true;
      cv_.notify_all();
    }
    accept_.join();
    for (auto& t : workers_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> lock(m_);
    return seen_;
  }
  bool silent = false;  // accept, read, never answer

 private:
  void AcceptLoop() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (stop_) return;
        continue;
      }
      workers_.emplace_back([this, c] {
        Serve(c);
        ::close(c);
      });
    }
  }
  static void Send(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  static void Reply(int c, int status, const std::string& body,
                    const std::string& type = "application/json") {
    Send(c, "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + type +
                "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\n\r\n" + body);
  }
  static std::string Header(const std::string& head, const std::string& name) {
    const std::string key = "\r\n" + name + ": ";
    const size_t p = head.find(key);
    if (p == std::string::npos) return "";
    const size_t e = head.find("\r\n", p + key.size());
    return head.substr(p + key.size(), e - p - key.size());
  }
  void Serve(int c) {
    std::string in;
    char buf[65536];
    size_t header_end = std::string::npos;
    while (header_end == std::string::npos) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
      header_end = in.find("\r\n\r\n");
    }
    const std::string head = in.substr(0, header_end);
    const size_t length = static_cast<size_t>(std::atol(Header(head, "Content-Length").c_str()));
    while (in.size() < header_end + 4 + length) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
    }
    Seen s;
    s.method = head.substr(0, head.find(' '));
    s.target =
        head.substr(head.find(' ') + 1, head.find(' ', head.find(' ') + 1) - head.find(' ') - 1);
    s.auth = Header(head, "Authorization");
    s.accept = Header(head, "Accept");
    s.content_type = Header(head, "Content-Type");
    s.body = in.substr(header_end + 4, length);
    {
      std::lock_guard<std::mutex> lock(m_);
      seen_.push_back(s);
    }
    if (silent) {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return stop_.load(); });
      return;
    }
    if (s.auth != "Bearer good")
      return Reply(c, 401, R"({"error":{"code":"unauthenticated","message":"bad key"}})");
    const std::string sessions = "/v1/sessions";
    if (s.method == "POST" && s.target == sessions) {
      return Reply(c, 201, R"({"id":"abc","state":"ready"})");
    }
    if (s.target.rfind(sessions + "/gone", 0) == 0) {
      return Reply(c, 410,
                   R"({"error":{"code":"session_gone","message":"reaped after 600 s idle"}})");
    }
    if (s.method == "DELETE" && s.target == sessions + "/abc") return Reply(c, 204, "");
    if (s.method == "POST" && s.target == sessions + "/abc/interrupt") {
      std::lock_guard<std::mutex> lock(m_);
      interrupted_ = true;
      cv_.notify_all();
      return Reply(c, 200, R"({"interrupted":true})");
    }
    if (s.method == "POST" && s.target == sessions + "/abc/execute") {
      const json req = json::parse(s.body);
      if (req["code"] == "busy")
        return Reply(c, 409, R"({"error":{"code":"session_busy","message":"a cell runs"}})");
      if (req["code"] == "json") return Reply(c, 200, R"({"status":"ok","stdout":"j"})");
      Send(c,
           "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: "
           "no-cache\r\nConnection: close\r\n\r\n");
      Send(c, ": hello\n\nevent: stdout\ndata: {\"text\": \"one\\n\"}\n\n");
      std::this_thread::sleep_for(50ms);
      Send(c,
           "event: stderr\ndata: {\"text\": \"warn\\n\"}\n\nevent: display\ndata: "
           "{\"output_type\": \"display_data\"}\n\n");
      if (req["code"] == "wait") {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait_for(lock, 10s, [&] { return interrupted_; });
      }
      if (req["code"] == "cut") return;  // the stream ends without `done`
      if (req["code"] == "die") {  // the session ended under the cell: `done` is the error body
        Send(c,
             "event: done\ndata: "
             "{\"error\":{\"code\":\"session_gone\",\"message\":\"killed\"}}\n\n");
        return;
      }
      Send(c, "event: do");  // split mid-field
      std::this_thread::sleep_for(20ms);
      const json done = {{"status", interrupted_ ? "error" : "ok"},
                         {"stdout", "one\n"},
                         {"session_state", "kept"},
                         {"timeout_seen", req.contains("timeout") ? req["timeout"] : json()}};
      Send(c, "ne\ndata: " + done.dump() + "\n\n");
      return;
    }
    if (s.method == "PUT" && s.target.rfind(sessions + "/abc/files/", 0) == 0) {
      std::lock_guard<std::mutex> lock(m_);
      files_[s.target.substr(sessions.size() + 11)] = s.body;
      return Reply(c, 201, json({{"path", "x"}, {"size", s.body.size()}}).dump());
    }
    if (s.method == "GET" && s.target == sessions + "/abc/files") {
      return Reply(c, 200, R"({"files":[{"path":"a b.txt","size":3,"directory":false}]})");
    }
    if (s.method == "GET" && s.target.rfind(sessions + "/abc/files/", 0) == 0) {
      std::lock_guard<std::mutex> lock(m_);
      auto it = files_.find(s.target.substr(sessions.size() + 11));
      if (it == files_.end())
        return Reply(c, 404, R"({"error":{"code":"not_found","message":"no such file"}})");
      return Reply(c, 200, it->second, "application/octet-stream");
    }
    Reply(c, 404, R"({"error":{"code":"not_found","message":"no route"}})");
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_;
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<Seen> seen_;
  std::map<std::string, std::string> files_;
  bool interrupted_ = false;
};

std::unique_ptr<HttpBackend> Make(const std::string& url, const std::string& key = "good") {
  HttpBackendOptions o;
  o.url = url;
  o.api_key = key;
  o.profile = "datascience";
  o.request_timeout = std::chrono::seconds(2);
  auto b = HttpBackend::Create(o);
  EXPECT_TRUE(b.ok()) << b.error().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

TEST(McpHttpBackend, SessionsCellsAndFiles) {
  FakeKilnServer server;
  auto b = Make(server.url());
  ASSERT_TRUE(b);
  auto id = b->CreateSession();
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  EXPECT_EQ(*id, "abc");
  const Seen create = server.seen().back();
  EXPECT_EQ(create.auth, "Bearer good");
  EXPECT_EQ(json::parse(create.body), json({{"profile", "datascience"}}));

  std::vector<json> events;
  auto r = b->Execute("abc", "print('one')", 5.0, [&](const json& e) { events.push_back(e); });
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ((*r)["status"], "ok");
  EXPECT_EQ((*r)["timeout_seen"], 5.0);
  EXPECT_EQ(server.seen().back().accept, "text/event-stream");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], json({{"event", "stdout"}, {"data", {{"text", "one\n"}}}}));
  EXPECT_EQ(events[1]["event"], "stderr");
  EXPECT_EQ(events[2]["event"], "display");

  // A plain JSON answer is accepted too.
  r = b->Execute("abc", "json", std::nullopt, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["stdout"], "j");

  ASSERT_TRUE(b->PutFile("abc", "a b.txt", std::string("x\0y", 3)).ok());
  EXPECT_EQ(server.seen().back().target, "/v1/sessions/abc/files/a%20b.txt");
  EXPECT_EQ(server.seen().back().content_type, "application/octet-stream");
  auto got = b->GetFile("abc", "a b.txt");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::string("x\0y", 3));
  auto missing = b->GetFile("abc", "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Code::kNotFound);
  auto list = b->ListFiles("abc");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["files"][0]["path"], "a b.txt");
  EXPECT_TRUE(b->DeleteSession("abc").ok());
  EXPECT_EQ(server.seen().back().method, "DELETE");
}

TEST(McpHttpBackend, InterruptArrivesOnAnotherConnection) {
  FakeKilnServer server;
  auto b = Make(server.url());
  ASSERT_TRUE(b);
  std::atomic<int> seen_events{0};
  std::thread interrupter([&] {
    while (seen_events < 2) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(b->Interrupt("abc").ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = b->Execute("abc", "wait", std::nullopt, [&](const json&) { ++seen_events; });
  interrupter.join();
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ((*r)["status"], "error");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(McpHttpBackend, ErrorsOfTheServer) {
  FakeKilnServer server;
  auto b = Make(server.url());
  ASSERT_TRUE(b);
  auto gone = b->Execute("gone", "1", std::nullopt, nullptr);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Code::kNotFound);
  EXPECT_NE(gone.error().message.find("reaped after 600 s idle"), std::string::npos);
  auto busy = b->Execute("abc", "busy", std::nullopt, nullptr);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code, Code::kAborted);
  auto died = b->Execute("abc", "die", std::nullopt, nullptr);
  ASSERT_FALSE(died.ok());
  EXPECT_EQ(died.error().code, Code::kNotFound);
  EXPECT_NE(died.error().message.find("killed"), std::string::npos);
  auto cut = b->Execute("abc", "cut", std::nullopt, nullptr);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code, Code::kUnavailable);
  auto bad_key = Make(server.url(), "wrong");
  auto denied = bad_key->CreateSession();
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().code, Code::kUnauthenticated);
}

TEST(McpHttpBackend, EveryWaitIsBounded) {
  FakeKilnServer server;
  server.silent = true;
  auto b = Make(server.url());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = b->ListFiles("abc");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // Nobody listening: an error at once. The port is one of ours, bound but
  // not listening (a fixed one, such as 1, may be served on some host).
  const int closed = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(closed, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  sockaddr* sa = static_cast<sockaddr*>(static_cast<void*>(&a));
  ASSERT_EQ(::bind(closed, sa, sizeof a), 0);
  ASSERT_EQ(::getsockname(closed, sa, &len), 0);
  auto nobody = Make("http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  auto c = nobody->CreateSession();
  ::close(closed);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Code::kUnavailable);
}

}  // namespace
}  // namespace kiln::mcp
