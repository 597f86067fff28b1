#include "spawner/spawner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <set>

#include "base/base64.h"
#include "base/log.h"
#include "ipc/frame.h"
#include "supervisor/sandbox.h"
#include "supervisor/workspace_files.h"
#include "sys/fd_passing.h"
#include "sys/syscalls.h"
#include "zygote/handoff.h"

namespace kiln::spawner {
namespace {

constexpr size_t kMaxRequestBytes = 320u << 20;   // 64 MiB of code + files + encoding
constexpr size_t kMaxResponseBytes = 512u << 20;  // outputs + returned files, base64

Status WriteFrame(int fd, const nlohmann::json& message) {
  const std::string wire = ipc::EncodeMessage(message);
  if (sys::WriteAll(fd, wire.data(), wire.size()) != 0) return ErrnoError("write job frame");
  return OkStatus();
}

Code CodeFromName(const std::string& code) {
  if (code == "invalid_argument") return Code::kInvalidArgument;
  if (code == "failed_precondition") return Code::kFailedPrecondition;
  if (code == "resource_exhausted") return Code::kResourceExhausted;
  if (code == "not_found") return Code::kNotFound;
  if (code == "aborted") return Code::kAborted;
  if (code == "unavailable") return Code::kUnavailable;
  if (code == "already_exists") return Code::kAlreadyExists;
  return Code::kInternal;
}

// The request field the error is about travels with it ("field", when set).
nlohmann::json ErrorFrame(const Error& e) {
  nlohmann::json j = {
      {"type", "error"}, {"code", std::string(ToString(e.code))}, {"message", e.message}};
  if (!e.field.empty()) j["field"] = e.field;
  return j;
}

Error ErrorOf(const nlohmann::json& frame) {
  Error e = MakeError(CodeFromName(frame.value("code", "internal")),
                      frame.value("message", "unknown error"));
  if (auto f = frame.find("field"); f != frame.end() && f->is_string())
    e.field = f->get<std::string>();
  return e;
}

}  // namespace

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
  void ShutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }

 private:
  Result<bool> ReadSome(char* chunk, size_t size) {
    for (;;) {
      const ssize_t n = ::read(fd_.get(), chunk, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("read job channel");
      }
      if (n == 0) return false;
      reader_.Feed(chunk, static_cast<size_t>(n));
      return true;
    }
  }

  UniqueFd fd_;
  ipc::FrameReader reader_;
};

namespace {

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

Result<config::LimitSpec> LimitsFromJson(const nlohmann::json& l) {
  if (!l.is_object()) return InvalidArgument("limits must be an object");
  auto num = [&l](const char* k) -> std::optional<double> {
    return l.contains(k) && l[k].is_number() ? std::optional<double>(l[k].get<double>())
                                             : std::nullopt;
  };
  auto u64 = [&l](const char* k) -> std::optional<uint64_t> {
    return l.contains(k) && l[k].is_number_unsigned()
               ? std::optional<uint64_t>(l[k].get<uint64_t>())
               : std::nullopt;
  };
  config::LimitSpec out;
  out.timeout_s = num("timeout_s");
  out.cpu_time_s = num("cpu_time_s");
  out.memory_bytes = u64("memory_bytes");
  out.cpus = num("cpus");
  out.pids = u64("pids");
  out.output_bytes = u64("output_bytes");
  out.disk_bytes = u64("disk_bytes");
  return out;
}

nlohmann::json ResultFrame(const supervisor::ExecutionResult& result) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : result.returned_files) {
    files.push_back({{"path", f.path}, {"content_base64", Base64Encode(f.content)}});
  }
  return {{"type", "result"}, {"result", supervisor::ToJson(result, false)}, {"files", files}};
}

Result<policy::SandboxPolicy> BuildPolicy(const config::Config& config,
                                          const std::string& profile_name,
                                          const config::LimitSpec& limits,
                                          std::vector<std::pair<std::string, std::string>>* files) {
  KILN_ASSIGN_OR_RETURN(const config::Profile* profile, config.Find(profile_name));
  KILN_ASSIGN_OR_RETURN(policy::PolicyBuilder builder, config::PolicyFor(*profile, limits));
  if (files != nullptr) {
    for (auto& [path, bytes] : *files) builder.AddFileContent(path, std::move(bytes));
  }
  if (::geteuid() != 0) builder.CgroupRequirement(policy::Requirement::kBestEffort);
  return builder.Build();
}

