#include "spawner/spawner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "base/base64.h"
#include "base/log.h"
#include "ipc/frame.h"
#include "supervisor/sandbox.h"
#include "sys/syscalls.h"

namespace kiln::spawner {
namespace {

constexpr size_t kMaxRequestBytes = 320u << 20;   // 64 MiB of code + files + encoding
constexpr size_t kMaxResponseBytes = 512u << 20;  // outputs + returned files, base64

Status WriteFrame(int fd, const nlohmann::json& message) {
  const std::string wire = ipc::EncodeMessage(message);
  if (sys::WriteAll(fd, wire.data(), wire.size()) != 0) return ErrnoError("write job frame");
  return OkStatus();
}

// Reads one frame, polling `extra_fd` (readable) and `hangup_fd` (peer hung
// up) too; returns kCancelled when either fires.
Result<nlohmann::json> ReadFrame(int fd, size_t max, int extra_fd, bool* extra_fired,
                                 int hangup_fd = -1) {
  ipc::FrameReader reader(max);
  char chunk[65536];
  for (;;) {
    auto next = reader.Next();
    if (!next.ok()) return std::move(next).error();
    if (next->has_value()) return ipc::ParseFrame(**next);
    pollfd fds[3] = {{fd, POLLIN, 0}, {extra_fd, POLLIN, 0}, {hangup_fd, POLLRDHUP, 0}};
    const int rc = ::poll(fds, 3, -1);  // negative fds are ignored by poll
    if (rc < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll job channel");
    }
    const bool fired = (extra_fd >= 0 && fds[1].revents != 0) ||
                       (hangup_fd >= 0 && (fds[2].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0);
    if (fired && extra_fired != nullptr && !*extra_fired) {
      *extra_fired = true;
      return MakeError(Code::kCancelled, "cancelled");
    }
    if (fds[0].revents == 0) continue;
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read job channel");
    }
    if (n == 0) {
      return MakeError(Code::kUnavailable, reader.pending() > 0 ? "job channel ended mid-frame"
                                                                : "job channel closed");
    }
    reader.Feed(chunk, static_cast<size_t>(n));
  }
}

nlohmann::json LimitsToJson(const config::LimitSpec& l) {
  nlohmann::json j = nlohmann::json::object();
  if (l.timeout_s) j["timeout_s"] = *l.timeout_s;
  if (l.cpu_time_s) j["cpu_time_s"] = *l.cpu_time_s;
  if (l.memory_bytes) j["memory_bytes"] = *l.memory_bytes;
  if (l.cpus) j["cpus"] = *l.cpus;
  if (l.pids) j["pids"] = *l.pids;
  if (l.output_bytes) j["output_bytes"] = *l.output_bytes;
  if (l.disk_bytes) j["disk_bytes"] = *l.disk_bytes;
  return j;
}

// The supervisor process of one job: single-threaded, forked by the spawner.
[[noreturn]] void RunJob(int fd, const config::Config& config, const supervisor::HostContext& host) {
  auto reply_error = [fd](const Error& e) {
    (void)WriteFrame(fd, {{"type", "error"},
                          {"code", std::string(ToString(e.code))},
                          {"message", e.ToString()}});
    ::_exit(0);
  };
  auto frame = ReadFrame(fd, kMaxRequestBytes, -1, nullptr);
  if (!frame.ok()) ::_exit(1);
  auto request = DecodeRequest(*frame);
  if (!request.ok()) reply_error(request.error());
  auto profile = config.Find(request->profile);
  if (!profile.ok()) reply_error(profile.error());
  auto builder = config::PolicyFor(**profile, request->limits);
  if (!builder.ok()) reply_error(builder.error());
  for (auto& [path, bytes] : request->files) builder->AddFileContent(path, std::move(bytes));
  if (::geteuid() != 0) builder->CgroupRequirement(policy::Requirement::kBestEffort);
  auto policy = builder->Build();
  if (!policy.ok()) reply_error(policy.error());
  supervisor::Program program{request->filename, request->code, request->env};
  supervisor::RunOptions options;
  options.return_files = request->return_files;
  options.cancel_fd = fd;  // the server closing its end cancels the run
  auto result = supervisor::RunSandboxed(host, *policy, program, options);
  if (!result.ok()) reply_error(result.error());
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : result->returned_files) {
    files.push_back({{"path", f.path}, {"content_base64", Base64Encode(f.content)}});
  }
  (void)WriteFrame(fd, {{"type", "result"}, {"result", supervisor::ToJson(*result, false)},
                        {"files", files}});
  ::_exit(0);
}

[[noreturn]] void SpawnerMain(int control, pid_t server, const config::Config& config,
                              const supervisor::HostContext& host) {
  // Dies with the server; everything below dies with us the same way.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() != server) ::_exit(0);
  ::prctl(PR_SET_NAME, "kiln-spawner", 0, 0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  // A service manager signals the whole process group or cgroup on stop; the
  // server orchestrates the drain, so the spawner and its supervisors ignore
  // SIGTERM and ^C (the sandbox resets every disposition: RunChild step 0).
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  // Nothing we fork may start with a blocked signal mask (the program's own
  // KeyboardInterrupt and SIGTERM handlers must work).
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    pollfd pfd{control, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, 200);
    if (rc < 0 && errno != EINTR) ::_exit(1);
    if (rc <= 0) continue;
    char tag = 0;
    iovec iov{&tag, 1};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    const ssize_t n = ::recvmsg(control, &msg, MSG_CMSG_CLOEXEC);
    if (n == 0) ::_exit(0);  // the server is gone
    if (n < 0) {
      if (errno == EINTR) continue;
      ::_exit(1);
    }
    int job = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
        if (job < 0) {
          job = received;
        } else {
          ::close(received);
        }
      }
    }
    if (tag != 'J' || job < 0) {
      if (job >= 0) ::close(job);
      continue;
    }
    const pid_t self = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
      if (::getppid() != self) ::_exit(0);
      ::prctl(PR_SET_NAME, "kiln-supervise", 0, 0, 0);
      ::close(control);
      RunJob(job, config, host);
    }
    ::close(job);
  }
}

}  // namespace

