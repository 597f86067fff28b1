// The server's side of the spawner (`kiln serve`'s process, any thread):
// starting and restarting the spawner, handing it jobs, and reading their
// results. The spawner's own main is spawner_main.cc.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "spawner/job_channel.h"
#include "spawner/spawner.h"
#include "sys/fd_passing.h"
#include "sys/syscalls.h"
#include "zygote/handoff.h"

namespace kiln::spawner {

CancelToken::CancelToken() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void CancelToken::Cancel() {
  const uint64_t one = 1;
  (void)!::write(fd_.get(), &one, sizeof one);
}

Result<std::unique_ptr<Spawner>> Spawner::Start(const config::Config& config,
                                                const supervisor::HostContext& host) {
  auto s = std::unique_ptr<Spawner>(new Spawner());
  s->config_ = config;
  // The pool keys are computed once: a plan's pool decision is then a
  // comparison of limits (zygote::PoolFits), no policy built per request.
  if (!zygote::PoolUnavailableReason(config, host).has_value()) s->pool_keys_ = PoolKeysOf(config);
  s->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->wake_) return ErrnoError("eventfd for the spawner's watcher");
  {
    std::lock_guard<std::mutex> lock(s->send_mu_);
    KILN_TRY(s->Launch());
  }
  s->watcher_ = std::thread([p = s.get()] { p->Watch(); });
  return s;
}

Status Spawner::Launch() {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
    return ErrnoError("socketpair for the spawner");
  }
  UniqueFd mine(sp[0]), theirs(sp[1]);
  UniqueFd text(::memfd_create("kiln-config", MFD_CLOEXEC));
  if (!text) return ErrnoError("memfd for the spawner's configuration");
  if (sys::WriteAll(text.get(), config_.text.data(), config_.text.size()) != 0 ||
      ::lseek(text.get(), 0, SEEK_SET) != 0) {
    return ErrnoError("write the spawner's configuration");
  }
  // Above fd 4, so that the dup2s below cannot overwrite each other.
  UniqueFd control_hi(::fcntl(theirs.get(), F_DUPFD_CLOEXEC, 10));
  UniqueFd text_hi(::fcntl(text.get(), F_DUPFD_CLOEXEC, 10));
  if (!control_hi || !text_hi) return ErrnoError("dup the spawner's fds");
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, control_hi.get(), 3);
  ::posix_spawn_file_actions_adddup2(&actions, text_hi.get(), 4);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, 5);  // nothing else of the server's
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string server = std::to_string(::getpid());
  std::string arg0 = "kiln", arg1 = "spawner", arg2 = "--server-pid", arg3 = server;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), arg3.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoError("start the spawner (posix_spawn)", rc);
  UniqueFd pidfd(sys::PidfdOpen(pid, 0));
  if (!pidfd) {
    const int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return ErrnoError("pidfd of the spawner", e);
  }
  pid_ = pid;
  pidfd_ = std::move(pidfd);
  control_ = std::move(mine);
  generation_.fetch_add(1);
  up_ = true;
  return OkStatus();
}

void Spawner::Watch() {
  auto backoff = std::chrono::milliseconds(100);
  auto started = std::chrono::steady_clock::now();
  for (;;) {
    pollfd pfds[2] = {{pidfd_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (!up_) pfds[0].fd = -1;
    if (::poll(pfds, 2, -1) < 0 && errno != EINTR) return;
    if (pfds[1].revents != 0) return;  // stopping
    if (pfds[0].revents == 0) continue;
    int status = 0;
    const pid_t dead = pid_;
    {
      std::lock_guard<std::mutex> lock(send_mu_);
      up_ = false;
      control_.Reset();
      (void)::waitpid(dead, &status, 0);
    }
    ++restarts_;
    // A spawner that lived a while is restarted at once; one that keeps
    // dying waits longer each time, up to 5 s.
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(30)) {
      backoff = std::chrono::milliseconds(100);
    }
    KILN_LOG_ERROR(
        "the spawner (pid {}) {} {}; its executions and sessions are lost; restarting in {} ms",
        dead, WIFSIGNALED(status) ? "was killed by signal" : "exited",
        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), backoff.count());
    for (;;) {
      pollfd stop{wake_.get(), POLLIN, 0};
      if (::poll(&stop, 1, static_cast<int>(backoff.count())) > 0) return;
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
      std::lock_guard<std::mutex> lock(send_mu_);
      Status launched = Launch();
      if (launched.ok()) break;
      KILN_LOG_ERROR("restarting the spawner: {}; again in {} ms", launched.error().ToString(),
                     backoff.count());
    }
    started = std::chrono::steady_clock::now();
    KILN_LOG_WARN("the spawner is running again (pid {})", pid_.load());
  }
}