// One-shot: one request, one sandbox, one result.
[[noreturn]] void RunOneShot(FramedChannel& ch, const nlohmann::json& frame,
                             const config::Config& config, const supervisor::HostContext& host,
                             std::optional<zygote::Handoff> pooled) {
  auto reply_error = [&ch](const Error& e) {
    (void)ch.Write(ErrorFrame(e));
    ::_exit(0);
  };
  auto request = DecodeRequest(frame);
  if (!request.ok()) reply_error(request.error());
  auto policy = BuildPolicy(config, request->profile, request->limits, &request->files);
  if (!policy.ok()) reply_error(policy.error());
  supervisor::Program program{request->filename, request->code, request->env};
  supervisor::RunOptions options;
  options.return_files = request->return_files;
  options.cancel_fd = ch.fd();  // the server closing its end cancels the run
  if (request->stream) {
    options.on_event = [&ch](std::string_view event, const nlohmann::json& data) {
      (void)ch.Write({{"type", "event"}, {"event", std::string(event)}, {"data", data}});
    };
  }
  // A sandbox from the warm pool when the server found the request eligible
  // (zygote::PoolEligible; checked again here); else, or if it cannot be
  // adopted, a cold one. An unused pooled sandbox dies with our copies of
  // its fds and its cgroup with the adopted object.
  std::optional<supervisor::AdoptedSandbox> adopted;
  if (pooled) {
    auto profile = config.Find(request->profile);
    if (profile.ok() && zygote::PoolEligible(config, **profile, request->limits, request->env)) {
      auto a = zygote::Adopt(host, std::move(*pooled));
      if (a.ok()) {
        adopted.emplace(std::move(*a));
        options.adopt = &*adopted;
      } else {
        KILN_LOG_WARN("pooled sandbox not adopted ({}): cold start", a.error().ToString());
      }
    }
    pooled.reset();
  }
  // The answer goes out as soon as the result is known; the sandbox's
  // teardown follows it.
  bool answered = false;
  options.on_result = [&ch, &answered](const supervisor::ExecutionResult& r) {
    (void)ch.Write(ResultFrame(r));
    answered = true;
  };
  auto result = supervisor::RunSandboxed(host, *policy, program, options);
  if (!result.ok()) reply_error(result.error());
  if (!answered) (void)ch.Write(ResultFrame(*result));
  ::_exit(0);
}

