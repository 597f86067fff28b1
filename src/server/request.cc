#include "server/request.h"

#include <cmath>

#include "base/base64.h"
#include "base/json_depth.h"
#include "base/units.h"
#include "policy/policy.h"

namespace kiln::server {
namespace {

constexpr size_t kMaxCodeChars = 1u << 20;
constexpr size_t kMaxReferenceCode = 100000;

FieldError Err(std::string field, std::string code, std::string message) {
  return FieldError{std::move(field), std::move(code), std::move(message)};
}

std::optional<FieldError> ParseObject(const std::string& body, nlohmann::json* j) {
  if (HasNulByte(body))
    return Err("", "invalid_json", "the body holds a NUL byte (never part of JSON text)");
  if (!JsonDepthWithin(body)) {
    return Err("", "invalid_json",
               "the body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  *j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded()) return Err("", "invalid_json", "the body is not valid JSON");
  if (!j->is_object()) return Err("", "invalid_json", "the body must be a JSON object");
  return std::nullopt;
}

// Counts UTF-8 code points (what "characters" means to a Python client).
size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::optional<FieldError> Size(const nlohmann::json& v, const std::string& field, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return std::nullopt;
  }
  if (v.is_string()) {
    auto s = ParseSize(v.get<std::string>());
    if (!s.ok()) return Err(field, "invalid_value", s.error().message);
    *out = *s;
    return std::nullopt;
  }
  return Err(field, "invalid_type", "must be a size such as \"512m\" or a number of bytes");
}

std::optional<FieldError> Seconds(const nlohmann::json& v, const std::string& field, double* out) {
  if (!v.is_number()) return Err(field, "invalid_type", "must be a number of seconds");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d <= 0)
    return Err(field, "invalid_value", "must be a positive number of seconds");
  *out = d;
  return std::nullopt;
}

std::optional<FieldError> FilePath(const std::string& path, const std::string& field) {
  if (!policy::IsSafeRelativePath(path)) {
    return Err(field, "invalid_value",
               "must be a relative path inside the workspace: no '..', no leading '/', no NUL, "
               "components of at most 255 bytes, at most 4095 bytes in all");
  }
  return std::nullopt;
}

}  // namespace

std::optional<FieldError> ParseEnv(const nlohmann::json& env, const std::string& field,
                                   std::vector<std::pair<std::string, std::string>>* out) {
  if (!env.is_object()) return Err(field, "invalid_type", "must be an object of strings");
  if (env.size() > 64) return Err(field, "invalid_value", "at most 64 variables");
  size_t total = 0;
  for (const auto& [name, value] : env.items()) {
    const std::string var = field + "." + name.substr(0, 64);
    if (!IsUserEnvName(name)) {
      return Err(var, "invalid_value",
                 "names are [A-Za-z_][A-Za-z0-9_]*; PATH, HOME, TMPDIR, LANG, LC_*, LD_*, "
                 "PYTHON*, MPL*, *_NUM_THREADS and KILN_* are kiln's");
    }
    if (!value.is_string()) return Err(var, "invalid_type", "must be a string");
    total += name.size() + value.get<std::string>().size();
    if (value.get<std::string>().find('\0') != std::string::npos) {
      return Err(var, "invalid_value", "must not contain NUL");
    }
    out->emplace_back(name, value.get<std::string>());
  }
  if (total > 32768) return Err(field, "invalid_value", "at most 32 KiB in all");
  return std::nullopt;
}

std::optional<FieldError> ParseSessionCreate(const std::string& body,
                                             sessions::SessionOptions* out) {
  nlohmann::json j = nlohmann::json::object();
  if (body.find_first_not_of(" \t\r\n") != std::string::npos) {
    if (auto e = ParseObject(body, &j)) return e;
  }
  static const char* kKnown[] = {"profile",  "memory",       "cpus", "timeout",
                                 "idle_ttl", "max_lifetime", "env"};
  for (const auto& [k, _] : j.items()) {
    bool known = false;
    for (const char* n : kKnown) known = known || k == n;
    if (!known) return Err(k, "unknown_field", "is not a field of this endpoint");
  }
  if (j.contains("profile")) {
    if (!j["profile"].is_string()) return Err("profile", "invalid_type", "must be a string");
    out->profile = j["profile"].get<std::string>();
  }
  if (j.contains("memory")) {
    uint64_t m = 0;
    if (auto e = Size(j["memory"], "memory", &m)) return e;
    out->limits.memory_bytes = m;
  }
  if (j.contains("cpus")) {
    if (!j["cpus"].is_number()) return Err("cpus", "invalid_type", "must be a number of cores");
    const double c = j["cpus"].get<double>();
    if (!std::isfinite(c) || c <= 0) return Err("cpus", "invalid_value", "must be positive");
    out->limits.cpus = c;
  }
  double t = 0;
  if (j.contains("timeout")) {
    if (auto e = Seconds(j["timeout"], "timeout", &t)) return e;
    out->limits.timeout_s = t;
  }
  if (j.contains("idle_ttl")) {
    if (auto e = Seconds(j["idle_ttl"], "idle_ttl", &t)) return e;
    out->idle_ttl_s = t;
  }
  if (j.contains("max_lifetime")) {
    if (auto e = Seconds(j["max_lifetime"], "max_lifetime", &t)) return e;
    out->max_lifetime_s = t;
  }
  if (j.contains("env")) {
    if (auto e = ParseEnv(j["env"], "env", &out->env)) return e;
  }
  return std::nullopt;
}

std::optional<FieldError> ParseSessionExecute(const std::string& body, SessionExecuteRequest* out) {
  nlohmann::json j;
  if (auto e = ParseObject(body, &j)) return e;
  for (const auto& [k, _] : j.items()) {
    if (k != "code" && k != "timeout")
      return Err(k, "unknown_field", "is not a field of this endpoint");
  }
  if (!j.contains("code")) return Err("code", "missing_field", "is required");
  if (!j["code"].is_string()) return Err("code", "invalid_type", "must be a string");
  out->code = j["code"].get<std::string>();
  if (out->code.empty()) return Err("code", "invalid_value", "must not be empty");
  if (out->code.size() > kMaxCodeChars)
    return Err("code", "invalid_value", "must be at most 1 MiB");
  if (j.contains("timeout")) {
    double t = 0;
    if (auto e = Seconds(j["timeout"], "timeout", &t)) return e;
    out->timeout_s = t;
  }
  return std::nullopt;
}

std::optional<std::string> PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = hex(text[i + 1]), lo = hex(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    const char c = static_cast<char>(hi * 16 + lo);
    if (c == '\0') return std::nullopt;
    out += c;
    i += 2;
  }
  return out;
}

