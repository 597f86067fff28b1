#include "spawner/job_channel.h"

#include <string>
#include <utility>

#include "base/base64.h"
#include "spawner/spawner.h"
#include "sys/syscalls.h"

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
