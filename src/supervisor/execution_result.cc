#include "supervisor/execution_result.h"

#include <csignal>
#include <cstring>
#include <type_traits>
#include <utility>

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

namespace kiln::supervisor {
namespace {

using nlohmann::json;

// The member `key` of `j` read as T: absent -> `absent` (nullopt when the
// member is required), null -> nullopt when `nullable`, another type -> an
// error naming it.
class Reader {
 public:
  explicit Reader(const json& j) : j_(j) {}

  template <typename T>
  bool Get(const char* key, T* out, bool required = false) {
    const auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) Fail(key, "missing");
      return false;
    }
    if (!Is<T>(*it)) {
      Fail(key, "wrong type");
      return false;
    }
    *out = it->template get<T>();
    return true;
  }
  // An integer or null (null and absent leave *out as it is).
  template <typename T>
  void GetNullable(const char* key, T* out, bool required = false) {
    const auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) Fail(key, "missing");
      return;
    }
    if (it->is_null()) return;
    if (!Is<T>(*it)) return Fail(key, "wrong type");
    *out = it->template get<T>();
  }
  const json* Find(const char* key, json::value_t type) {
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    if (it->type() != type) {
      Fail(key, "wrong type");
      return nullptr;
    }
    return &*it;
  }
  void Fail(std::string_view key, std::string_view what) {
    if (error_.empty()) error_ = std::string(key) + ": " + std::string(what);
  }
  const std::string& error() const { return error_; }

 private:
  template <typename T>
  static bool Is(const json& v) {
    if constexpr (std::is_same_v<T, bool>) {
      return v.is_boolean();
    } else if constexpr (std::is_same_v<T, std::string>) {
      return v.is_string();
    } else if constexpr (std::is_same_v<T, double>) {
      return v.is_number();
    } else if constexpr (std::is_unsigned_v<T>) {
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    } else {
      return v.is_number_integer();
    }
  }
  const json& j_;
  std::string error_;
};

bool AllStrings(const json& a) {
  for (const auto& v : a) {
    if (!v.is_string()) return false;
  }
  return true;
}

}  // namespace

std::optional<Outcome> OutcomeFromString(std::string_view name) {
  for (Outcome o :
       {Outcome::kOk, Outcome::kError, Outcome::kTimeout, Outcome::kCpuLimit, Outcome::kMemoryLimit,
        Outcome::kOutputLimit, Outcome::kSignaled, Outcome::kPolicyViolation, Outcome::kSetupError,
        Outcome::kProtocolError, Outcome::kCancelled, Outcome::kInterrupted}) {
    if (ToString(o) == name) return o;
  }
  return std::nullopt;
}

