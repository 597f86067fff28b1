// The spawner: where every sandbox of the server is forked (design.md, section
// 2). A multithreaded process must not fork-and-configure, so `kiln serve`
// starts this single-threaded helper process before it starts any thread. For
// each execution the spawner forks a supervisor process (single-threaded,
// like `kiln run`), which builds the policy from the profile, runs the
// sandbox with RunSandboxed and writes the result back.
//
// Processes: kiln serve --fork--> spawner --fork--> supervisor --clone3--> sandbox
// Each one dies with its parent (PR_SET_PDEATHSIG), so a server killed with
// SIGKILL leaves no sandbox running; its empty cgroups are removed at the next
// start (supervisor::CleanupStaleCgroups).
//
// Channels: a SOCK_SEQPACKET control socket server->spawner carrying one job
// socket per execution (SCM_RIGHTS); on the job socket, one request frame and
// one response frame (docs/protocol.md section 5). Closing the server's end of
// a job socket cancels that execution.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "base/unique_fd.h"
#include "config/config.h"
#include "supervisor/host.h"

namespace kiln::spawner {

struct ExecRequest {
  std::string id;                   // the execution's id (audit, logs)
  std::string profile = "default";  // a profile of the server's config
  config::LimitSpec limits;         // what the request asked for (the profile caps it)
  std::string code;
  std::string filename = "<cell>";
  std::vector<std::pair<std::string, std::string>> files;  // relative path -> bytes
  std::optional<std::vector<std::string>> return_files;    // globs; empty list = all
  std::vector<std::pair<std::string, std::string>> env;    // validated by the caller
};

struct ExecResponse {
  nlohmann::json result;  // supervisor::ToJson's shape (docs/api.md)
  std::vector<std::pair<std::string, std::string>> files;  // returned files: path -> bytes
};

// Lets another thread cancel a Run: Cancel() wakes it (an eventfd).
class CancelToken final {
 public:
  CancelToken();
  void Cancel();
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

class Spawner final {
 public:
  // Forks the spawner. Precondition: the calling process has one thread.
  // `config` and `host` are the spawner's (and its children's) copies.
  static Result<std::unique_ptr<Spawner>> Start(const config::Config& config,
                                                supervisor::HostContext host);
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Thread-safe; blocks until the execution ends. Errors: the request was
  // refused before anything ran (kInvalidArgument naming the field: unknown
  // profile, over a maximum, bad file path), the host cannot run it
  // (kFailedPrecondition), or the spawner/supervisor died (kInternal,
  // kUnavailable). A cancelled execution returns its result with status
  // "cancelled". `hangup_fd` (a client's socket, or -1): its peer hanging up
  // cancels too.
  Result<ExecResponse> Run(const ExecRequest& request, const CancelToken* cancel,
                           int hangup_fd = -1);

  pid_t pid() const { return pid_; }
  // Whether the spawner process is still there.
  bool Alive() const;

 private:
  Spawner() = default;
  pid_t pid_ = -1;
  UniqueFd control_;
  std::mutex send_mu_;
};

// Encoding of the job channel, exposed for unit tests.
nlohmann::json EncodeRequest(const ExecRequest& r);
Result<ExecRequest> DecodeRequest(const nlohmann::json& j);

}  // namespace kiln::spawner
