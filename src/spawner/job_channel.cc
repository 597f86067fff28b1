#include "spawner/job_channel.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <utility>

#include "policy/policy_codec.h"
#include "spawner/spawner.h"
#include "sys/fd_passing.h"
#include "sys/syscalls.h"
#include "zygote/handoff.h"

namespace kiln::spawner {
namespace {

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

}  // namespace

Status WriteFrame(int fd, const nlohmann::json& message) {
  const std::string wire = ipc::EncodeMessage(message);
  if (sys::WriteAll(fd, wire.data(), wire.size()) != 0) return ErrnoError("write job frame");
  return OkStatus();
}

Status WriteFrameWithFds(int fd, const nlohmann::json& message, const SharedFds& fds) {
  KILN_TRY(WriteFrame(fd, message));
  // The fds follow in small frames of their own, at most kFdsPerFrame each
  // (sys::SendWithFds); SCM_RIGHTS on a stream socket stays with the bytes
  // it was sent with, so the reader finds them in order.
  const std::string wire = ipc::EncodeMessage({{"type", "fds"}});
  for (size_t at = 0; at < fds.size(); at += kFdsPerFrame) {
    int batch[kFdsPerFrame];
    size_t n = 0;
    for (; n < kFdsPerFrame && at + n < fds.size(); ++n) batch[n] = fds[at + n]->get();
    const ssize_t sent = sys::SendWithFds(fd, wire.data(), wire.size(), batch, n, 0);
    if (sent < 0) return ErrnoError("send input files");
    // The fds went with the first byte; the rest of a short write follows.
    if (static_cast<size_t>(sent) < wire.size() &&
        sys::WriteAll(fd, wire.data() + sent, wire.size() - static_cast<size_t>(sent)) != 0) {
      return ErrnoError("write job frame");
    }
  }
  return OkStatus();
}

Result<SharedFds> ReadFdsBeside(FramedChannel& ch, const nlohmann::json& plan) {
  KILN_ASSIGN_OR_RETURN(const size_t count, FdsOf(plan));
  // Exactly the "fds" frames that carry them (kFdsPerFrame each), even when
  // their fds came with the bytes read before (recvmsg may take a frame and
  // the next one's fds at once): a frame left unread would be taken for the
  // next request or reply.
  for (size_t frames = (count + kFdsPerFrame - 1) / kFdsPerFrame; frames > 0; --frames) {
    KILN_ASSIGN_OR_RETURN(nlohmann::json frame, ch.Read());
    if (frame.value("type", "") != "fds")
      return InvalidArgument("the fds beside a frame did not come");
  }
  std::vector<UniqueFd> fds = ch.TakeFds();
  if (fds.size() != count) {
    return InvalidArgument(std::to_string(fds.size()) + " fds came where the frame names " +
                           std::to_string(count));
  }
  SharedFds out;
  for (auto& fd : fds) out.push_back(std::make_shared<const UniqueFd>(std::move(fd)));
  return out;
}

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

namespace {

nlohmann::json EnvJson(const std::vector<std::pair<std::string, std::string>>& env) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : env) j[k] = v;
  return j;
}

Result<std::vector<std::pair<std::string, std::string>>> EnvOf(const nlohmann::json& j) {
  std::vector<std::pair<std::string, std::string>> env;
  auto it = j.find("env");
  if (it == j.end()) return env;
  if (!it->is_object()) return InvalidArgument("env must be an object");
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) return InvalidArgument("env values must be strings");
    env.emplace_back(k, v.get<std::string>());
  }
  return env;
}

Result<bool> BoolOf(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  // json::value() throws type_error on a member of another type (found by
  // fuzz/job_request_fuzzer.cc: std::terminate in the supervisor).
  if (!it->is_boolean()) return InvalidArgument(std::string(key) + " must be a boolean");
  return it->get<bool>();
}

Result<double> NumberOf(const nlohmann::json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number()) return InvalidArgument(std::string(key) + " must be a number");
  return it->get<double>();
}

Result<policy::SandboxPolicy> PolicyOf(const nlohmann::json& j, SharedFds fds) {
  auto it = j.find("policy");
  if (it == j.end()) return InvalidArgument("the plan has no policy");
  return policy::DecodePolicy(*it, std::move(fds));
}

}  // namespace