// A session: one sandbox kept between requests (docs/protocol.md section 5),
// a pooled one when the server found the session eligible (checked again
// here) and the pool had one ready, else a cold one.
[[noreturn]] void RunSession(FramedChannel& ch, const nlohmann::json& frame,
                             const config::Config& config, const supervisor::HostContext& host,
                             std::optional<zygote::Handoff> pooled) {
  auto reply_error = [&ch](const Error& e) {
    (void)ch.Write(ErrorFrame(e));
    ::_exit(0);
  };
  auto start = DecodeSessionRequest(frame);
  if (!start.ok()) reply_error(start.error());
  auto policy = BuildPolicy(config, start->profile, start->limits, nullptr);
  if (!policy.ok()) reply_error(policy.error());
  // RLIMIT_CPU backstop: all the cpu the session could use in its lifetime
  // (cells are limited by the cgroup's accounting).
  const double rlimit_cpu_s =
      policy::SessionCpuBudgetSeconds(start->max_lifetime_s, policy->limits());
  std::unique_ptr<supervisor::Sandbox> sandbox;
  if (pooled) {
    auto profile = config.Find(start->profile);
    if (profile.ok() && zygote::PoolEligible(config, **profile, start->limits, start->env)) {
      auto a = zygote::Adopt(host, std::move(*pooled));
      auto adopted = a.ok() ? supervisor::Sandbox::Adopt(host, *policy, std::move(*a), rlimit_cpu_s)
                            : Result<std::unique_ptr<supervisor::Sandbox>>(std::move(a).error());
      if (adopted.ok()) {
        sandbox = std::move(*adopted);
      } else {
        KILN_LOG_WARN("pooled sandbox not adopted for a session ({}): cold start",
                      adopted.error().ToString());
      }
    }
    pooled.reset();
  }
  const bool from_pool = sandbox != nullptr;
  if (!sandbox) {
    supervisor::LaunchOptions launch;
    launch.env = start->env;
    launch.rlimit_cpu_s = rlimit_cpu_s;
    auto launched = supervisor::Sandbox::Launch(host, *policy, launch);
    if (!launched.ok()) reply_error(launched.error());
    sandbox = std::move(*launched);
  }
  supervisor::Sandbox& sbx = *sandbox;
  bool server_gone = false;
  supervisor::Waiters setup_waiters;
  setup_waiters.cancel_fd = ch.fd();  // anything from the server before ready: it gave up
  if (!sbx.WaitReady(setup_waiters)) {
    supervisor::ExecutionResult r = sbx.Finish({});
    // A layer missing when checked from outside (supervisor/verify.h) is
    // kiln's or the host's fault, as for one-shot executions.
    const bool verify = r.setup_error && r.setup_error->step == SetupStep::kVerify;
    reply_error(MakeError(verify ? Code::kInternal : Code::kFailedPrecondition,
                          "the session's sandbox did not start: " + r.reason));
  }
  const policy::Limits& limits = policy->limits();
  (void)ch.Write({{"type", "ready"},
                  {"pooled", from_pool},
                  {"limits",
                   {{"memory_bytes", limits.memory_bytes},
                    {"cpus", limits.cpus},
                    {"timeout_s", limits.wall_timeout_s},
                    // null: no cpu-time limit of its own (the wall clock bounds it)
                    {"cpu_time_s", limits.cpu_time_explicit ? nlohmann::json(limits.cpu_time_s)
                                                            : nlohmann::json(nullptr)},
                    {"pids", limits.pids},
                    {"disk_bytes", limits.workspace_bytes},
                    {"output_bytes", limits.output_bytes}}}});

  supervisor::WorkspaceCaps caps;
  caps.max_file_bytes = start->max_file_bytes;
  caps.max_workspace_bytes = limits.workspace_bytes;
  const bool root = ::geteuid() == 0;
  auto end_session = [&](const std::string& reason, bool tell) {
    if (tell) (void)ch.Write({{"type", "gone"}, {"reason", reason}});
    (void)sbx.Finish({});
    ::_exit(0);
  };

  // Control frames that may arrive while a cell runs.
  auto on_control = [&] {
    for (;;) {
      auto next = ch.TryRead();
      if (!next.ok()) {  // the server closed: end the session now
        server_gone = true;
        sbx.Cancel();
        return;
      }
      if (!next->has_value()) return;
      const std::string type = (**next).value("type", "");
      if (type == "interrupt") {
        sbx.Interrupt();
      } else if (type == "cancel") {
        sbx.Cancel();
      }
      // Anything else during a cell is a server bug; ignored.
    }
  };

  for (;;) {
    if (!sbx.CheckAlive()) end_session(sbx.death_reason(), true);
    pollfd fds[2] = {{ch.fd(), POLLIN, 0}, {sbx.IdleFds()[0], POLLIN, 0}};
    const int rc = ::poll(fds, 2, 1000);
    if (rc < 0 && errno != EINTR) end_session("supervisor poll failed", true);
    if (rc <= 0 || fds[0].revents == 0) continue;
    for (;;) {
      auto next = ch.TryRead();
      if (!next.ok()) end_session("the server closed the session", false);
      if (!next->has_value()) break;
      const nlohmann::json& req = **next;
      const std::string type = req.value("type", "");
      if (type == "execute") {
        supervisor::CellSpec cell;
        cell.code = req.value("code", "");
        cell.timeout_s = req.value("timeout_s", limits.wall_timeout_s);
        cell.interrupt_grace_s = start->interrupt_grace_s;
        if (auto extra = req.find("extra"); extra != req.end() && extra->is_object()) {
          cell.extra = *extra;
        }
        const bool stream = req.value("stream", false);
        supervisor::Waiters waiters;
        waiters.control_fd = ch.fd();
        waiters.on_control = on_control;
        const supervisor::EventSink sink =
            stream ? supervisor::EventSink([&ch](std::string_view event,
                                                 const nlohmann::json& data) {
              (void)ch.Write({{"type", "event"}, {"event", std::string(event)}, {"data", data}});
            })
                   : supervisor::EventSink();
        supervisor::ExecutionResult r = sbx.RunCell(cell, waiters, sink);
        if (server_gone) end_session("the server closed the session", false);
        (void)ch.Write(ResultFrame(r));
        if (!sbx.alive()) end_session(sbx.death_reason(), true);
      } else if (type == "interrupt") {
        // Between cells: nothing to interrupt.
      } else if (type == "stats") {
        auto mem = sbx.MemoryInUse();
        (void)ch.Write({{"type", "stats"},
                        {"memory_bytes", mem ? nlohmann::json(*mem) : nlohmann::json(nullptr)}});
      } else if (type == "file_put" || type == "file_get" || type == "file_list" ||
                 type == "file_delete" || type == "file_mkdir" || type == "file_move") {
        const int ws = sbx.workspace_fd();
        Status done = OkStatus();
        nlohmann::json reply = {{"type", "ok"}};
        if (ws < 0) {
          done = Internal("the session has no workspace");
        } else if (type == "file_list") {
          auto entries = supervisor::ListBeneath(ws, 100000, 32);
          if (!entries.ok()) {
            done = std::move(entries).error();
          } else {
            nlohmann::json files = nlohmann::json::array();
            for (const auto& e : *entries) {
              files.push_back({{"path", e.path}, {"size", e.size}, {"directory", e.directory}});
            }
            reply["files"] = std::move(files);
          }
        } else {
          auto path = supervisor::NormalizeWorkspacePath(req.value("path", ""));
          if (!path.ok()) {
            done = std::move(path).error();
          } else if (type == "file_put") {
            auto bytes = Base64Decode(req.value("content_base64", ""));
            if (!bytes.ok()) {
              done = InvalidArgument("content: not base64");
            } else if (root) {
              auto ids = supervisor::ScopedFsIds::Enter(sbx.outer_uid(), sbx.outer_gid());
              done = ids.ok() ? supervisor::WriteFileBeneath(ws, *path, *bytes, caps,
                                                             sbx.outer_uid(), sbx.outer_gid())
                              : Status(std::move(ids).error());
            } else {
              done = supervisor::WriteFileBeneath(ws, *path, *bytes, caps, sbx.outer_uid(),
                                                  sbx.outer_gid());
            }
            reply["size"] = bytes.ok() ? bytes->size() : 0;
          } else if (type == "file_get") {
            auto bytes = supervisor::ReadFileBeneath(ws, *path, caps.max_file_bytes);
            if (!bytes.ok()) {
              done = std::move(bytes).error();
            } else {
              reply["content_base64"] = Base64Encode(*bytes);
            }
          } else if (type == "file_mkdir" || type == "file_move") {
            // Creations are made as the sandbox's uid (as file_put's).
            std::optional<supervisor::ScopedFsIds> ids;
            if (root) {
              auto entered = supervisor::ScopedFsIds::Enter(sbx.outer_uid(), sbx.outer_gid());
              if (entered.ok())
                ids.emplace(std::move(*entered));
              else
                done = std::move(entered).error();
            }
            if (done.ok() && type == "file_mkdir") {
              done = supervisor::MakeDirBeneath(ws, *path, sbx.outer_uid(), sbx.outer_gid());
            } else if (done.ok()) {
              done = supervisor::MoveBeneath(ws, *path, req.value("to", ""), sbx.outer_uid(),
                                             sbx.outer_gid());
            }
          } else if (req.value("recursive", false)) {
            done = supervisor::DeleteTreeBeneath(ws, *path);
          } else {
            done = supervisor::DeleteBeneath(ws, *path);
          }
        }
        (void)ch.Write(done.ok() ? reply : ErrorFrame(done.error()));
      } else {
        (void)ch.Write(ErrorFrame(InvalidArgument("unknown session request '" + type + "'")));
      }
    }
  }
}

