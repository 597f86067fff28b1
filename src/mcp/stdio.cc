#include "mcp/stdio.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "base/log.h"
#include "mcp/jsonrpc.h"

namespace kiln::mcp {
namespace {

// Writes whole lines to the client, one at a time, from any thread.
class LineWriter {
 public:
  explicit LineWriter(int fd) : fd_(fd) {}
  void Write(const nlohmann::json& message) {
    std::string line = jsonrpc::Serialize(message);
    line += '\n';
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) return;
    size_t off = 0;
    while (off < line.size()) {
      const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      KILN_LOG_WARN("mcp: stdout is closed: {}", n < 0 ? std::strerror(errno) : "short write");
      broken_ = true;
      return;
    }
  }
  bool broken() const {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

 private:
  int fd_;
  mutable std::mutex mu_;
  bool broken_ = false;
};

}  // namespace

StdioEnd RunStdio(Engine& engine, int in_fd, int out_fd, int stop_fd, const StdioOptions& options) {
  LineWriter writer(out_fd);
  const Engine::Emit emit = [&writer](const nlohmann::json& message, bool) {
    if (!message.is_null()) writer.Write(message);
  };
  std::string line;
  bool skipping = false;  // inside a line over the limit
  StdioEnd end = StdioEnd::kEof;
  char buf[65536];
  for (;;) {
    if (writer.broken()) {
      end = StdioEnd::kOutputClosed;
      break;
    }
    pollfd fds[2] = {{in_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int r = ::poll(fds, stop_fd >= 0 ? 2 : 1, 1000);
    if (r < 0) {
      if (errno == EINTR) continue;
      end = StdioEnd::kReadError;
      break;
    }
    if (stop_fd >= 0 && (fds[1].revents & POLLIN) != 0) {
      end = StdioEnd::kStopped;
      break;
    }
    if (fds[0].revents == 0) continue;
    const ssize_t n = ::read(in_fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      end = StdioEnd::kReadError;
      break;
    }
    if (n == 0) break;  // EOF: the client is done
    size_t start = 0;
    const size_t got = static_cast<size_t>(n);
    while (start < got) {
      const void* nl_ptr = std::memchr(buf + start, '\n', got - start);
      const size_t nl =
          nl_ptr == nullptr ? got : static_cast<size_t>(static_cast<const char*>(nl_ptr) - buf);
      if (!skipping) {
        if (line.size() + (nl - start) > options.max_line_bytes) {
          skipping = true;
          line.clear();
          line.shrink_to_fit();
          emit(jsonrpc::ErrorResponse(nullptr, jsonrpc::kInvalidRequest,
                                      "Invalid Request: the message is over " +
                                          std::to_string(options.max_line_bytes) + " bytes"),
               true);
        } else {
          line.append(buf + start, nl - start);
        }
      }
      if (nl == got) break;  // the line goes on in the next read
      if (!skipping) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") != std::string::npos) engine.HandleText(line, emit);
      }
      skipping = false;
      line.clear();
      start = nl + 1;
    }
  }
  // A last line without its newline is still a message.
  if (end == StdioEnd::kEof && !skipping && line.find_first_not_of(" \t\r") != std::string::npos) {
    engine.HandleText(line, emit);
  }
  // At EOF, calls in flight still answer (`printf '...' | kiln mcp` works),
  // unless a stop signal comes first: clients that close stdin and then send
  // SIGTERM get a prompt, clean end.
  while (end == StdioEnd::kEof && engine.in_flight() > 0 && !writer.broken()) {
    pollfd p{stop_fd, POLLIN, 0};
    if (::poll(&p, stop_fd >= 0 ? 1 : 0, 100) > 0 && (p.revents & POLLIN) != 0) {
      end = StdioEnd::kStopped;
      break;
    }
  }
  engine.Shutdown();
  return end;
}

}  // namespace kiln::mcp
