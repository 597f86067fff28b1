// The job channel between the server and a supervisor (docs/protocol.md
// section 5), code that both ends run: framing (FramedChannel), the error
// frame, and the encoding of requests and limits. The server's side is
// client.cc, the spawner's main spawner_main.cc, the supervisor's main
// supervise_main.cc.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "config/config.h"
#include "ipc/frame.h"
#include "sys/fd_passing.h"

namespace kiln::spawner {

// A frame to a supervisor: a plan (code and policy; its input files travel
// as fds beside it) or a session's request (a file_put's bytes: a memfd).
inline constexpr size_t kMaxRequestBytes = 320u << 20;
inline constexpr size_t kMaxResponseBytes = 512u << 20;  // outputs (returned files: a memfd)

// An error as a frame, with the request field it is about ("field", when
// set), and back.
nlohmann::json ErrorFrame(const Error& e);
Error ErrorOf(const nlohmann::json& frame);

// One frame, written whole.
Status WriteFrame(int fd, const nlohmann::json& message);

// A frame, then `fds` in "fds" frames of at most kFdsPerFrame each
// (SCM_RIGHTS): how a plan's input files travel beside it.
inline constexpr size_t kFdsPerFrame = 8;
using SharedFds = std::vector<std::shared_ptr<const UniqueFd>>;
Status WriteFrameWithFds(int fd, const nlohmann::json& message, const SharedFds& fds);
class FramedChannel;
// The fds that travel beside a frame (a plan's input files, a result's
// returned files; its "fds" member says how many): reads "fds" frames until
// they have all come; an error when another frame comes first, or more fds
// than the frame names.
Result<SharedFds> ReadFdsBeside(FramedChannel& ch, const nlohmann::json& plan);

// A memfd beside a frame holds what the frame says: a regular file sealed
// against writes, shrinking and growing, of exactly `size` bytes.
Status CheckSealedMemfd(int fd, uint64_t size);
// `size` bytes of a memfd from `offset` (pread; its own offset left alone).
Result<std::string> ReadMemfd(int fd, uint64_t offset, uint64_t size);
// A session's file bytes (file_put's, file_get's answer) beside `frame`: one
// sealed memfd in `fds`, and the frame says its "size" and "fds": 1.
Result<nlohmann::json> EncodeFileBytes(nlohmann::json frame, std::string_view bytes,
                                       SharedFds* fds);
// The memfd and size of such a frame, checked (one memfd, sealed, its size
// the frame's, at most max_bytes: kResourceExhausted).
Result<std::pair<int, uint64_t>> FileBytesOf(const nlohmann::json& frame, const SharedFds& fds,
                                             uint64_t max_bytes);

nlohmann::json LimitsToJson(const config::LimitSpec& l);
Result<config::LimitSpec> LimitsFromJson(const nlohmann::json& l);

// Frames on a job socket (docs/protocol.md section 5), with a reader that
// keeps what arrived past one frame for the next.
class FramedChannel final {
 public:
  FramedChannel(UniqueFd fd, size_t max) : fd_(std::move(fd)), reader_(max) {}
  int fd() const { return fd_.get(); }

  // Something else to wait for while reading: fires once.
  struct Waker {
    int fd = -1;
    short events = POLLIN;
    std::function<void()> fire;
    bool fired = false;
  };

  // The next frame, blocking; wakers fire (once each) when their fd is ready.
  Result<nlohmann::json> Read(std::vector<Waker>* wakers = nullptr) {
    char chunk[65536];
    for (;;) {
      auto next = reader_.Next();
      if (!next.ok()) return std::move(next).error();
      if (next->has_value()) return ipc::ParseFrame(**next);
      pollfd fds[4];
      nfds_t n = 0;
      fds[n++] = {fd_.get(), POLLIN, 0};
      std::vector<Waker*> active;
      if (wakers != nullptr) {
        for (auto& w : *wakers) {
          if (w.fired || w.fd < 0 || n >= 4) continue;
          fds[n++] = {w.fd, w.events, 0};
          active.push_back(&w);
        }
      }
      const int rc = ::poll(fds, n, -1);
      if (rc < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("poll job channel");
      }
      for (size_t i = 0; i < active.size(); ++i) {
        if (fds[i + 1].revents != 0) {
          active[i]->fired = true;
          active[i]->fire();
        }
      }
      if (fds[0].revents == 0) continue;
      KILN_ASSIGN_OR_RETURN(bool open, ReadSome(chunk, sizeof chunk));
      if (!open) {
        return MakeError(Code::kUnavailable, reader_.pending() > 0 ? "job channel ended mid-frame"
                                                                   : "job channel closed");
      }
    }
  }

  // A frame if one is complete now; nullopt otherwise; kUnavailable at EOF.
  Result<std::optional<nlohmann::json>> TryRead() {
    char chunk[65536];
    for (;;) {
      auto next = reader_.Next();
      if (!next.ok()) return std::move(next).error();
      if (next->has_value()) {
        KILN_ASSIGN_OR_RETURN(nlohmann::json frame, ipc::ParseFrame(**next));
        return std::optional<nlohmann::json>(std::move(frame));
      }
      pollfd pfd{fd_.get(), POLLIN, 0};
      const int rc = ::poll(&pfd, 1, 0);
      if (rc < 0 && errno != EINTR) return ErrnoError("poll job channel");
      if (rc <= 0) return std::optional<nlohmann::json>();
      KILN_ASSIGN_OR_RETURN(bool open, ReadSome(chunk, sizeof chunk));
      if (!open) return MakeError(Code::kUnavailable, "job channel closed");
    }
  }

  Status Write(const nlohmann::json& message) { return WriteFrame(fd_.get(), message); }
  // The fds that came with the bytes read so far (SCM_RIGHTS), in order.
  size_t fds_received() const { return fds_.size(); }
  std::vector<UniqueFd> TakeFds() { return std::exchange(fds_, {}); }
  void ShutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }

 private:
  Result<bool> ReadSome(char* chunk, size_t size) {
    // recvmsg, so that fds sent beside a frame (WriteFrameWithFds) are kept.
    int got[kFdsPerFrame];
    const sys::Received r = sys::ReceiveWithFds(fd_.get(), chunk, size, got, kFdsPerFrame, 0);
    for (size_t i = 0; i < r.nfds; ++i) fds_.emplace_back(got[i]);
    if (r.bytes < 0) {
      errno = r.err;
      return ErrnoError("read job channel");
    }
    if (r.truncated) return InvalidArgument("job channel: fds lost (too many in one frame)");
    if (r.bytes == 0) return false;
    reader_.Feed(chunk, static_cast<size_t>(r.bytes));
    return true;
  }

  UniqueFd fd_;
  ipc::FrameReader reader_;
  std::vector<UniqueFd> fds_;
};

}  // namespace kiln::spawner