Spawner::~Spawner() {
  const uint64_t one = 1;
  if (wake_) (void)!::write(wake_.get(), &one, sizeof one);
  if (watcher_.joinable()) watcher_.join();
  if (up_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);  // its supervisors and sandboxes follow (PDEATHSIG)
    ::waitpid(pid_, nullptr, 0);
  }
}

bool Spawner::Alive() const { return up_; }

Result<UniqueFd> Spawner::NewJob(const std::string& pool_profile, uint64_t* generation) {
  // 'J', or 'P' + the profile: the spawner may hand it a pooled sandbox.
  return SendJob(pool_profile.empty() || pool_profile.size() > 64 ? "J" : "P" + pool_profile,
                 generation);
}

Result<UniqueFd> Spawner::SendJob(const std::string& tag, uint64_t* generation) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  UniqueFd job(sp[0]), theirs(sp[1]);
  const int fd = theirs.get();
  std::lock_guard<std::mutex> lock(send_mu_);
  if (!up_) return MakeError(Code::kUnavailable, "the spawner is restarting; retry");
  *generation = generation_;
  if (sys::SendWithFds(control_.get(), tag.data(), tag.size(), &fd, 1, 0) !=
      static_cast<ssize_t>(tag.size())) {
    return MakeError(Code::kUnavailable, "the spawner is not running; retry");
  }
  return job;
}

Result<nlohmann::json> Spawner::PoolStatus() {
  uint64_t generation = 0;
  KILN_ASSIGN_OR_RETURN(UniqueFd job, SendJob("S", &generation));
  // The spawner answers from its loop at once; a spawner that does not
  // within two seconds is busy or stuck: no status rather than a stuck scrape.
  pollfd p{job.get(), POLLIN, 0};
  if (::poll(&p, 1, 2000) <= 0)
    return MakeError(Code::kUnavailable, "the spawner did not answer in 2 s");
  FramedChannel ch(std::move(job), kMaxResponseBytes);
  auto frame = ch.Read();
  if (!frame.ok()) return Died(generation, "pool status", frame.error());
  if (frame->value("type", "") != "pool") return Internal("malformed pool status from the spawner");
  frame->erase("type");
  return std::move(*frame);
}

Error Spawner::Died(uint64_t generation, const std::string& what, const Error& e) {
  bool spawner_died = false;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    pollfd p{pidfd_ ? pidfd_.get() : -1, POLLIN, 0};
    spawner_died = !up_ || generation != generation_ || (p.fd >= 0 && ::poll(&p, 1, 0) > 0);
  }
  return MakeError(Code::kUnavailable,
                   spawner_died ? "the spawner died during the " + what + "; retry"
                                : "the " + what + "'s supervisor died (" + e.message + "); retry");
}

namespace {

// Reads frames up to the result, passing events on. `wakers` as FramedChannel::Read.
Result<ExecResponse> ReadResult(FramedChannel& ch, const EventFn& on_event,
                                std::vector<FramedChannel::Waker>* wakers) {
  for (;;) {
    auto frame = ch.Read(wakers);
    if (!frame.ok()) {  // kUnavailable: the supervisor (or the spawner) died
      return MakeError(Code::kUnavailable,
                       "the sandbox's supervisor ended without a result: " + frame.error().message);
    }
    const std::string type = (*frame)["type"].get<std::string>();
    if (type == "event") {
      if (on_event && frame->contains("data"))
        on_event(frame->value("event", ""), (*frame)["data"]);
      continue;
    }
    if (type == "error") return ErrorOf(*frame);
    if (type == "gone") {
      return MakeError(Code::kNotFound, "the session is gone: " + frame->value("reason", ""));
    }
    if (type != "result" || !frame->contains("result") || !(*frame)["result"].is_object()) {
      return Internal("malformed response from the supervisor");
    }
    // Typed from here on (ExecResponse); its returned files come beside it.
    auto fds = ReadFdsBeside(ch, *frame);
    if (!fds.ok()) return Internal("malformed result from the supervisor: " + fds.error().message);
    auto response = DecodeResult(*frame, *fds);
    if (!response.ok()) {
      return Internal("malformed result from the supervisor: " + response.error().message);
    }
    return response;
  }
}

}  // namespace