Result<size_t> FdsOf(const nlohmann::json& j) {
  auto it = j.find("fds");
  if (it == j.end()) return size_t{0};
  if (!it->is_number_unsigned() || it->get<uint64_t>() > kMaxInputFiles)
    return InvalidArgument("fds must be a count of at most " + std::to_string(kMaxInputFiles));
  return static_cast<size_t>(it->get<uint64_t>());
}

Result<nlohmann::json> EncodePlan(const ExecPlan& p, SharedFds* fds) {
  if (!p.policy) return Internal("a plan without a policy");
  KILN_ASSIGN_OR_RETURN(nlohmann::json policy, policy::EncodePolicy(*p.policy, fds));
  nlohmann::json j = {{"type", "execute"},      {"id", p.id},
                      {"profile", p.profile},   {"policy", std::move(policy)},
                      {"pooled", p.pooled},     {"code", p.code},
                      {"filename", p.filename}, {"env", EnvJson(p.env)},
                      {"stream", p.stream},     {"fds", fds->size()}};
  j["return_files"] = p.return_files ? nlohmann::json(*p.return_files) : nlohmann::json(nullptr);
  return j;
}

Result<ExecPlan> DecodePlan(const nlohmann::json& j, SharedFds fds) {
  // The other end is the server (trusted), but a malformed frame must still be
  // an error, not an exception.
  ExecPlan p;
  KILN_ASSIGN_OR_RETURN(p.id, ipc::GetString(j, "id"));
  KILN_ASSIGN_OR_RETURN(p.profile, ipc::GetString(j, "profile"));
  KILN_ASSIGN_OR_RETURN(p.code, ipc::GetString(j, "code"));
  KILN_ASSIGN_OR_RETURN(p.filename, ipc::GetString(j, "filename"));
  KILN_ASSIGN_OR_RETURN(p.pooled, BoolOf(j, "pooled", false));
  KILN_ASSIGN_OR_RETURN(p.stream, BoolOf(j, "stream", false));
  KILN_ASSIGN_OR_RETURN(p.env, EnvOf(j));
  if (auto rf = j.find("return_files"); rf != j.end() && !rf->is_null()) {
    if (!rf->is_array()) return InvalidArgument("return_files must be an array or null");
    std::vector<std::string> globs;
    for (const auto& g : *rf) {
      if (!g.is_string()) return InvalidArgument("return_files: entries must be strings");
      globs.push_back(g.get<std::string>());
    }
    p.return_files = std::move(globs);
  }
  KILN_ASSIGN_OR_RETURN(policy::SandboxPolicy policy, PolicyOf(j, std::move(fds)));
  p.policy.emplace(std::move(policy));
  return p;
}

Result<nlohmann::json> EncodeSessionPlan(const SessionPlan& p, SharedFds* fds) {
  if (!p.policy) return Internal("a plan without a policy");
  KILN_ASSIGN_OR_RETURN(nlohmann::json policy, policy::EncodePolicy(*p.policy, fds));
  return nlohmann::json{{"type", "session_start"},
                        {"id", p.id},
                        {"profile", p.profile},
                        {"policy", std::move(policy)},
                        {"pooled", p.pooled},
                        {"env", EnvJson(p.env)},
                        {"max_lifetime_s", p.max_lifetime_s},
                        {"interrupt_grace_s", p.interrupt_grace_s},
                        {"max_file_bytes", p.max_file_bytes},
                        {"fds", fds->size()}};
}

Result<SessionPlan> DecodeSessionPlan(const nlohmann::json& j, SharedFds fds) {
  SessionPlan p;
  KILN_ASSIGN_OR_RETURN(p.id, ipc::GetString(j, "id"));
  KILN_ASSIGN_OR_RETURN(p.profile, ipc::GetString(j, "profile"));
  KILN_ASSIGN_OR_RETURN(p.pooled, BoolOf(j, "pooled", false));
  KILN_ASSIGN_OR_RETURN(p.env, EnvOf(j));
  KILN_ASSIGN_OR_RETURN(p.max_lifetime_s, NumberOf(j, "max_lifetime_s", p.max_lifetime_s));
  KILN_ASSIGN_OR_RETURN(p.interrupt_grace_s, NumberOf(j, "interrupt_grace_s", p.interrupt_grace_s));
  if (auto it = j.find("max_file_bytes"); it != j.end()) {
    if (!it->is_number_unsigned()) return InvalidArgument("max_file_bytes must be a count");
    p.max_file_bytes = it->get<uint64_t>();
  }
  KILN_ASSIGN_OR_RETURN(policy::SandboxPolicy policy, PolicyOf(j, std::move(fds)));
  p.policy.emplace(std::move(policy));
  return p;
}

