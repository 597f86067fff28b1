#include "supervisor/execution_result.h"

#include <csignal>
#include <cstring>

namespace kiln::supervisor {

std::string_view ToString(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk: return "ok";
    case Outcome::kError: return "error";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kCpuLimit: return "cpu_limit";
    case Outcome::kMemoryLimit: return "memory_limit";
    case Outcome::kOutputLimit: return "output_limit";
    case Outcome::kSignaled: return "signaled";
    case Outcome::kPolicyViolation: return "policy_violation";
    case Outcome::kSetupError: return "setup_error";
    case Outcome::kProtocolError: return "protocol_error";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kInterrupted: return "interrupted";
  }
  return "setup_error";
}

int PlainExitCode(const ExecutionResult& r) {
  switch (r.outcome) {
    case Outcome::kOk:
    case Outcome::kError: return r.exit_code >= 0 ? r.exit_code : 1;
    case Outcome::kProtocolError: return 1;
    case Outcome::kCancelled:
    case Outcome::kInterrupted: return 130;
    case Outcome::kTimeout: return 124;
    case Outcome::kSetupError: return 125;
    case Outcome::kCpuLimit:
    case Outcome::kMemoryLimit:
    case Outcome::kOutputLimit:
    case Outcome::kSignaled:
      return r.signal > 0 ? 128 + r.signal : (r.exit_code >= 0 ? r.exit_code : 137);
    case Outcome::kPolicyViolation:
      // An import the policy refuses exits 1, like the ImportError it is.
      if (r.signal == 0) return r.exit_code > 0 ? r.exit_code : 1;
      return r.signal > 0 ? 128 + r.signal : (r.exit_code >= 0 ? r.exit_code : 137);
  }
  return 125;
}

nlohmann::json ToJson(const ExecutionResult& r, bool with_files) {
  nlohmann::json j;
  j["status"] = std::string(ToString(r.outcome));
  j["exit_code"] = r.exit_code >= 0 ? nlohmann::json(r.exit_code) : nlohmann::json(nullptr);
  j["signal"] = r.signal > 0 ? nlohmann::json(r.signal) : nlohmann::json(nullptr);
  if (r.signal > 0) {
    const char* name = sigabbrev_np(r.signal);
    j["signal_name"] = name != nullptr ? std::string("SIG") + name : "";
  }
  j["stdout"] = r.stdout_data;
  j["stderr"] = r.stderr_data;
  j["stdout_truncated"] = r.stdout_truncated;
  j["stderr_truncated"] = r.stderr_truncated;
  j["duration_ms"] = r.duration_ms;
  j["cpu_ms"] = r.cpu_ms;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["oom_kills"] = r.oom_kills;
  j["pids_limit_hits"] = r.pids_limit_hits;
  j["limits_backend"] = r.limits_backend;
  j["reason"] = r.reason;
  if (with_files) {
    auto files = nlohmann::json::array();
    for (const auto& f : r.files) files.push_back({{"path", f.path}, {"size", f.size}});
    j["files"] = files;
  }
  // Also for files returned in memory (return_files): what was left out, and why.
  if (!r.collect_skipped.empty()) j["files_skipped"] = r.collect_skipped;
  if (!r.collect_error.empty()) j["collect_error"] = r.collect_error;
  if (r.setup_error) {
    j["setup_error"] = {
        {"step", std::string(kiln::ToString(r.setup_error->step))},
        {"errno", r.setup_error->sys_errno},
        {"errno_name", r.setup_error->sys_errno > 0
                           ? std::string(strerrorname_np(r.setup_error->sys_errno)
                                             ? strerrorname_np(r.setup_error->sys_errno)
                                             : "")
                           : ""},
        {"message", r.setup_error->message}};
  }
  j["outputs"] = r.outputs;
  j["execution_count"] =
      r.execution_count ? nlohmann::json(*r.execution_count) : nlohmann::json(nullptr);
  if (r.error) {
    j["error"] = {
        {"name", r.error->name}, {"value", r.error->value}, {"traceback", r.error->traceback}};
  } else {
    j["error"] = nullptr;
  }
  if (r.policy_violation) {
    j["policy_violation"] = {{"module", r.policy_violation->module},
                             {"line", r.policy_violation->line},
                             {"message", r.policy_violation->message}};
  }
  if (r.session_state) j["session_state"] = *r.session_state;
  j["outputs_dropped"] = r.outputs_dropped;
  j["outputs_truncated"] = r.outputs_truncated;
  const auto& p = r.phases;
  j["phases_ms"] = {{"plan", p.plan_ms},
                    {"cgroup", p.cgroup_ms},
                    {"clone", p.clone_ms},
                    {"maps", p.maps_ms},
                    {"child_setup", p.child_setup_ms},
                    {"exec", p.exec_ms},
                    {"attach", p.attach_ms},
                    {"start", p.start_ms},
                    {"run", p.run_ms},
                    {"teardown", p.teardown_ms}};
  return j;
}

}  // namespace kiln::supervisor