Result<ExecutionResult> FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("result: not an object");
  ExecutionResult r;
  Reader in(j);
  std::string status;
  if (in.Get("status", &status, true)) {
    auto outcome = OutcomeFromString(status);
    if (!outcome) in.Fail("status", "unknown '" + status + "'");
    r.outcome = outcome.value_or(Outcome::kSetupError);
  }
  in.GetNullable("exit_code", &r.exit_code, true);
  in.GetNullable("signal", &r.signal, true);
  in.Get("stdout", &r.stdout_data, true);
  in.Get("stderr", &r.stderr_data, true);
  in.Get("reason", &r.reason, true);
  in.Get("stdout_truncated", &r.stdout_truncated);
  in.Get("stderr_truncated", &r.stderr_truncated);
  in.Get("duration_ms", &r.duration_ms);
  in.Get("cpu_ms", &r.cpu_ms);
  in.Get("peak_memory_bytes", &r.peak_memory_bytes);
  in.Get("oom_kills", &r.oom_kills);
  in.Get("pids_limit_hits", &r.pids_limit_hits);
  in.Get("limits_backend", &r.limits_backend);
  if (const json* files = in.Find("files", json::value_t::array)) {
    for (const auto& f : *files) {
      if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
          !f["size"].is_number_unsigned()) {
        in.Fail("files", "an entry is not {path, size}");
        break;
      }
      r.files.push_back({f["path"].get<std::string>(), f["size"].get<uint64_t>()});
    }
  }
  if (const json* skipped = in.Find("files_skipped", json::value_t::array)) {
    if (!AllStrings(*skipped)) {
      in.Fail("files_skipped", "not strings");
    } else {
      r.collect_skipped = skipped->get<std::vector<std::string>>();
    }
  }
  in.Get("collect_error", &r.collect_error);
  if (const json* setup = in.Find("setup_error", json::value_t::object)) {
    Reader s(*setup);
    SetupErrorInfo info;
    std::string step;
    if (s.Get("step", &step, true)) {
      bool known = false;
      for (int i = 0; i < static_cast<int>(SetupStep::kCount); ++i) {
        if (kiln::ToString(static_cast<SetupStep>(i)) == step) {
          info.step = static_cast<SetupStep>(i);
          known = true;
        }
      }
      if (!known) s.Fail("step", "unknown '" + step + "'");
    }
    s.Get("errno", &info.sys_errno, true);
    s.Get("message", &info.message, true);
    if (!s.error().empty()) in.Fail("setup_error." + s.error(), "");
    r.setup_error = std::move(info);
  }
  if (const auto it = j.find("outputs"); it != j.end()) {
    if (!it->is_array()) {
      in.Fail("outputs", "not an array");
    } else {
      r.outputs = *it;
    }
  }
  if (j.contains("execution_count") && !j["execution_count"].is_null()) {
    int64_t count = 0;
    in.GetNullable("execution_count", &count);
    r.execution_count = count;
  }
  if (const json* error = in.Find("error", json::value_t::object)) {
    Reader e(*error);
    CellError ce;
    e.Get("name", &ce.name, true);
    e.Get("value", &ce.value, true);
    if (const json* tb = e.Find("traceback", json::value_t::array)) {
      if (!AllStrings(*tb)) {
        e.Fail("traceback", "not strings");
      } else {
        ce.traceback = tb->get<std::vector<std::string>>();
      }
    }
    if (!e.error().empty()) in.Fail("error." + e.error(), "");
    r.error = std::move(ce);
  }
  if (const json* violation = in.Find("policy_violation", json::value_t::object)) {
    Reader v(*violation);
    PolicyViolationInfo info;
    v.Get("module", &info.module, true);
    v.Get("line", &info.line, true);
    v.Get("message", &info.message, true);
    if (!v.error().empty()) in.Fail("policy_violation." + v.error(), "");
    r.policy_violation = std::move(info);
  }
  std::string state;
  if (in.Get("session_state", &state)) {
    if (state != "kept" && state != "lost") in.Fail("session_state", "unknown '" + state + "'");
    r.session_state = std::move(state);
  }
  in.Get("outputs_dropped", &r.outputs_dropped);
  in.Get("outputs_truncated", &r.outputs_truncated);
  if (const json* phases = in.Find("phases_ms", json::value_t::object)) {
    Reader p(*phases);
    PhaseTimes& t = r.phases;
    for (auto [key, field] : {std::pair<const char*, double*>{"plan", &t.plan_ms},
                              {"cgroup", &t.cgroup_ms},
                              {"clone", &t.clone_ms},
                              {"maps", &t.maps_ms},
                              {"child_setup", &t.child_setup_ms},
                              {"exec", &t.exec_ms},
                              {"attach", &t.attach_ms},
                              {"start", &t.start_ms},
                              {"run", &t.run_ms},
                              {"teardown", &t.teardown_ms}}) {
      p.Get(key, field);
    }
    if (!p.error().empty()) in.Fail("phases_ms." + p.error(), "");
  }
  if (!in.error().empty()) {
    std::string e = in.error();
    if (e.size() >= 2 && e.compare(e.size() - 2, 2, ": ") == 0) e.resize(e.size() - 2);
    return InvalidArgument("result: " + e);
  }
  return r;
}

}  // namespace kiln::supervisor