Result<ExecResponse> Spawner::Run(ExecPlan plan, const CancelToken* cancel, int hangup_fd,
                                  const EventFn& on_event) {
  plan.stream = static_cast<bool>(on_event);
  SharedFds fds;
  KILN_ASSIGN_OR_RETURN(nlohmann::json frame, EncodePlan(plan, &fds));
  uint64_t generation = 0;
  KILN_ASSIGN_OR_RETURN(UniqueFd job, NewJob(plan.pooled ? plan.profile : "", &generation));
  FramedChannel ch(std::move(job), kMaxResponseBytes);
  if (Status written = WriteFrameWithFds(ch.fd(), frame, fds); !written.ok()) {
    return Died(generation, "execution", written.error());
  }
  // The supervisor has its own copies of the input files now.
  fds.clear();
  plan.policy.reset();
  // Cancel or a client hangup: EOF on the supervisor's end, which kills the
  // sandbox and answers with its "cancelled" result.
  std::vector<FramedChannel::Waker> wakers(2);
  wakers[0].fd = cancel ? cancel->fd() : -1;
  wakers[0].fire = [&ch] { ch.ShutdownWrite(); };
  wakers[1].fd = hangup_fd;
  wakers[1].events = POLLRDHUP;
  wakers[1].fire = [&ch] { ch.ShutdownWrite(); };
  auto result = ReadResult(ch, on_event, &wakers);
  if (!result.ok() && result.error().code == Code::kUnavailable) {
    return Died(generation, "execution", result.error());
  }
  return result;
}

SessionChannel::SessionChannel() = default;
SessionChannel::~SessionChannel() = default;  // closing the socket ends the session

Result<std::unique_ptr<SessionChannel>> Spawner::StartSession(const SessionPlan& plan,
                                                              const CancelToken* cancel) {
  SharedFds fds;
  KILN_ASSIGN_OR_RETURN(nlohmann::json start, EncodeSessionPlan(plan, &fds));
  uint64_t generation = 0;
  KILN_ASSIGN_OR_RETURN(UniqueFd job, NewJob(plan.pooled ? plan.profile : "", &generation));
  auto session = std::unique_ptr<SessionChannel>(new SessionChannel());
  session->channel_ = std::make_unique<FramedChannel>(std::move(job), kMaxResponseBytes);
  FramedChannel& ch = *session->channel_;
  if (Status written = WriteFrameWithFds(ch.fd(), start, fds); !written.ok()) {
    return Died(generation, "session's start", written.error());
  }
  std::vector<FramedChannel::Waker> wakers(1);
  wakers[0].fd = cancel ? cancel->fd() : -1;
  wakers[0].fire = [&ch] { ch.ShutdownWrite(); };
  auto frame = ch.Read(&wakers);
  if (!frame.ok()) return Died(generation, "session's start", frame.error());
  const std::string type = frame->value("type", "");
  if (type == "error") return ErrorOf(*frame);
  if (type != "ready") return Internal("malformed response from the session's supervisor");
  session->ready_ = std::move(*frame);
  return session;
}

Result<ExecResponse> SessionChannel::Execute(const std::string& code, double timeout_s,
                                             const EventFn& on_event, int hangup_fd,
                                             const CancelToken* cancel,
                                             const nlohmann::json& extra) {
  if (gone_) return MakeError(Code::kNotFound, "the session is gone: " + *gone_);
  {
    nlohmann::json request = {{"type", "execute"},
                              {"code", code},
                              {"timeout_s", timeout_s},
                              {"stream", static_cast<bool>(on_event)}};
    if (extra.is_object() && !extra.empty()) request["extra"] = extra;
    std::lock_guard<std::mutex> lock(write_mu_);
    KILN_TRY(channel_->Write(request));
  }
  std::vector<FramedChannel::Waker> wakers(2);
  wakers[0].fd = cancel ? cancel->fd() : -1;
  wakers[0].fire = [this] {
    std::lock_guard<std::mutex> lock(write_mu_);
    (void)channel_->Write({{"type", "cancel"}});
  };
  wakers[1].fd = hangup_fd;
  wakers[1].events = POLLRDHUP;
  wakers[1].fire = [this] { Interrupt(); };  // a client that left interrupts its cell
  auto result = ReadResult(*channel_, on_event, &wakers);
  if (!result.ok()) {
    gone_ = result.error().message;
    return result;
  }
  if (result->result.session_state == "lost") {
    gone_ = result->result.reason.empty() ? "the sandbox died" : result->result.reason;
  }
  return result;
}

