#include "mcp/local_backend.h"

#include <cstdio>
#include <utility>

#include "base/units.h"
#include "mcp/tools.h"

namespace kiln::mcp {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The session layer's own conditions keep their name in the tool's text
// ("session_busy: a cell or file operation of this session is running").
Error Mapped(Error e) {
  if (e.code == Code::kGone) e.code = Code::kNotFound;
  if (e.api_code == "session_busy" || e.api_code == "session_limit")
    e.message = e.api_code + ": " + e.message;
  return e;
}

Status Mapped(Status s) {
  if (s.ok()) return s;
  return Mapped(std::move(s).error());
}

}  // namespace

std::string LimitsText(const config::Profile& profile) {
  auto builder = config::PolicyFor(profile, {});
  if (!builder.ok()) return DefaultLimitsText();
  auto policy = builder->Build();
  if (!policy.ok()) return DefaultLimitsText();
  const policy::Limits& l = policy->limits();
  const double max_timeout = profile.max.timeout_s.value_or(l.wall_timeout_s);
  std::string text = "Each call may run for " + Num(l.wall_timeout_s) + " seconds by default";
  if (max_timeout > l.wall_timeout_s) {
    text += " (the timeout argument raises it, up to " + Num(max_timeout) + " s)";
  }
  text += ", with " + FormatSize(l.memory_bytes) + " of memory and " + Num(l.cpus) + " CPU" +
          (l.cpus == 1 ? "" : "s") + "; stdout and stderr are capped at " +
          FormatSize(l.output_bytes) + " each, /workspace at " + FormatSize(l.workspace_bytes);
  return text;
}

Result<std::string> LocalBackend::CreateSession() {
  auto created = manager_->Create(caller_, options_);
  if (!created.ok()) return Mapped(std::move(created).error());
  const auto id = created->find("id");
  if (id == created->end() || !id->is_string())
    return Internal("the session manager returned no session id");
  return id->get<std::string>();
}

Status LocalBackend::DeleteSession(const std::string& session) {
  return Mapped(manager_->Delete(caller_, session));
}

Result<nlohmann::json> LocalBackend::Execute(
    const std::string& session, const std::string& code, std::optional<double> timeout_s,
    const std::function<void(const nlohmann::json&)>& on_event) {
  spawner::EventFn events;
  if (on_event) {
    events = [&on_event](std::string_view event, const nlohmann::json& data) {
      on_event({{"event", std::string(event)}, {"data", data}});
    };
  }
  auto out = manager_->Execute(caller_, session, code, timeout_s, events, /*hangup_fd=*/-1);
  if (!out.ok()) return Mapped(std::move(out).error());
  if (out->rejection) {
    // Admission said no: the tenant's quota (429) or a full server (503).
    Error e = out->rejection->error;
    e.code = out->rejection->tenant_quota ? Code::kResourceExhausted : Code::kUnavailable;
    e.message = "the cell was not admitted (" + out->rejection->reason + "): " + e.message +
                "; retry in " + std::to_string(std::max(1, out->rejection->retry_after_s)) + " s";
    return e;
  }
  if (!out->response) return Internal("the session manager returned no result");
  nlohmann::json result = executions::ResultJson(*out->response);
  result["id"] = out->execution_id;
  result["session_id"] = session;
  return result;
}

Status LocalBackend::Interrupt(const std::string& session) {
  auto r = manager_->Interrupt(caller_, session);
  if (!r.ok()) return Mapped(std::move(r).error());
  return OkStatus();
}

Status LocalBackend::PutFile(const std::string& session, const std::string& path,
                             const std::string& bytes) {
  return Mapped(manager_->PutFile(caller_, session, path, bytes));
}

Result<std::string> LocalBackend::GetFile(const std::string& session, const std::string& path) {
  auto r = manager_->GetFile(caller_, session, path);
  if (!r.ok()) return Mapped(std::move(r).error());
  return std::move(*r);
}

Result<nlohmann::json> LocalBackend::ListFiles(const std::string& session) {
  auto r = manager_->ListFiles(caller_, session);
  if (!r.ok()) return Mapped(std::move(r).error());
  if (r->is_object() && r->contains("files")) return std::move(*r);
  return nlohmann::json{{"files", std::move(*r)}};
}

}  // namespace kiln::mcp