PoolKeys PoolKeysOf(const config::Config& config) {
  PoolKeys keys;
  for (const auto& [name, profile] : config.profiles) {
    if (!zygote::ProfilePooled(config, profile)) continue;
    auto builder = config::PolicyFor(profile, {});
    if (!builder.ok()) continue;
    auto built = builder->Build();
    if (built.ok()) keys.emplace(name, built->limits());
  }
  return keys;
}

namespace {

// Whether a plan's limits and environment fit its profile's pool key.
bool Pooled(const PoolKeys& pool, const std::string& profile, const policy::Limits& limits,
            const std::vector<std::pair<std::string, std::string>>& env) {
  if (!env.empty()) return false;  // the zygote's environment is fixed
  auto it = pool.find(profile);
  return it != pool.end() && zygote::PoolFits(limits, it->second);
}

}  // namespace

Result<ExecPlan> PlanExecution(const config::Config& config, const PoolKeys& pool,
                               ExecRequest& request) {
  KILN_ASSIGN_OR_RETURN(const config::Profile* profile, config.Find(request.profile));
  KILN_ASSIGN_OR_RETURN(policy::PolicyBuilder builder, config::PolicyFor(*profile, request.limits));
  if (request.files.size() > kMaxInputFiles) {
    return InvalidField("files", "files: at most " + std::to_string(kMaxInputFiles) +
                                     " files per execution (" +
                                     std::to_string(request.files.size()) + " given)");
  }
  // Each file's bytes go into a sealed memfd here, once; the memfd travels
  // to the supervisor beside the plan and the sandbox copies from it.
  for (auto& [path, bytes] : request.files) {
    KILN_ASSIGN_OR_RETURN(UniqueFd fd, policy::SealedMemfd("kiln-input", bytes));
    builder.AddFileFd(path, std::make_shared<const UniqueFd>(std::move(fd)), bytes.size());
    std::string().swap(bytes);
  }
  request.files.clear();
  if (::geteuid() != 0) builder.CgroupRequirement(policy::Requirement::kBestEffort);
  KILN_ASSIGN_OR_RETURN(policy::SandboxPolicy built, builder.Build());
  ExecPlan plan;
  plan.id = request.id;
  plan.profile = request.profile;
  plan.pooled = Pooled(pool, request.profile, built.limits(), request.env);
  plan.policy.emplace(std::move(built));
  plan.code = request.code;
  plan.filename = request.filename;
  plan.return_files = request.return_files;
  plan.env = request.env;
  plan.stream = request.stream;
  return plan;
}

Result<SessionPlan> PlanSession(const config::Config& config, const PoolKeys& pool,
                                const SessionRequest& request) {
  KILN_ASSIGN_OR_RETURN(const config::Profile* profile, config.Find(request.profile));
  KILN_ASSIGN_OR_RETURN(policy::PolicyBuilder builder, config::PolicyFor(*profile, request.limits));
  if (::geteuid() != 0) builder.CgroupRequirement(policy::Requirement::kBestEffort);
  KILN_ASSIGN_OR_RETURN(policy::SandboxPolicy built, builder.Build());
  SessionPlan plan;
  plan.id = request.id;
  plan.profile = request.profile;
  plan.pooled = Pooled(pool, request.profile, built.limits(), request.env);
  plan.policy.emplace(std::move(built));
  plan.env = request.env;
  plan.max_lifetime_s = request.max_lifetime_s;
  plan.interrupt_grace_s = request.interrupt_grace_s;
  plan.max_file_bytes = request.max_file_bytes;
  return plan;
}

Result<nlohmann::json> EncodeResult(const supervisor::ExecutionResult& r, SharedFds* fds) {
  nlohmann::json j = {{"type", "result"}, {"result", supervisor::ToJson(r, false)}};
  if (r.returned_files.empty()) return j;
  nlohmann::json files = nlohmann::json::array();
  std::vector<std::string_view> parts;
  for (const auto& f : r.returned_files) {
    files.push_back({{"path", f.path}, {"size", f.content.size()}});
    parts.emplace_back(f.content);
  }
  KILN_ASSIGN_OR_RETURN(UniqueFd memfd, policy::SealedMemfd("kiln-returned-files", parts));
  fds->push_back(std::make_shared<const UniqueFd>(std::move(memfd)));
  j["files"] = std::move(files);
  j["fds"] = 1;
  return j;
}