// The supervisor process of one job: single-threaded, forked by the spawner.
[[noreturn]] void RunJob(int fd, const config::Config& config, const supervisor::HostContext& host,
                         std::optional<zygote::Handoff> pooled) {
  FramedChannel ch{UniqueFd(fd), kMaxRequestBytes};
  auto frame = ch.Read();
  if (!frame.ok()) ::_exit(1);
  if (frame->value("type", "") == "session_start")
    RunSession(ch, *frame, config, host, std::move(pooled));
  RunOneShot(ch, *frame, config, host, std::move(pooled));
}

// A supervisor reads what a sandbox made (frames, files, directory listings)
// and is outside the sandbox's memory cgroup: whatever a bug in that reading
// lets a sandbox inflate, this soft RLIMIT_DATA bounds per supervisor (the
// returned files, 64 MiB, and their encodings fit well below). The sandbox
// it clones lifts it again (isolation::BuildRlimitPlan). Not under
// AddressSanitizer, whose shadow memory counts as data.
constexpr rlim_t kSupervisorDataBytes = 1ULL << 30;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

void LimitOwnMemory() {
  if (kAddressSanitizer) return;
  rlimit rl{};
  if (::getrlimit(RLIMIT_DATA, &rl) != 0) return;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > kSupervisorDataBytes) {
    rl.rlim_cur = std::min<rlim_t>(kSupervisorDataBytes, rl.rlim_max);
    (void)::setrlimit(RLIMIT_DATA, &rl);
  }
}