bool IsUserEnvName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  for (const char* exact : {"PATH", "HOME", "TMPDIR", "LANG"}) {
    if (name == exact) return false;
  }
  for (const char* prefix : {"LC_", "LD_", "PYTHON", "MPL", "KILN_"}) {
    if (name.rfind(prefix, 0) == 0) return false;
  }
  return name.size() < 12 || name.compare(name.size() - 12, 12, "_NUM_THREADS") != 0;
}

nlohmann::json V1ErrorBody(const std::string& code, const std::string& message,
                           const std::string& field) {
  return {{"error",
           {{"code", code},
            {"message", message},
            {"field", field.empty() ? nlohmann::json(nullptr) : nlohmann::json(field)}}}};
}

nlohmann::json ReferenceValidationBody(const FieldError& e) {
  nlohmann::json loc = nlohmann::json::array({"body"});
  if (!e.field.empty()) loc.push_back(e.field);
  return {{"detail", nlohmann::json::array(
                         {{{"loc", loc},
                           {"msg", e.message},
                           {"type", e.code == "missing_field" ? "missing" : "value_error"}}})}};
}

std::optional<FieldError> ParseV1Execute(const std::string& body,
                                         const std::string& default_profile, V1Request* out) {
  nlohmann::json j;
  if (auto e = ParseObject(body, &j)) return e;
  auto& r = out->exec;
  r.profile = default_profile;
  static const char* kKnown[] = {"code",  "timeout",      "memory", "cpus",    "profile",
                                 "files", "return_files", "env",    "filename"};
  for (const auto& [k, _] : j.items()) {
    bool known = false;
    for (const char* n : kKnown) known = known || k == n;
    if (!known) return Err(k, "unknown_field", "is not a field of this endpoint");
  }
  if (!j.contains("code")) return Err("code", "missing_field", "is required");
  if (!j["code"].is_string()) return Err("code", "invalid_type", "must be a string");
  r.code = j["code"].get<std::string>();
  if (r.code.empty()) return Err("code", "invalid_value", "must not be empty");
  if (r.code.size() > kMaxCodeChars) return Err("code", "invalid_value", "must be at most 1 MiB");
  if (j.contains("filename")) {
    if (!j["filename"].is_string()) return Err("filename", "invalid_type", "must be a string");
    r.filename = j["filename"].get<std::string>();
    if (r.filename.empty() || r.filename.size() > 255)
      return Err("filename", "invalid_value", "must be 1-255 bytes");
  }
  if (j.contains("timeout")) {
    double t = 0;
    if (auto e = Seconds(j["timeout"], "timeout", &t)) return e;
    r.limits.timeout_s = t;
  }
  if (j.contains("memory")) {
    uint64_t m = 0;
    if (auto e = Size(j["memory"], "memory", &m)) return e;
    r.limits.memory_bytes = m;
  }
  if (j.contains("cpus")) {
    if (!j["cpus"].is_number()) return Err("cpus", "invalid_type", "must be a number of cores");
    const double c = j["cpus"].get<double>();
    if (!std::isfinite(c) || c <= 0) return Err("cpus", "invalid_value", "must be positive");
    r.limits.cpus = c;
  }
  if (j.contains("profile")) {
    if (!j["profile"].is_string()) return Err("profile", "invalid_type", "must be a string");
    r.profile = j["profile"].get<std::string>();
  }
  if (j.contains("files")) {
    if (!j["files"].is_array()) return Err("files", "invalid_type", "must be an array");
    size_t i = 0;
    for (const auto& f : j["files"]) {
      const std::string at = "files[" + std::to_string(i++) + "]";
      if (!f.is_object())
        return Err(at, "invalid_type", "must be an object {path, content | content_base64}");
      if (!f.contains("path") || !f["path"].is_string())
        return Err(at + ".path", "invalid_type", "must be a string");
      const std::string path = f["path"].get<std::string>();
      if (auto e = FilePath(path, at + ".path")) return e;
      const bool text = f.contains("content"), b64 = f.contains("content_base64");
      if (text == b64)
        return Err(at, "invalid_value", "needs exactly one of content and content_base64");
      const auto& v = text ? f["content"] : f["content_base64"];
      if (!v.is_string())
        return Err(at + (text ? ".content" : ".content_base64"), "invalid_type",
                   "must be a string");
      if (text) {
        r.files.emplace_back(path, v.get<std::string>());
      } else {
        auto bytes = Base64Decode(v.get<std::string>());
        if (!bytes.ok()) return Err(at + ".content_base64", "invalid_value", bytes.error().message);
        r.files.emplace_back(path, std::move(*bytes));
      }
    }
  }
  if (j.contains("return_files")) {
    const auto& v = j["return_files"];
    if (v.is_boolean()) {
      out->return_files = v.get<bool>();
      if (out->return_files) r.return_files = std::vector<std::string>{};
    } else if (v.is_array()) {
      std::vector<std::string> globs;
      for (const auto& g : v) {
        if (!g.is_string() || g.get<std::string>().empty() || g.get<std::string>().size() > 1024) {
          return Err("return_files", "invalid_type",
                     "must be true, false or a list of glob strings");
        }
        globs.push_back(g.get<std::string>());
      }
      out->return_files = true;
      r.return_files = std::move(globs);
    } else {
      return Err("return_files", "invalid_type", "must be true, false or a list of glob strings");
    }
  }
  if (j.contains("env")) {
    if (auto e = ParseEnv(j["env"], "env", &r.env)) return e;
  }
  return std::nullopt;
}