Status CheckSealedMemfd(int fd, uint64_t size) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("fstat a memfd beside a frame");
  const int seals = ::fcntl(fd, F_GET_SEALS);
  constexpr int kSealed = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
  if (!S_ISREG(st.st_mode) || seals < 0 || (seals & kSealed) != kSealed) {
    return InvalidArgument("fds: not a sealed memfd");
  }
  if (static_cast<uint64_t>(st.st_size) != size) {
    return InvalidArgument("fds: the sizes do not add up to the memfd's " +
                           std::to_string(st.st_size) + " bytes");
  }
  return OkStatus();
}

Result<std::string> ReadMemfd(int fd, uint64_t offset, uint64_t size) {
  std::string out(size, '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read a memfd beside a frame");
    if (n == 0) return InvalidArgument("fds: the memfd ends early");
    done += static_cast<size_t>(n);
  }
  return out;
}

Result<nlohmann::json> EncodeFileBytes(nlohmann::json frame, std::string_view bytes,
                                       SharedFds* fds) {
  KILN_ASSIGN_OR_RETURN(UniqueFd memfd, policy::SealedMemfd("kiln-file", bytes));
  fds->push_back(std::make_shared<const UniqueFd>(std::move(memfd)));
  frame["size"] = bytes.size();
  frame["fds"] = 1;
  return frame;
}

Result<std::pair<int, uint64_t>> FileBytesOf(const nlohmann::json& frame, const SharedFds& fds,
                                             uint64_t max_bytes) {
  const auto size = frame.find("size");
  if (size == frame.end() || !size->is_number_integer() || size->get<int64_t>() < 0) {
    return InvalidField("size", "size: the file's byte count is missing");
  }
  if (fds.size() != 1 || !fds[0] || !*fds[0]) {
    return InvalidArgument("fds: a file's bytes need exactly one memfd beside the frame");
  }
  const uint64_t n = size->get<uint64_t>();
  if (n > max_bytes) {
    return MakeError(
        Code::kResourceExhausted,
        std::to_string(n) + " bytes is over the per-file cap of " + std::to_string(max_bytes));
  }
  KILN_TRY(CheckSealedMemfd(fds[0]->get(), n));
  return std::make_pair(fds[0]->get(), n);
}

Result<ExecResponse> DecodeResult(const nlohmann::json& frame, const SharedFds& fds) {
  const auto result = frame.find("result");
  if (result == frame.end()) return InvalidArgument("result: missing");
  KILN_ASSIGN_OR_RETURN(supervisor::ExecutionResult r, supervisor::FromJson(*result));
  const auto files = frame.find("files");
  if (files == frame.end()) {
    if (!fds.empty()) return InvalidArgument("fds: a result without files came with some");
    return ExecResponse{std::move(r), nullptr};
  }
  if (!files->is_array()) return InvalidArgument("files: not an array");
  if (fds.size() != 1 || !fds[0] || !*fds[0]) {
    return InvalidArgument("fds: returned files need exactly one memfd beside the result");
  }
  const int fd = fds[0]->get();
  uint64_t total = 0;
  for (const auto& f : *files) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
        !f["size"].is_number_integer() || f["size"].get<int64_t>() < 0) {
      return InvalidArgument("files: an entry is not {path, size}");
    }
    const uint64_t size = f["size"].get<uint64_t>();
    if (size > kMaxResponseBytes || total + size > kMaxResponseBytes) {
      return InvalidArgument("files: more bytes than a response may carry");
    }
    total += size;
  }
  // The memfd is what the frame says, and nobody can change it any more.
  if (Status sealed = CheckSealedMemfd(fd, total); !sealed.ok()) {
    return InvalidArgument("returned files: " + sealed.error().message);
  }
  uint64_t offset = 0;
  for (const auto& f : *files) {
    supervisor::FileContentResult out;
    out.path = f["path"].get<std::string>();
    const uint64_t size = f["size"].get<uint64_t>();
    KILN_ASSIGN_OR_RETURN(out.content, ReadMemfd(fd, offset, size));
    offset += size;
    r.returned_files.push_back(std::move(out));
  }
  return ExecResponse{std::move(r), nullptr};
}

}  // namespace kiln::spawner