void SessionChannel::Interrupt() {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (!gone_) (void)channel_->Write({{"type", "interrupt"}});
}

Result<nlohmann::json> SessionChannel::Call(const nlohmann::json& request, const SharedFds& send,
                                            SharedFds* received) {
  if (gone_) return MakeError(Code::kNotFound, "the session is gone: " + *gone_);
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    KILN_TRY(send.empty() ? channel_->Write(request)
                          : WriteFrameWithFds(channel_->fd(), request, send));
  }
  auto frame = channel_->Read();
  if (!frame.ok()) {
    gone_ = "the session's supervisor ended: " + frame.error().message;
    return MakeError(Code::kNotFound, "the session is gone: " + *gone_);
  }
  const std::string type = frame->value("type", "");
  if (type == "gone") {
    gone_ = frame->value("reason", "the sandbox died");
    return MakeError(Code::kNotFound, "the session is gone: " + *gone_);
  }
  if (type == "error") return ErrorOf(*frame);
  if (frame->contains("fds")) {
    auto fds = ReadFdsBeside(*channel_, *frame);
    if (!fds.ok() || received == nullptr) {
      gone_ = "the session's supervisor sent fds it should not have: " +
              (fds.ok() ? std::string("unasked") : fds.error().message);
      return MakeError(Code::kInternal, *gone_);
    }
    *received = std::move(*fds);
  }
  return std::move(*frame);
}

// A file's bytes travel in a sealed memfd beside the frame, both ways
// (docs/protocol.md section 5): no base64, no copy in the JSON.
Status SessionChannel::PutFile(const std::string& path, const std::string& bytes) {
  SharedFds fds;
  KILN_ASSIGN_OR_RETURN(nlohmann::json request,
                        EncodeFileBytes({{"type", "file_put"}, {"path", path}}, bytes, &fds));
  KILN_TRY(Call(request, fds));
  return OkStatus();
}

Result<std::string> SessionChannel::GetFile(const std::string& path) {
  SharedFds fds;
  KILN_ASSIGN_OR_RETURN(nlohmann::json reply,
                        Call({{"type", "file_get"}, {"path", path}}, {}, &fds));
  auto file = FileBytesOf(reply, fds, kMaxResponseBytes);
  if (!file.ok()) return Internal("file_get: a malformed answer: " + file.error().message);
  return ReadMemfd(file->first, 0, file->second);
}

Result<nlohmann::json> SessionChannel::ListFiles() {
  KILN_ASSIGN_OR_RETURN(nlohmann::json reply, Call({{"type", "file_list"}}));
  return reply.value("files", nlohmann::json::array());
}

Status SessionChannel::DeleteFile(const std::string& path, bool recursive) {
  KILN_TRY(Call({{"type", "file_delete"}, {"path", path}, {"recursive", recursive}}));
  return OkStatus();
}

Status SessionChannel::MakeDir(const std::string& path) {
  KILN_TRY(Call({{"type", "file_mkdir"}, {"path", path}}));
  return OkStatus();
}

Status SessionChannel::Move(const std::string& from, const std::string& to) {
  KILN_TRY(Call({{"type", "file_move"}, {"path", from}, {"to", to}}));
  return OkStatus();
}

Result<nlohmann::json> SessionChannel::Stats() {
  KILN_ASSIGN_OR_RETURN(nlohmann::json reply, Call({{"type", "stats"}}));
  reply.erase("type");
  return reply;
}

std::optional<std::string> SessionChannel::Gone() {
  if (gone_) return gone_;
  auto frame = channel_->TryRead();
  if (!frame.ok()) {
    gone_ = "the session's supervisor ended";
  } else if (frame->has_value()) {
    gone_ = (**frame).value("type", "") == "gone"
                ? (**frame).value("reason", "the sandbox died")
                : "unexpected message from the session's supervisor";
  }
  return gone_;
}

}  // namespace kiln::spawner
