// The stdio transport over pipes, with the scripted backend: one JSON-RPC
// message per line out, bounded lines in, EOF and stop handling.
#include "mcp/stdio.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "mcp/fake_backend_test.h"
#include "mcp/jsonrpc.h"

namespace kiln::mcp {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class Pipes {
 public:
  Pipes() {
    int a[2], b[2], c[2];
    EXPECT_EQ(::pipe2(a, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(b, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(c, O_CLOEXEC), 0);
    in_r = a[0], in_w = a[1], out_r = b[0], out_w = b[1], stop_r = c[0], stop_w = c[1];
  }
  ~Pipes() {
    for (int fd : {in_r, in_w, out_r, out_w, stop_r, stop_w}) {
      if (fd >= 0) ::close(fd);
    }
  }
  void Write(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::write(in_w, s.data() + off, s.size() - off);
      ASSERT_GT(n, 0);
      off += static_cast<size_t>(n);
    }
  }
  void CloseInput() {
    ::close(in_w);
    in_w = -1;
  }
  // The next line the server wrote, within `limit`; "" at timeout/EOF.
  std::string ReadLine(std::chrono::milliseconds limit = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_r, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char buf[65536];
      const ssize_t n = ::read(out_r, buf, sizeof buf);
      if (n <= 0) return "";
      pending_.append(buf, static_cast<size_t>(n));
    }
  }
  json ReadMessage(std::chrono::milliseconds limit = 5s) {
    const std::string line = ReadLine(limit);
    if (line.empty()) return nullptr;
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not one JSON message per line: " << line;
    return j;
  }
  int in_r, in_w, out_r, out_w, stop_r, stop_w;

 private:
  std::string pending_;
};

struct Server {
  explicit Server(Pipes& p, StdioOptions o = {}) : state(std::make_shared<testing::FakeState>()) {
    EngineOptions eo;
    eo.interrupt_grace = std::chrono::milliseconds(100);
    engine = std::make_unique<Engine>(std::make_unique<testing::FakeBackend>(state), eo);
    done = std::async(std::launch::async,
                      [this, &p, o] { return RunStdio(*engine, p.in_r, p.out_w, p.stop_r, o); });
  }
  std::shared_ptr<testing::FakeState> state;
  std::unique_ptr<Engine> engine;
  std::future<StdioEnd> done;
};

const std::string kInit =
    R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})"
    "\n";

TEST(McpStdio, OneMessagePerLine) {
  Pipes p;
  Server s(p);
  p.Write(kInit);
  json r = p.ReadMessage();
  EXPECT_EQ(r["result"]["protocolVersion"], "2025-06-18");
  // CRLF, blank lines, two messages in one write, one message in two writes.
  p.Write("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\r\n\n   \n");
  p.Write(R"({"jsonrpc":"2.0","id":2,"method":"ping"})"
          "\n"
          R"({"jsonrpc":"2.0","id":3,"method":"tools/list"})"
          "\n");
  p.Write(R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run_python",)");
  std::this_thread::sleep_for(50ms);
  p.Write(R"("arguments":{"code":"multi\nline"}}})"
          "\n");
  EXPECT_EQ(p.ReadMessage()["id"], 2);
  EXPECT_EQ(p.ReadMessage()["result"]["tools"].size(), 5u);
  r = p.ReadMessage();
  EXPECT_EQ(r["id"], 4);
  EXPECT_EQ(r["result"]["structuredContent"]["stdout"], "multi\nline\n");
  p.Write("garbage\n");
  EXPECT_EQ(p.ReadMessage()["error"]["code"], jsonrpc::kParseError);
  p.CloseInput();
  ASSERT_EQ(s.done.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(s.done.get(), StdioEnd::kEof);
  EXPECT_EQ(s.state->deleted.size(), 1u);  // the kiln session ends with stdin
}

TEST(McpStdio, LinesOverTheLimitAreRefusedAndSkipped) {
  Pipes p;
  StdioOptions o;
  o.max_line_bytes = 1000;
  Server s(p, o);
  p.Write(kInit);
  p.ReadMessage();
  std::thread writer([&] {
    p.Write("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{\"x\":\"" +
            std::string(200000, 'a') + "\"}}\n");
    p.Write(R"({"jsonrpc":"2.0","id":10,"method":"ping"})"
            "\n");
  });
  json r = p.ReadMessage();
  EXPECT_EQ(r["error"]["code"], jsonrpc::kInvalidRequest) << r.dump();
  EXPECT_TRUE(r["id"].is_null());
  r = p.ReadMessage();
  EXPECT_EQ(r["id"], 10);  // the next line is read normally
  writer.join();
  p.CloseInput();
  EXPECT_EQ(s.done.get(), StdioEnd::kEof);
}

TEST(McpStdio, EofLetsCallsInFlightAnswer) {
  Pipes p;
  Server s(p);
  p.Write(kInit);
  p.ReadMessage();
  p.Write(
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"stream"}}})");
  p.CloseInput();  // no trailing newline either
  const json r = p.ReadMessage();
  EXPECT_EQ(r["id"], 2);
  EXPECT_EQ(r["result"]["isError"], false);
  EXPECT_EQ(s.done.get(), StdioEnd::kEof);
}

TEST(McpStdio, StopEndsRunningCells) {
  Pipes p;
  Server s(p);
  p.Write(kInit);
  p.ReadMessage();
  p.Write(
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"stubborn"}}})"
      "\n");
  {
    std::unique_lock<std::mutex> lock(s.state->m);
    ASSERT_TRUE(s.state->cv.wait_for(lock, 5s, [&] { return s.state->running > 0; }));
  }
  ASSERT_EQ(::write(p.stop_w, "x", 1), 1);
  ASSERT_EQ(s.done.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(s.done.get(), StdioEnd::kStopped);
  EXPECT_EQ(s.state->deleted.size(), 1u);
  EXPECT_EQ(p.ReadLine(200ms), "");  // no response for the stopped call
}

TEST(McpStdio, AClosedOutputEndsTheLoop) {
  ::signal(SIGPIPE, SIG_IGN);  // as kiln's main() does
  Pipes p;
  Server s(p);
  ::close(p.out_r);
  p.out_r = -1;
  p.Write(kInit);
  ASSERT_EQ(s.done.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(s.done.get(), StdioEnd::kOutputClosed);
}

}  // namespace
}  // namespace kiln::mcp