CancelToken::CancelToken() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void CancelToken::Cancel() {
  const uint64_t one = 1;
  (void)!::write(fd_.get(), &one, sizeof one);
}

nlohmann::json EncodeRequest(const ExecRequest& r) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& [path, bytes] : r.files) {
    files.push_back({{"path", path}, {"content_base64", Base64Encode(bytes)}});
  }
  nlohmann::json j = {{"type", "execute"}, {"id", r.id},     {"profile", r.profile},
                      {"limits", LimitsToJson(r.limits)},    {"code", r.code},
                      {"filename", r.filename},              {"files", files}};
  j["return_files"] = r.return_files ? nlohmann::json(*r.return_files) : nlohmann::json(nullptr);
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : r.env) env[k] = v;
  j["env"] = env;
  return j;
}

Result<ExecRequest> DecodeRequest(const nlohmann::json& j) {
  // The other end is the server (trusted), but a malformed frame must still be
  // an error, not an exception.
  ExecRequest r;
  KILN_ASSIGN_OR_RETURN(r.id, ipc::GetString(j, "id"));
  KILN_ASSIGN_OR_RETURN(r.profile, ipc::GetString(j, "profile"));
  KILN_ASSIGN_OR_RETURN(r.code, ipc::GetString(j, "code"));
  KILN_ASSIGN_OR_RETURN(r.filename, ipc::GetString(j, "filename"));
  const auto& l = j.value("limits", nlohmann::json::object());
  if (!l.is_object()) return InvalidArgument("limits must be an object");
  auto num = [&l](const char* k) -> std::optional<double> {
    return l.contains(k) && l[k].is_number() ? std::optional<double>(l[k].get<double>()) : std::nullopt;
  };
  auto u64 = [&l](const char* k) -> std::optional<uint64_t> {
    return l.contains(k) && l[k].is_number_unsigned() ? std::optional<uint64_t>(l[k].get<uint64_t>())
                                                      : std::nullopt;
  };
  r.limits.timeout_s = num("timeout_s");
  r.limits.cpu_time_s = num("cpu_time_s");
  r.limits.memory_bytes = u64("memory_bytes");
  r.limits.cpus = num("cpus");
  r.limits.pids = u64("pids");
  r.limits.output_bytes = u64("output_bytes");
  r.limits.disk_bytes = u64("disk_bytes");
  const auto files = j.value("files", nlohmann::json::array());
  if (!files.is_array()) return InvalidArgument("files must be an array");
  for (const auto& f : files) {
    if (!f.is_object()) return InvalidArgument("files: entries must be objects");
    KILN_ASSIGN_OR_RETURN(std::string path, ipc::GetString(f, "path"));
    KILN_ASSIGN_OR_RETURN(std::string b64, ipc::GetString(f, "content_base64"));
    KILN_ASSIGN_OR_RETURN(std::string bytes, Base64Decode(b64));
    r.files.emplace_back(std::move(path), std::move(bytes));
  }
  if (j.contains("env") && j["env"].is_object()) {
    for (const auto& [k, v] : j["env"].items()) {
      if (!v.is_string()) return InvalidArgument("env values must be strings");
      r.env.emplace_back(k, v.get<std::string>());
    }
  }
  if (j.contains("return_files") && j["return_files"].is_array()) {
    std::vector<std::string> globs;
    for (const auto& g : j["return_files"]) {
      if (!g.is_string()) return InvalidArgument("return_files: entries must be strings");
      globs.push_back(g.get<std::string>());
    }
    r.return_files = std::move(globs);
  }
  return r;
}

