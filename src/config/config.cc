#include "config/config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "base/units.h"

namespace kiln::config {
namespace {

std::string Where(const std::string& source, const toml::node& node) {
  const auto& src = node.source();
  return source + ":" + std::to_string(src.begin.line);
}

Error KeyError(const std::string& source, const toml::node& node, const std::string& key,
               const std::string& message) {
  return InvalidArgument(Where(source, node) + ": " + key + ": " + message);
}

// Sizes as "512m" strings or integers of bytes.
Result<uint64_t> SizeValue(const std::string& source, const toml::node& node, const std::string& key) {
  if (auto i = node.value<int64_t>(); i && node.is_integer()) {
    if (*i < 0) return KeyError(source, node, key, "must not be negative");
    return static_cast<uint64_t>(*i);
  }
  if (auto s = node.value<std::string>()) {
    auto v = ParseSize(*s);
    if (!v.ok()) return KeyError(source, node, key, v.error().message);
    return *v;
  }
  return KeyError(source, node, key, "must be a size (\"512m\") or a number of bytes");
}

// Durations as "30s"/"500ms" strings or numbers of seconds.
// The longest duration a setting may hold (about 31 years): TOML's inf and
// 1e300 are numbers too, and the settings become milliseconds and deadlines
// (a float-to-integer conversion past its range is undefined behaviour).
constexpr double kMaxSeconds = 1e9;

Result<double> SecondsValue(const std::string& source, const toml::node& node, const std::string& key) {
  double v = 0;
  if (node.is_integer() || node.is_floating_point()) {
    v = node.value<double>().value_or(0);
    if (!(v > 0)) return KeyError(source, node, key, "must be positive");
  } else if (auto s = node.value<std::string>()) {
    auto parsed = ParseSeconds(*s);
    if (!parsed.ok()) return KeyError(source, node, key, parsed.error().message);
    v = *parsed;
  } else {
    return KeyError(source, node, key, "must be seconds (30, 1.5) or a duration (\"500ms\")");
  }
  if (!(v <= kMaxSeconds)) return KeyError(source, node, key, "must be at most 1e9 seconds");
  return v;
}

Result<double> NumberValue(const std::string& source, const toml::node& node, const std::string& key) {
  if (node.is_integer() || node.is_floating_point()) return node.value<double>().value_or(0);
  return KeyError(source, node, key, "must be a number");
}

Result<uint64_t> CountValue(const std::string& source, const toml::node& node, const std::string& key) {
  if (!node.is_integer() || node.value<int64_t>().value_or(-1) < 0) {
    return KeyError(source, node, key, "must be a non-negative integer");
  }
  return static_cast<uint64_t>(*node.value<int64_t>());
}

Result<std::vector<std::string>> StringList(const std::string& source, const toml::node& node,
                                            const std::string& key) {
  const toml::array* arr = node.as_array();
  if (arr == nullptr) return KeyError(source, node, key, "must be an array of strings");
  std::vector<std::string> out;
  for (const auto& item : *arr) {
    auto s = item.value<std::string>();
    if (!s || !item.is_string()) return KeyError(source, item, key, "must hold only strings");
    out.push_back(*s);
  }
  return out;
}

Result<LimitSpec> ParseLimits(const std::string& source, const toml::table& t, const std::string& prefix) {
  LimitSpec spec;
  for (const auto& [k, node] : t) {
    const std::string key(k.str());
    const std::string full = prefix + "." + key;
    if (key == "timeout") {
      KILN_ASSIGN_OR_RETURN(spec.timeout_s, SecondsValue(source, node, full));
    } else if (key == "cpu_time") {
      KILN_ASSIGN_OR_RETURN(spec.cpu_time_s, SecondsValue(source, node, full));
    } else if (key == "memory") {
      KILN_ASSIGN_OR_RETURN(spec.memory_bytes, SizeValue(source, node, full));
    } else if (key == "cpus") {
      KILN_ASSIGN_OR_RETURN(spec.cpus, NumberValue(source, node, full));
    } else if (key == "pids") {
      KILN_ASSIGN_OR_RETURN(spec.pids, CountValue(source, node, full));
    } else if (key == "output_limit") {
      KILN_ASSIGN_OR_RETURN(spec.output_bytes, SizeValue(source, node, full));
    } else if (key == "disk") {
      KILN_ASSIGN_OR_RETURN(spec.disk_bytes, SizeValue(source, node, full));
    } else {
      return KeyError(source, node, full,
                      "unknown key (known: timeout, cpu_time, memory, cpus, pids, output_limit, disk)");
    }
  }
  return spec;
}

Result<Profile> ParseProfile(const std::string& source, const std::string& name, const toml::table& t) {
  Profile p;
  p.name = name;
  const std::string prefix = "profiles." + name;
  std::optional<std::string> mode;
  bool modules_set = false;
  for (const auto& [k, node] : t) {
    const std::string key(k.str());
    const std::string full = prefix + "." + key;
    if (key == "interpreter") {
      auto s = node.value<std::string>();
      if (!s || !node.is_string()) return KeyError(source, node, full, "must be a string");
      p.interpreter = *s;
    } else if (key == "preload") {
      KILN_ASSIGN_OR_RETURN(p.preload, StringList(source, node, full));
    } else if (key == "import_policy") {
      auto s = node.value<std::string>();
      if (!s || (*s != "open" && *s != "denylist" && *s != "allowlist")) {
        return KeyError(source, node, full, "must be \"open\", \"denylist\" or \"allowlist\"");
      }
      mode = *s;
    } else if (key == "modules") {
      KILN_ASSIGN_OR_RETURN(p.imports.modules, StringList(source, node, full));
      modules_set = true;
    } else if (key == "mounts") {
      KILN_ASSIGN_OR_RETURN(p.mounts, StringList(source, node, full));
    } else if (key == "max_images") {
      KILN_ASSIGN_OR_RETURN(p.max_images, CountValue(source, node, full));
    } else if (key == "max_image_bytes") {
      KILN_ASSIGN_OR_RETURN(p.max_image_bytes, SizeValue(source, node, full));
    } else if (key == "pool") {
      if (!node.is_boolean()) return KeyError(source, node, full, "must be true or false");
      p.pool = *node.value<bool>();
    } else if (key == "defaults" || key == "max") {
      const toml::table* sub = node.as_table();
      if (sub == nullptr) return KeyError(source, node, full, "must be a table");
      KILN_ASSIGN_OR_RETURN(LimitSpec spec, ParseLimits(source, *sub, full));
      (key == "defaults" ? p.defaults : p.max) = spec;
    } else {
      return KeyError(source, node, full,
                      "unknown key (known: interpreter, preload, import_policy, modules, mounts, "
                      "max_images, max_image_bytes, pool, defaults, max)");
    }
  }
  if (mode == "denylist") {
    p.imports.mode = policy::ImportPolicy::Mode::kDenylist;
  } else if (mode == "allowlist") {
    p.imports.mode = policy::ImportPolicy::Mode::kAllowlist;
  } else if (modules_set && !p.imports.modules.empty()) {
    return KeyError(source, t, prefix + ".modules",
                    "a module list needs import_policy = \"denylist\" or \"allowlist\"");
  }
  return p;
}

std::string Describe(uint64_t v, bool size) { return size ? FormatSize(v) : std::to_string(v); }

template <typename T>
Status Cap(const char* field, const std::optional<T>& value, const std::optional<T>& max, bool size) {
  if (value && max && *value > *max) {
    if constexpr (std::is_floating_point_v<T>) {
      return InvalidArgument(std::string(field) + ": " + std::to_string(*value) +
                             " is over the profile's maximum of " + std::to_string(*max));
    } else {
      return InvalidArgument(std::string(field) + ": " + Describe(*value, size) +
                             " is over the profile's maximum of " + Describe(*max, size));
    }
  }
  return OkStatus();
}

Result<ServerConfig> ParseServer(const std::string& source, const toml::table& t) {
  ServerConfig c;
  for (const auto& [k, node] : t) {
    const std::string key(k.str());
    const std::string full = "server." + key;
    if (key == "listen" || key == "data_dir" || key == "default_profile") {
      auto v = node.value<std::string>();
      if (!v || !node.is_string() || v->empty()) return KeyError(source, node, full, "must be a non-empty string");
      (key == "listen" ? c.listen : key == "data_dir" ? c.data_dir : c.default_profile) = *v;
    } else if (key == "concurrency" || key == "queue" || key == "retention_days" ||
               key == "max_connections" || key == "max_sessions") {
      KILN_ASSIGN_OR_RETURN(uint64_t v, CountValue(source, node, full));
      if (v > 100000) return KeyError(source, node, full, "is too large");
      (key == "concurrency" ? c.concurrency : key == "queue" ? c.queue
       : key == "retention_days" ? c.retention_days : key == "max_sessions" ? c.max_sessions
                                                    : c.max_connections) = static_cast<int>(v);
    } else if (key == "queue_timeout" || key == "client_timeout" || key == "shutdown_grace" ||
               key == "session_idle_ttl" || key == "session_max_lifetime" || key == "interrupt_grace") {
      KILN_ASSIGN_OR_RETURN(double v, SecondsValue(source, node, full));
      (key == "queue_timeout" ? c.queue_timeout_s : key == "client_timeout" ? c.client_timeout_s
       : key == "shutdown_grace" ? c.shutdown_grace_s : key == "session_idle_ttl" ? c.session_idle_ttl_s
       : key == "session_max_lifetime" ? c.session_max_lifetime_s : c.interrupt_grace_s) = v;
    } else if (key == "max_body" || key == "max_file" || key == "max_bodies_in_flight") {
      KILN_ASSIGN_OR_RETURN(uint64_t v, SizeValue(source, node, full));
      (key == "max_body" ? c.max_body_bytes
       : key == "max_file" ? c.max_file_bytes : c.max_bodies_in_flight_bytes) = v;
    } else if (key == "mcp_allowed_origins") {
      KILN_ASSIGN_OR_RETURN(c.mcp_allowed_origins, StringList(source, node, full));
    } else if (key == "store_code") {
      if (!node.is_boolean()) return KeyError(source, node, full, "must be true or false");
      c.store_code = *node.value<bool>();
    } else {
      return KeyError(source, node, full,
                      "unknown key (known: listen, data_dir, concurrency, queue, queue_timeout, "
                      "max_body, client_timeout, shutdown_grace, store_code, retention_days, "
                      "default_profile, max_connections, max_sessions, session_idle_ttl, "
                      "session_max_lifetime, interrupt_grace, max_file, max_bodies_in_flight, "
                      "mcp_allowed_origins)");
    }
  }
  if (c.max_bodies_in_flight_bytes < std::max(c.max_body_bytes, c.max_file_bytes)) {
    return InvalidArgument(source + ": [server] max_bodies_in_flight (" +
                           std::to_string(c.max_bodies_in_flight_bytes) +
                           " bytes) must be at least max_body and max_file");
  }
  return c;
}

Result<PoolConfig> ParsePool(const std::string& source, const toml::table& t) {
  PoolConfig c;
  for (const auto& [k, node] : t) {
    const std::string key(k.str());
    const std::string full = "pool." + key;
    if (key == "enabled") {
      if (!node.is_boolean()) return KeyError(source, node, full, "must be true or false");
      c.enabled = *node.value<bool>();
    } else if (key == "min" || key == "max") {
      KILN_ASSIGN_OR_RETURN(uint64_t v, CountValue(source, node, full));
      if (v > 512) return KeyError(source, node, full, "must be at most 512");
      (key == "min" ? c.min : c.max) = static_cast<int>(v);
    } else if (key == "target_wait") {
      KILN_ASSIGN_OR_RETURN(double v, NumberValue(source, node, full));
      if (!(v > 0) || !(v < 1)) return KeyError(source, node, full, "must be between 0 and 1 (exclusive)");
      c.target_wait = v;
    } else if (key == "preload") {
      KILN_ASSIGN_OR_RETURN(c.preload, StringList(source, node, full));
    } else {
      return KeyError(source, node, full, "unknown key (known: enabled, min, max, target_wait, preload)");
    }
  }
  if (c.max < 1 || c.min > c.max) {
    return KeyError(source, t, "pool", "needs 1 <= max and min <= max");
  }
  return c;
}

Result<TenantConfig> ParseTenant(const std::string& source, const std::string& name, const toml::table& t) {
  TenantConfig c;
  for (const auto& [k, node] : t) {
    const std::string key(k.str());
    const std::string full = "tenants." + name + "." + key;
    if (key == "max_concurrent" || key == "max_sessions") {
      KILN_ASSIGN_OR_RETURN(uint64_t v, CountValue(source, node, full));
      if (v < 1 || v > 10000) return KeyError(source, node, full, "must be between 1 and 10000");
      (key == "max_concurrent" ? c.max_concurrent : c.max_sessions) = static_cast<int>(v);
    } else if (key == "rate" || key == "burst") {
      KILN_ASSIGN_OR_RETURN(double v, NumberValue(source, node, full));
      if (!(v > 0) || v > 1e6) return KeyError(source, node, full, "must be a positive number");
      (key == "rate" ? c.rate_per_s : c.burst) = v;
    } else {
      return KeyError(source, node, full, "unknown key (known: max_concurrent, rate, burst, max_sessions)");
    }
  }
  return c;
}

}  // namespace

Result<const Profile*> Config::Find(std::string_view name) const {
  auto it = profiles.find(std::string(name));
  if (it == profiles.end()) {
    std::string known;
    for (const auto& [n, _] : profiles) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("profile: '" + std::string(name) + "' is not in " + source +
                           " (profiles: " + known + ")");
  }
  return &it->second;
}

Result<Config> ParseConfig(std::string_view text, std::string source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(source + ":" + std::to_string(e.source().begin.line) + ": " +
                           std::string(e.description()));
  }
  Config c;
  c.source = source;
  c.text = std::string(text);
  c.tenants["default"] = TenantConfig{};
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (key == "server") {
      const toml::table* t = node.as_table();
      if (t == nullptr) return KeyError(source, node, key, "must be a table");
      KILN_ASSIGN_OR_RETURN(c.server, ParseServer(source, *t));
      continue;
    }
    if (key == "pool") {
      const toml::table* t = node.as_table();
      if (t == nullptr) return KeyError(source, node, key, "must be a table");
      KILN_ASSIGN_OR_RETURN(c.pool, ParsePool(source, *t));
      continue;
    }
    if (key == "tenants") {
      const toml::table* t = node.as_table();
      if (t == nullptr) return KeyError(source, node, key, "must be a table of tenants");
      for (const auto& [tk, tnode] : *t) {
        const std::string name(tk.str());
        const toml::table* tt = tnode.as_table();
        if (tt == nullptr) return KeyError(source, tnode, "tenants." + name, "must be a table");
        KILN_ASSIGN_OR_RETURN(c.tenants[name], ParseTenant(source, name, *tt));
      }
      continue;
    }
    if (key != "profiles") return KeyError(source, node, key, "unknown key (known: server, pool, tenants, profiles)");
    const toml::table* profiles = node.as_table();
    if (profiles == nullptr) return KeyError(source, node, key, "must be a table of profiles");
    for (const auto& [pk, pnode] : *profiles) {
      const std::string name(pk.str());
      const toml::table* pt = pnode.as_table();
      if (pt == nullptr) return KeyError(source, pnode, "profiles." + name, "must be a table");
      if (!policy::IsSafeFileName(name) || name.find_first_of(" \t") != std::string::npos) {
        return KeyError(source, pnode, "profiles." + name, "is not a valid profile name");
      }
      KILN_ASSIGN_OR_RETURN(Profile p, ParseProfile(source, name, *pt));
      // Validate the profile as a whole now, not at the first request.
      auto builder = PolicyFor(p, {});
      if (!builder.ok()) return InvalidArgument(source + ": profiles." + name + ": " + builder.error().message);
      auto built = builder->Build();
      if (!built.ok()) return InvalidArgument(source + ": profiles." + name + ": " + built.error().message);
      c.profiles.emplace(name, std::move(p));
    }
  }
  if (c.profiles.empty()) return InvalidArgument(source + ": no [profiles.NAME] table");
  if (c.profiles.count(c.server.default_profile) == 0) {
    if (root.contains("server") && root["server"].as_table() != nullptr &&
        root["server"].as_table()->contains("default_profile")) {
      return InvalidArgument(source + ": server.default_profile: '" + c.server.default_profile +
                             "' is not a profile");
    }
    c.server.default_profile = c.profiles.begin()->first;  // no "default": the first one
  }
  return c;
}