// The answer to an 'S' job (Spawner::PoolStatus, docs/protocol.md).
nlohmann::json PoolStatusJson(const std::optional<std::string>& no_pool, bool pool_running,
                              const std::map<std::string, zygote::PoolStatus>& reported,
                              const std::map<std::string, std::pair<uint64_t, uint64_t>>& takes,
                              const std::map<pid_t, std::string>& in_use,
                              const zygote::HandoffStock& stock) {
  nlohmann::json j = {{"type", "pool"},
                      {"enabled", !no_pool.has_value()},
                      {"running", pool_running},
                      {"reason", no_pool ? nlohmann::json(*no_pool) : nlohmann::json(nullptr)}};
  std::set<std::string> names;
  for (const auto& [name, s] : reported) names.insert(name);
  for (const auto& [name, t] : takes) names.insert(name);
  for (const auto& [pid, name] : in_use) names.insert(name);
  nlohmann::json profiles = nlohmann::json::object();
  for (const std::string& name : names) {
    const auto r = reported.find(name);
    const zygote::PoolStatus s = r != reported.end() ? r->second : zygote::PoolStatus{};
    const auto t = takes.find(name);
    uint64_t using_now = 0;
    for (const auto& [pid, profile] : in_use) using_now += profile == name ? 1 : 0;
    profiles[name] = {{"ready", stock.size(name)},
                      {"refilling", s.refilling},
                      {"in_use", using_now},
                      {"target", s.target},
                      {"zygote_ready", s.zygote_ready},
                      {"hits", t != takes.end() ? t->second.first : 0},
                      {"cold_fallbacks", t != takes.end() ? t->second.second : 0},
                      {"refills", s.refills},
                      {"refill_ms_total", s.refill_ms_total},
                      {"last_refill_ms", s.last_refill_ms},
                      {"failures", s.failures},
                      {"zygote_starts", s.zygote_starts}};
  }
  j["profiles"] = std::move(profiles);
  return j;
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
  // SIGTERM and ^C (the sandbox resets every disposition: RunChild step C0).
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  // Nothing we fork may start with a blocked signal mask (the program's own
  // KeyboardInterrupt and SIGTERM handlers must work).
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The warm pool (docs/adr/0011-zygote.md): a process of its own does the
  // slow work and hands ready sandboxes over; they wait here, per profile.
  pid_t pool_pid = -1;
  UniqueFd pool_fd;
  zygote::HandoffStock stock;
  // The pool in plain sight ('S' jobs: Spawner::PoolStatus): what the pool
  // process last reported per profile, the executions that found a pooled
  // sandbox or none, and the supervisors that hold one now.
  std::map<std::string, zygote::PoolStatus> reported;
  std::map<std::string, std::pair<uint64_t, uint64_t>> takes;  // profile -> (hits, misses)
  std::map<pid_t, std::string> in_use;                         // supervisor -> profile
  // supervisor -> the cgroup of the pooled sandbox it adopted: named by the
  // pool process, not after the supervisor, so a dead supervisor's prefix
  // sweep below would miss it.
  std::map<pid_t, std::string> adopted_cgroups;
  const std::optional<std::string> no_pool = zygote::PoolUnavailableReason(config, host);
  auto start_pool = [&] {
    auto started = zygote::StartPoolProcess(config, host);
    if (!started.ok()) {
      KILN_LOG_WARN("warm pool: {}; executions start cold", started.error().ToString());
      return;
    }
    pool_pid = started->first;
    pool_fd = std::move(started->second);
  };
  if (no_pool) {
    KILN_LOG_INFO("warm pool off: {}", *no_pool);
  } else {
    start_pool();
  }
  for (;;) {
    pid_t exited;
    int status = 0;
    while ((exited = ::waitpid(-1, &status, WNOHANG)) > 0) {
      in_use.erase(exited);
      std::string adopted_cgroup;
      if (auto a = adopted_cgroups.find(exited); a != adopted_cgroups.end()) {
        adopted_cgroup = std::move(a->second);
        adopted_cgroups.erase(a);
      }
      if (exited != pool_pid &&
          (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)) &&
          host.cgroups != nullptr) {
        // A supervisor that died (killed, or crashed) left its sandbox's
        // cgroups behind: a cold sandbox's are named after it
        // ("sbx-<pid>-..."), an adopted pooled sandbox's as the pool named
        // it. Its sandbox died with it (a cold pid 1 by PDEATHSIG, a pooled
        // one when the setup channel hung up), and whatever is left is
        // killed.
        const std::string prefix = "sbx-" + std::to_string(exited) + "-";
        auto removed =
            host.cgroups->RemoveStale([&prefix, &adopted_cgroup](const std::string& name) {
              return name.rfind(prefix, 0) == 0 ||
                     (!adopted_cgroup.empty() && name == adopted_cgroup);
            });
        if (removed.ok() && *removed > 0) {
          KILN_LOG_WARN("a supervisor (pid {}) died; removed {} cgroup(s) it left", exited,
                        *removed);
        }
      }
      if (exited == pool_pid) {
        // Its sandboxes died with it (its zygotes' pid 1s have it as parent).
        KILN_LOG_WARN("warm pool: the pool process exited; restarting it");
        stock.Clear();
        reported.clear();
        pool_fd.Reset();
        pool_pid = -1;
        start_pool();
      }
    }
    pollfd pfds[2] = {{control, POLLIN, 0}, {pool_fd.get(), POLLIN, 0}};
    const int rc = ::poll(pfds, pool_fd ? 2 : 1, 200);
    if (rc < 0 && errno != EINTR) ::_exit(1);
    if (rc <= 0) continue;
    if (pool_fd && pfds[1].revents != 0) {
      for (;;) {
        auto from = zygote::ReceiveFromPool(pool_fd.get());
        if (!from.ok()) {
          if (from.error().code == Code::kUnavailable) {
            pool_fd.Reset();  // restarted when reaped
            break;
          }
          KILN_LOG_WARN("warm pool: {}", from.error().ToString());
          continue;
        }
        if (!from->has_value()) break;
        if ((*from)->handoff) stock.Add(std::move(*(*from)->handoff));
        if ((*from)->status) reported[(*from)->status->profile] = *(*from)->status;
      }
    }
    if (pfds[0].revents == 0) continue;
    // 'J': a job; 'P' + a profile name: a job that may take a pooled sandbox;
    // 'S': the pool's status, answered on the job's socket here.
    char tagbuf[72] = {};
    int job = -1;
    const sys::Received got = sys::ReceiveWithFds(control, tagbuf, sizeof tagbuf, &job, 1, 0);
    const ssize_t n = got.bytes;
    const char tag = n > 0 ? tagbuf[0] : 0;
    if (n == 0) ::_exit(0);  // the server is gone
    if (n < 0) ::_exit(1);
    if ((tag != 'J' && tag != 'P' && tag != 'S') || job < 0) {
      if (job >= 0) ::close(job);
      continue;
    }
    if (tag == 'S') {
      FramedChannel answer{UniqueFd(job), kMaxRequestBytes};
      (void)answer.Write(PoolStatusJson(no_pool, pool_fd.valid(), reported, takes, in_use, stock));
      continue;
    }
    std::optional<zygote::Handoff> pooled;
    std::string pooled_profile;
    if (tag == 'P' && n > 1) {
      const std::string profile(tagbuf + 1, strnlen(tagbuf + 1, static_cast<size_t>(n) - 1));
      pooled = stock.Take(profile);
      auto& [hits, misses] = takes[profile];
      ++(pooled ? hits : misses);
      if (pooled) pooled_profile = profile;
      if (pool_fd) {
        (void)zygote::SendArrival(pool_fd.get(), profile, pooled.has_value(),
                                  stock.consumed(profile));
      }
    }
    const pid_t self = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
      if (::getppid() != self) ::_exit(0);
      ::prctl(PR_SET_NAME, "kiln-supervise", 0, 0, 0);
      LimitOwnMemory();
      ::close(control);
      pool_fd.Reset();
      stock.Clear();  // only our own sandbox's fds stay open
      RunJob(job, config, host, std::move(pooled));
    }
    if (child > 0 && !pooled_profile.empty()) {
      in_use[child] = pooled_profile;
      adopted_cgroups[child] = pooled->cgroup_name;
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
  nlohmann::json j = {{"type", "execute"},    {"id", r.id},
                      {"profile", r.profile}, {"limits", LimitsToJson(r.limits)},
                      {"code", r.code},       {"filename", r.filename},
                      {"files", files}};
  j["return_files"] = r.return_files ? nlohmann::json(*r.return_files) : nlohmann::json(nullptr);
  j["stream"] = r.stream;
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
  KILN_ASSIGN_OR_RETURN(r.limits, LimitsFromJson(j.value("limits", nlohmann::json::object())));
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
  if (j.contains("stream")) {
    // json::value() throws type_error on a member of another type (found by
    // fuzz/job_request_fuzzer.cc: std::terminate in the supervisor).
    if (!j["stream"].is_boolean()) return InvalidArgument("stream must be a boolean");
    r.stream = j["stream"].get<bool>();
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

[[noreturn]] void RunSpawnerProcess(pid_t server) {
  // The configuration the server parsed, from fd 4.
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(4, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(4);
  auto config = config::ParseConfig(text, "the server's configuration");
  if (!config.ok()) {
    KILN_LOG_ERROR("spawner: {}", config.error().ToString());
    ::_exit(1);
  }
  auto host = supervisor::LoadHostContext();
  if (!host.ok()) {
    KILN_LOG_ERROR("spawner: {}", host.error().ToString());
    ::_exit(1);
  }
  SpawnerMain(3, server, *config, *host);
}

Result<std::unique_ptr<Spawner>> Spawner::Start(const config::Config& config,
                                                const supervisor::HostContext& host) {
  auto s = std::unique_ptr<Spawner>(new Spawner());
  s->config_ = config;
  s->pool_ = !zygote::PoolUnavailableReason(config, host).has_value();
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
    ExecResponse response;
    response.result = std::move((*frame)["result"]);
    for (const auto& f : frame->value("files", nlohmann::json::array())) {
      auto bytes = Base64Decode(f.value("content_base64", ""));
      if (!bytes.ok()) return Internal("malformed returned file");
      response.files.emplace_back(f.value("path", ""), std::move(*bytes));
    }
    return response;
  }
}

}  // namespace

std::string Spawner::PoolProfileFor(
    const std::string& profile_name, const config::LimitSpec& limits,
    const std::vector<std::pair<std::string, std::string>>& env) const {
  if (!pool_) return "";
  auto profile = config_.Find(profile_name);
  if (!profile.ok() || !zygote::PoolEligible(config_, **profile, limits, env)) return "";
  return profile_name;
}

Result<ExecResponse> Spawner::Run(const ExecRequest& request, const CancelToken* cancel,
                                  int hangup_fd, const EventFn& on_event) {
  uint64_t generation = 0;
  KILN_ASSIGN_OR_RETURN(
      UniqueFd job,
      NewJob(PoolProfileFor(request.profile, request.limits, request.env), &generation));
  FramedChannel ch(std::move(job), kMaxResponseBytes);
  ExecRequest req = request;
  req.stream = static_cast<bool>(on_event);
  if (Status written = ch.Write(EncodeRequest(req)); !written.ok()) {
    return Died(generation, "execution", written.error());
  }
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

Result<std::unique_ptr<SessionChannel>> Spawner::StartSession(const SessionRequest& request,
                                                              const CancelToken* cancel) {
  uint64_t generation = 0;
  KILN_ASSIGN_OR_RETURN(
      UniqueFd job,
      NewJob(PoolProfileFor(request.profile, request.limits, request.env), &generation));
  auto session = std::unique_ptr<SessionChannel>(new SessionChannel());
  session->channel_ = std::make_unique<FramedChannel>(std::move(job), kMaxResponseBytes);
  FramedChannel& ch = *session->channel_;
  if (Status written = ch.Write(EncodeSessionRequest(request)); !written.ok()) {
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
  if (result->result.value("session_state", "") == "lost") {
    gone_ = result->result.value("reason", "the sandbox died");
  }
  return result;
}

void SessionChannel::Interrupt() {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (!gone_) (void)channel_->Write({{"type", "interrupt"}});
}

Result<nlohmann::json> SessionChannel::Call(const nlohmann::json& request) {
  if (gone_) return MakeError(Code::kNotFound, "the session is gone: " + *gone_);
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    KILN_TRY(channel_->Write(request));
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
  return std::move(*frame);
}

Status SessionChannel::PutFile(const std::string& path, const std::string& bytes) {
  KILN_TRY(Call({{"type", "file_put"}, {"path", path}, {"content_base64", Base64Encode(bytes)}}));
  return OkStatus();
}

Result<std::string> SessionChannel::GetFile(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(nlohmann::json reply, Call({{"type", "file_get"}, {"path", path}}));
  return Base64Decode(reply.value("content_base64", ""));
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

nlohmann::json EncodeSessionRequest(const SessionRequest& r) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : r.env) env[k] = v;
  return {{"type", "session_start"},
          {"id", r.id},
          {"profile", r.profile},
          {"limits", LimitsToJson(r.limits)},
          {"env", env},
          {"max_lifetime_s", r.max_lifetime_s},
          {"interrupt_grace_s", r.interrupt_grace_s},
          {"max_file_bytes", r.max_file_bytes}};
}

Result<SessionRequest> DecodeSessionRequest(const nlohmann::json& j) {
  SessionRequest r;
  KILN_ASSIGN_OR_RETURN(r.id, ipc::GetString(j, "id"));
  KILN_ASSIGN_OR_RETURN(r.profile, ipc::GetString(j, "profile"));
  KILN_ASSIGN_OR_RETURN(r.limits, LimitsFromJson(j.value("limits", nlohmann::json::object())));
  if (j.contains("env") && j["env"].is_object()) {
    for (const auto& [k, v] : j["env"].items()) {
      if (!v.is_string()) return InvalidArgument("env values must be strings");
      r.env.emplace_back(k, v.get<std::string>());
    }
  }
  auto num = [&j](const char* k, double d) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : d;
  };
  r.max_lifetime_s = num("max_lifetime_s", r.max_lifetime_s);
  r.interrupt_grace_s = num("interrupt_grace_s", r.interrupt_grace_s);
  if (j.contains("max_file_bytes") && j["max_file_bytes"].is_number_unsigned()) {
    r.max_file_bytes = j["max_file_bytes"].get<uint64_t>();
  }
  return r;
}

}  // namespace kiln::spawner
