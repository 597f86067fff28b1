#include "spawner/supervise_main.h"

#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "policy/policy.h"
#include "spawner/job_channel.h"
#include "spawner/spawner.h"
#include "supervisor/sandbox.h"
#include "supervisor/workspace_files.h"

namespace kiln::spawner {
namespace {

// The result, typed on the wire (EncodeResult): its returned files' bytes in
// one sealed memfd beside it. A memfd that cannot be made loses the files,
// never the result: collect_error says so.
void WriteResult(FramedChannel& ch, const supervisor::ExecutionResult& r) {
  SharedFds fds;
  auto frame = EncodeResult(r, &fds);
  if (!frame.ok()) {
    supervisor::ExecutionResult without = r;
    without.returned_files.clear();
    without.collect_error = "the returned files could not be sent: " + frame.error().message;
    fds.clear();
    frame = EncodeResult(without, &fds);
  }
  if (frame.ok()) (void)WriteFrameWithFds(ch.fd(), *frame, fds);
}

// One-shot: one request, one sandbox, one result.
[[noreturn]] void RunOneShot(FramedChannel& ch, const nlohmann::json& frame,
                             const supervisor::HostContext& host,
                             std::optional<zygote::Handoff> pooled) {
  auto reply_error = [&ch](const Error& e) {
    (void)ch.Write(ErrorFrame(e));
    ::_exit(0);
  };
  // The plan as the server decided it: its policy is built, its input files
  // are the memfds that came beside it, the pool decision is made.
  auto inputs = ReadFdsBeside(ch, frame);
  if (!inputs.ok()) reply_error(inputs.error());
  auto request = DecodePlan(frame, std::move(*inputs));
  if (!request.ok()) reply_error(request.error());
  const policy::SandboxPolicy& policy = *request->policy;
  supervisor::Program program{request->filename, request->code, request->env};
  supervisor::RunOptions options;
  options.return_files = request->return_files;
  options.cancel_fd = ch.fd();  // the server closing its end cancels the run
  if (request->stream) {
    options.on_event = [&ch](std::string_view event, const nlohmann::json& data) {
      (void)ch.Write({{"type", "event"}, {"event", std::string(event)}, {"data", data}});
    };
  }
  // A sandbox from the warm pool when the server's plan says one fits (the
  // spawner hands one only then); else, or if it cannot be adopted, a cold
  // one. An unused pooled sandbox dies with our copies of its fds and its
  // cgroup with the adopted object.
  std::optional<supervisor::AdoptedSandbox> adopted;
  if (pooled) {
    if (request->pooled && pooled->profile == request->profile) {
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
    WriteResult(ch, r);
    answered = true;
  };
  auto result = supervisor::RunSandboxed(host, policy, program, options);
  if (!result.ok()) reply_error(result.error());
  if (!answered) WriteResult(ch, *result);
  ::_exit(0);
}

// A session: one sandbox kept between requests (docs/protocol.md section 5),
// a pooled one when the server found the session eligible (checked again
// here) and the pool had one ready, else a cold one.
[[noreturn]] void RunSession(FramedChannel& ch, const nlohmann::json& frame,
                             const supervisor::HostContext& host,
                             std::optional<zygote::Handoff> pooled) {
  auto reply_error = [&ch](const Error& e) {
    (void)ch.Write(ErrorFrame(e));
    ::_exit(0);
  };
  auto inputs = ReadFdsBeside(ch, frame);
  if (!inputs.ok()) reply_error(inputs.error());
  auto start = DecodeSessionPlan(frame, std::move(*inputs));
  if (!start.ok()) reply_error(start.error());
  const policy::SandboxPolicy* policy = &*start->policy;
  // RLIMIT_CPU backstop: all the cpu the session could use in its lifetime
  // (cells are limited by the cgroup's accounting).
  const double rlimit_cpu_s =
      policy::SessionCpuBudgetSeconds(start->max_lifetime_s, policy->limits());
  std::unique_ptr<supervisor::Sandbox> sandbox;
  if (pooled) {
    if (start->pooled && pooled->profile == start->profile) {
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
        WriteResult(ch, r);
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
        SharedFds put_fds, reply_fds;
        // The fds beside the request (a file_put's memfd) are read before
        // anything can fail, so that none is left for the next request.
        if (req.contains("fds")) {
          auto beside = ReadFdsBeside(ch, req);
          if (!beside.ok()) end_session("a malformed request: " + beside.error().message, true);
          put_fds = std::move(*beside);
        }
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
            // The bytes: a sealed memfd, copied file to file into the workspace.
            auto file = FileBytesOf(req, put_fds, caps.max_file_bytes);
            if (!file.ok()) {
              done = std::move(file).error();
            } else if (root) {
              auto ids = supervisor::ScopedFsIds::Enter(sbx.outer_uid(), sbx.outer_gid());
              done = ids.ok() ? supervisor::WriteFileBeneath(ws, *path, file->first, file->second,
                                                             caps, sbx.outer_uid(), sbx.outer_gid())
                              : Status(std::move(ids).error());
            } else {
              done = supervisor::WriteFileBeneath(ws, *path, file->first, file->second, caps,
                                                  sbx.outer_uid(), sbx.outer_gid());
            }
            reply["size"] = file.ok() ? file->second : 0;
          } else if (type == "file_get") {
            auto bytes = supervisor::ReadFileBeneath(ws, *path, caps.max_file_bytes);
            if (!bytes.ok()) {
              done = std::move(bytes).error();
            } else {
              auto encoded = EncodeFileBytes(reply, *bytes, &reply_fds);
              if (encoded.ok()) {
                reply = std::move(*encoded);
              } else {
                done = std::move(encoded).error();
              }
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
        if (done.ok()) {
          (void)WriteFrameWithFds(ch.fd(), reply, reply_fds);
        } else {
          (void)ch.Write(ErrorFrame(done.error()));
        }
      } else {
        (void)ch.Write(ErrorFrame(InvalidArgument("unknown session request '" + type + "'")));
      }
    }
  }
}

}  // namespace

// The supervisor process of one job: single-threaded, forked by the spawner.
[[noreturn]] void RunJob(int fd, const supervisor::HostContext& host,
                         std::optional<zygote::Handoff> pooled) {
  FramedChannel ch{UniqueFd(fd), kMaxRequestBytes};
  auto frame = ch.Read();
  if (!frame.ok()) ::_exit(1);
  if (frame->value("type", "") == "session_start") RunSession(ch, *frame, host, std::move(pooled));
  RunOneShot(ch, *frame, host, std::move(pooled));
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

}  // namespace kiln::spawner