std::optional<FieldError> ParseReferenceExecute(const std::string& body,
                                                const std::string& default_profile,
                                                ReferenceRequest* out) {
  nlohmann::json j;
  if (auto e = ParseObject(body, &j)) return e;
  auto& r = out->exec;
  r.profile = default_profile;
  r.filename = "<string>";
  if (!j.contains("code")) return Err("code", "missing_field", "Field required");
  if (!j["code"].is_string()) return Err("code", "invalid_type", "Input should be a valid string");
  r.code = j["code"].get<std::string>();
  const size_t n = CodePoints(r.code);
  if (n < 1 || n > kMaxReferenceCode) {
    return Err("code", "invalid_value", "String should have between 1 and 100000 characters");
  }
  if (j.contains("timeout") && !j["timeout"].is_null()) {
    if (!j["timeout"].is_number())
      return Err("timeout", "invalid_type", "Input should be a valid number");
    const double t = j["timeout"].get<double>();
    if (!(t >= 1 && t <= 300))
      return Err("timeout", "invalid_value", "Input should be between 1 and 300");
    out->timeout_s = t;
  }
  r.limits.timeout_s = out->timeout_s;
  std::string mem = "1G";
  if (j.contains("mem_limit") && !j["mem_limit"].is_null()) {
    if (!j["mem_limit"].is_string())
      return Err("mem_limit", "invalid_type", "Input should be a valid string");
    mem = j["mem_limit"].get<std::string>();
  }
  auto m = ParseSize(mem);
  if (!m.ok() || *m < (16ULL << 20)) {
    return Err("mem_limit", "invalid_value",
               "Input should be a size such as '512m' or '1G' (at least 16m)");
  }
  r.limits.memory_bytes = *m;
  double cpus = 1.0;
  if (j.contains("cpu_limit") && !j["cpu_limit"].is_null()) {
    if (!j["cpu_limit"].is_number())
      return Err("cpu_limit", "invalid_type", "Input should be a valid number");
    cpus = j["cpu_limit"].get<double>();
    if (!(cpus >= 0.1 && cpus <= 8))
      return Err("cpu_limit", "invalid_value", "Input should be between 0.1 and 8");
  }
  r.limits.cpus = cpus;
  if (j.contains("input_files") && !j["input_files"].is_null()) {
    if (!j["input_files"].is_object()) {
      return Err("input_files", "invalid_type", "Input should be a valid dictionary");
    }
    for (const auto& [path, text] : j["input_files"].items()) {
      if (auto e = FilePath(path, "input_files")) {
        e->message = "'" + path.substr(0, 100) + "': " + e->message;
        return e;
      }
      if (!text.is_string())
        return Err("input_files", "invalid_type", "Input should be a valid string");
      r.files.emplace_back(path, text.get<std::string>());
    }
  }
  if (j.contains("return_output_files") && !j["return_output_files"].is_null()) {
    if (!j["return_output_files"].is_boolean()) {
      return Err("return_output_files", "invalid_type", "Input should be a valid boolean");
    }
    out->return_output_files = j["return_output_files"].get<bool>();
  }
  if (out->return_output_files) r.return_files = std::vector<std::string>{};
  return std::nullopt;
}

}  // namespace kiln::server