Result<std::unique_ptr<Spawner>> Spawner::Start(const config::Config& config,
                                                supervisor::HostContext host) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
    return ErrnoError("socketpair for the spawner");
  }
  UniqueFd mine(sp[0]), theirs(sp[1]);
  const pid_t server = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork the spawner");
  if (pid == 0) {
    mine.Reset();
    SpawnerMain(theirs.Release(), server, config, host);
  }
  auto s = std::unique_ptr<Spawner>(new Spawner());
  s->pid_ = pid;
  s->control_ = std::move(mine);
  return s;
}

Spawner::~Spawner() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);  // its supervisors and sandboxes follow (PDEATHSIG)
    ::waitpid(pid_, nullptr, 0);
  }
}

bool Spawner::Alive() const { return pid_ > 0 && ::kill(pid_, 0) == 0; }

Result<ExecResponse> Spawner::Run(const ExecRequest& request, const CancelToken* cancel,
                                  int hangup_fd) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) return ErrnoError("socketpair");
  UniqueFd job(sp[0]), theirs(sp[1]);
  {
    char tag = 'J';
    iovec iov{&tag, 1};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    const int fd = theirs.get();
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    std::lock_guard<std::mutex> lock(send_mu_);
    if (::sendmsg(control_.get(), &msg, MSG_NOSIGNAL) != 1) {
      return ErrnoError("hand the job to the spawner", errno);
    }
  }
  theirs.Reset();
  KILN_TRY(WriteFrame(job.get(), EncodeRequest(request)));
  bool cancelled = false;
  auto frame = ReadFrame(job.get(), kMaxResponseBytes, cancel ? cancel->fd() : -1, &cancelled,
                         hangup_fd);
  if (!frame.ok() && frame.error().code == Code::kCancelled) {
    // Tell the supervisor (EOF on its end), then take its "cancelled" result.
    ::shutdown(job.get(), SHUT_WR);
    frame = ReadFrame(job.get(), kMaxResponseBytes, -1, nullptr);
  }
  if (!frame.ok()) {
    return MakeError(Code::kInternal, "the sandbox's supervisor ended without a result: " +
                                          frame.error().message);
  }
  const std::string type = (*frame)["type"].get<std::string>();
  if (type == "error") {
    const std::string code = frame->value("code", "internal");
    const std::string message = frame->value("message", "unknown error");
    Code c = Code::kInternal;
    if (code == "invalid_argument") c = Code::kInvalidArgument;
    if (code == "failed_precondition") c = Code::kFailedPrecondition;
    if (code == "resource_exhausted") c = Code::kResourceExhausted;
    if (code == "not_found") c = Code::kNotFound;
    return MakeError(c, message);
  }
  if (type != "result" || !frame->contains("result") || !(*frame)["result"].is_object()) {
    return Internal("malformed response from the supervisor");
  }
  ExecResponse response;
  response.result = std::move((*frame)["result"]);
  for (const auto& f : frame->value("files", nlohmann::json::array())) {
    auto bytes = Base64Decode(f.value("content_base64", ""));
    if (!bytes.ok()) return Internal("malformed returned file");
    response.files.emplace_back(f.value("path", ""), std::move(*bytes));
  }
  return response;
}

}  // namespace kiln::spawner