const TenantConfig& Config::Tenant(const std::string& name) const {
  auto it = tenants.find(name);
  return it != tenants.end() ? it->second : tenants.at("default");
}

Result<Config> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoError("config: cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path);
}

const Config& BuiltinConfig() {
  static const Config config = [] {
    auto c = ParseConfig(BuiltinConfigText(), "built-in kiln.toml");
    // The embedded file is checked by a unit test; an invalid one is a build bug.
    if (!c.ok()) std::abort();
    return *c;
  }();
  return config;
}

Result<Config> LoadConfigOrBuiltin(const std::string& path) {
  if (path.empty()) return BuiltinConfig();
  return LoadConfigFile(path);
}

Result<policy::PolicyBuilder> PolicyFor(const Profile& profile, const LimitSpec& request) {
  KILN_TRY(Cap("timeout", request.timeout_s, profile.max.timeout_s, false));
  KILN_TRY(Cap("cpu_time", request.cpu_time_s, profile.max.cpu_time_s, false));
  KILN_TRY(Cap("memory", request.memory_bytes, profile.max.memory_bytes, true));
  KILN_TRY(Cap("cpus", request.cpus, profile.max.cpus, false));
  KILN_TRY(Cap("pids", request.pids, profile.max.pids, false));
  KILN_TRY(Cap("output_limit", request.output_bytes, profile.max.output_bytes, true));
  KILN_TRY(Cap("disk", request.disk_bytes, profile.max.disk_bytes, true));
  auto pick = [](const auto& req, const auto& def) { return req ? req : def; };
  policy::PolicyBuilder b;
  b.Interpreter(profile.interpreter);
  if (auto v = pick(request.timeout_s, profile.defaults.timeout_s)) b.WallTimeout(*v);
  if (auto v = pick(request.cpu_time_s, profile.defaults.cpu_time_s)) b.CpuTime(*v);
  if (auto v = pick(request.memory_bytes, profile.defaults.memory_bytes)) b.Memory(*v);
  if (auto v = pick(request.cpus, profile.defaults.cpus)) b.Cpus(*v);
  if (auto v = pick(request.pids, profile.defaults.pids)) b.Pids(*v);
  if (auto v = pick(request.output_bytes, profile.defaults.output_bytes)) b.OutputLimit(*v);
  if (auto v = pick(request.disk_bytes, profile.defaults.disk_bytes)) b.Disk(*v);
  b.Imports(profile.imports);
  b.Preload(profile.preload);
  if (profile.max_images) b.MaxImages(*profile.max_images);
  if (profile.max_image_bytes) b.MaxImageBytes(*profile.max_image_bytes);
  for (const auto& m : profile.mounts) b.AddReadOnlyMount(m);
  return b;
}

}  // namespace kiln::config
