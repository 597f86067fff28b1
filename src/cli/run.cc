// kiln run: one program in one fresh sandbox, no server.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/base64.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/pool.h"
#include "config/config.h"
#include "policy/policy.h"
#include "supervisor/sandbox.h"

namespace kiln::cli {
namespace {

struct RunFlags {
  std::string timeout, cpu_time, memory, output_limit, disk;
  double cpus = 0;
  bool cpus_set = false;
  uint64_t pids = 0;
  std::vector<std::string> files;
  std::string collect;
  bool json = false;
  bool via_pool = false;
  std::string code;
  bool code_set = false;
  std::string target;  // FILE or "-"
  std::string config;
  std::string profile = "default";
  std::string backend;  // empty: the profile's
};

int UsageError(const std::string& message) {
  std::cerr << "kiln run: " << message << "\n";
  return kExitUsage;
}

// Policy errors name the field ("memory: ..."); on the command line, name the flag.
std::string AsFlag(std::string message) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"timeout:", "--timeout:"}, {"cpu_time:", "--cpu-time:"},
      {"memory:", "--memory:"},   {"cpus:", "--cpus:"},
      {"pids:", "--pids:"},       {"output_limit:", "--output-limit:"},
      {"disk:", "--disk:"},       {"file:", "--file:"}};
  for (const auto& [field, flag] : kFlags) {
    if (message.rfind(field, 0) == 0) return flag + message.substr(std::string(field).size());
  }
  return message;
}

void PrintRefusal(const Error& e, bool json) {
  if (json) {
    nlohmann::json j;
    j["status"] = "setup_error";
    j["setup_error"] = {
        {"step", std::string(ToString(e.step))}, {"errno", e.sys_errno}, {"message", e.ToString()}};
    std::cout << j.dump() << "\n";
  } else {
    std::cerr << "kiln run: refused: " << e.ToString() << "\n";
  }
}

// Plain mode shows what a terminal can: the last value on stdout (as Python's
// REPL would), the traceback on stderr (as `python3 FILE` would), and images
// as files in the --collect directory (output-N.png), or a note saying where
// they went.
void ShowRichOutputs(const supervisor::ExecutionResult& r, const std::string& collect_dir) {
  int image_no = 0, images_not_shown = 0;
  for (const auto& o : r.outputs) {
    const std::string type = o.value("output_type", "");
    if (type == "execute_result" && o["data"].contains("text/plain")) {
      std::cout << o["data"]["text/plain"].get<std::string>() << "\n";
    }
    if ((type == "display_data" || type == "execute_result") && o["data"].contains("image/png")) {
      ++image_no;
      if (collect_dir.empty()) {
        ++images_not_shown;
        continue;
      }
      auto png = Base64Decode(o["data"]["image/png"].get<std::string>());
      const std::string path = collect_dir + "/output-" + std::to_string(image_no) + ".png";
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      if (!png.ok() || !out.write(png->data(), static_cast<std::streamsize>(png->size()))) {
        std::cerr << "kiln: cannot write " << path << "\n";
      } else {
        std::cerr << "kiln: image written to " << path << "\n";
      }
    } else if (type == "display_data" && o["data"].contains("text/plain")) {
      std::cout << o["data"]["text/plain"].get<std::string>() << "\n";
    }
  }
  std::cout.flush();
  if (r.error) {
    for (const auto& line : r.error->traceback) std::cerr << line;
    if (!r.error->traceback.empty() && r.error->traceback.back().back() != '\n') std::cerr << "\n";
  }
  if (images_not_shown > 0) {
    std::cerr << "kiln: " << images_not_shown
              << " image(s) not shown: use --collect DIR to save them, or --json\n";
  }
  if (r.outputs_dropped > 0) {
    std::cerr << "kiln: " << r.outputs_dropped << " rich output(s) dropped (image limits)\n";
  }
}

int DoRun(const RunFlags& f) {
  // First thing: on cgroup v1, start the slow first attach's grace period now,
  // so it has passed by the time the sandbox needs its cgroup (ADR 0004).
  const pid_t warm_up = supervisor::StartEarlyCgroupWarmUp();
  Cleanup reap_warm_up([warm_up] { supervisor::FinishCgroupWarmUp(warm_up); });
  // --- The program.
  const int sources = (f.code_set ? 1 : 0) + (f.target.empty() ? 0 : 1);
  if (sources != 1) return UsageError("give exactly one of FILE, -c CODE, or - (stdin)");
  supervisor::Program program;
  if (f.code_set) {
    program.filename = "<string>";
    program.source = f.code;
  } else if (f.target == "-") {
    program.filename = "<stdin>";
    program.source.assign(std::istreambuf_iterator<char>(std::cin),
                          std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(f.target, std::ios::binary);
    if (!in) return UsageError("cannot read '" + f.target + "': " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    program.source = ss.str();
    const auto slash = f.target.find_last_of('/');
    program.filename = slash == std::string::npos ? f.target : f.target.substr(slash + 1);
  }

  // --- The policy: the profile's defaults and maximums, the flags on top;
  // every value goes through the builder, which validates.
  config::Config loaded;
  const config::Config* cfg = &config::BuiltinConfig();
  if (!f.config.empty()) {
    auto c = config::LoadConfigFile(f.config);
    if (!c.ok()) return UsageError("--config: " + c.error().message);
    loaded = std::move(*c);
    cfg = &loaded;
  }
  auto profile = cfg->Find(f.profile);
  if (!profile.ok()) return UsageError("--profile: " + profile.error().message);
  config::LimitSpec request;
  if (!f.timeout.empty()) {
    auto s = ParseSeconds(f.timeout);
    if (!s.ok()) return UsageError("--timeout: " + s.error().message);
    request.timeout_s = *s;
  }
  if (!f.cpu_time.empty()) {
    auto s = ParseSeconds(f.cpu_time);
    if (!s.ok()) return UsageError("--cpu-time: " + s.error().message);
    request.cpu_time_s = *s;
  }
  struct SizeFlag {
    const std::string& text;
    const char* name;
    std::optional<uint64_t>* target;
  };
  const SizeFlag sizes[] = {
      {f.memory, "--memory", &request.memory_bytes},
      {f.output_limit, "--output-limit", &request.output_bytes},
      {f.disk, "--disk", &request.disk_bytes},
  };
  for (const auto& s : sizes) {
    if (s.text.empty()) continue;
    auto v = ParseSize(s.text);
    if (!v.ok()) return UsageError(std::string(s.name) + ": " + v.error().message);
    *s.target = *v;
  }
  if (f.cpus_set) request.cpus = f.cpus;
  if (f.pids != 0) request.pids = f.pids;
  auto builder = config::PolicyFor(**profile, request);
  if (!builder.ok()) return UsageError(AsFlag(builder.error().message));
  policy::PolicyBuilder& b = *builder;
  if (!f.backend.empty()) {
    if (f.backend != "native" && f.backend != "gvisor")
      return UsageError("--backend: must be native or gvisor, not '" + f.backend + "'");
    b.JailBackend(f.backend == "gvisor" ? policy::Backend::kGvisor : policy::Backend::kNative);
  }
  if (f.via_pool && (f.backend == "gvisor" ||
                     (f.backend.empty() && (*profile)->backend == policy::Backend::kGvisor)))
    return UsageError("--pool: the warm pool's sandboxes are native jails, not gvisor");
  for (const auto& spec : f.files) {
    // HOST[:NAME]: the last ':' splits, unless what follows it has a '/'
    // (then it is part of the host path).
    std::string host = spec, name;
    const auto colon = spec.rfind(':');
    if (colon != std::string::npos && spec.find('/', colon) == std::string::npos) {
      host = spec.substr(0, colon);
      name = spec.substr(colon + 1);
    }
    if (::access(host.c_str(), R_OK) != 0) {
      const int err = errno;
      const auto c = spec.rfind(':');
      if (c != std::string::npos && host == spec &&
          ::access(spec.substr(0, c).c_str(), R_OK) == 0) {
        return UsageError("--file: NAME '" + spec.substr(c + 1) +
                          "' must be a single file name (no '/')");
      }
      return UsageError("--file: cannot read '" + host + "': " + std::strerror(err));
    }
    b.AddFile(host, name);
  }
  // As an unprivileged user there may be no cgroup to use: fall back to
  // rlimits and say so. As root (the deployment), cgroups are required.
  if (::geteuid() != 0) b.CgroupRequirement(policy::Requirement::kBestEffort);
  auto built = b.Build();
  if (!built.ok()) return UsageError(AsFlag(built.error().message));

  auto host = supervisor::LoadHostContext();
  if (!host.ok()) {
    PrintRefusal(host.error(), f.json);
    return kExitRefused;
  }
  if (Status s = supervisor::EnsureFontCache(*host); !s.ok()) {
    KILN_LOG_WARN("no matplotlib font cache ({}); imports of matplotlib will be slow",
                  s.error().ToString());
  }
  supervisor::RunOptions options;
  options.warm_up_started = warm_up > 0;
  if (!f.collect.empty()) options.collect_dir = f.collect;
  auto result = f.via_pool ? RunViaPool(*host, *built, program, options)
                           : supervisor::RunSandboxed(*host, *built, program, options);
  if (!result.ok()) {
    PrintRefusal(result.error(), f.json);
    return result.error().code == Code::kInvalidArgument ? kExitUsage : kExitRefused;
  }
  const supervisor::ExecutionResult& r = *result;
  if (f.json) {
    std::cout << supervisor::ToJson(r, options.collect_dir.has_value())
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    return 0;
  }
  std::fwrite(r.stdout_data.data(), 1, r.stdout_data.size(), stdout);
  std::fflush(stdout);
  std::fwrite(r.stderr_data.data(), 1, r.stderr_data.size(), stderr);
  ShowRichOutputs(r, f.collect);
  for (const auto& skipped : r.collect_skipped)
    std::cerr << "kiln: not collected: " << skipped << "\n";
  if (!r.collect_error.empty())
    std::cerr << "kiln: collecting files failed: " << r.collect_error << "\n";
  if (r.stdout_truncated) std::cerr << "\nkiln: stdout truncated (--output-limit)\n";
  if (r.stderr_truncated) std::cerr << "\nkiln: stderr truncated (--output-limit)\n";
  if (r.outcome != supervisor::Outcome::kOk && r.outcome != supervisor::Outcome::kError) {
    std::cerr << "kiln: " << supervisor::ToString(r.outcome) << ": " << r.reason << "\n";
  }
  return supervisor::PlainExitCode(r);
}

}  // namespace

void RegisterRun(CLI::App& app, Action* action) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* run = app.add_subcommand("run", "Run a Python program in a fresh sandbox");
  run->add_option("--timeout", flags->timeout,
                  "Wall-clock limit (seconds; '500ms', '2m'); default 30");
  run->add_option("--cpu-time", flags->cpu_time,
                  "CPU-time limit, all processes; default = timeout");
  run->add_option("--memory", flags->memory, "Memory limit ('512m', '1G'); default 512m, no swap");
  run->add_option("--cpus", flags->cpus, "CPU quota in cores (e.g. 0.5); default 1")
      ->each([flags](const std::string&) { flags->cpus_set = true; });
  run->add_option("--pids", flags->pids, "Process and thread limit; default 256");
  run->add_option("--output-limit", flags->output_limit, "Cap per stream ('1m'); default 1m");
  run->add_option("--disk", flags->disk, "Workspace size ('128m'); default 128m");
  run->add_option("--file", flags->files, "HOST[:NAME]: copy a host file into the workspace");
  run->add_option("--collect", flags->collect, "Copy the workspace's files here afterwards");
  run->add_flag("--json", flags->json, "Print one JSON object with the whole result");
  // Hidden (empty group): the program runs in a sandbox forked from a zygote
  // made for this run, for the pool-path test tiers.
  run->add_flag("--pool", flags->via_pool, "Run in a pooled sandbox")->group("");
  run->add_option("--config", flags->config, "kiln.toml with the profiles (default: built-in)");
  run->add_option("--profile", flags->profile, "Profile to run under (default: 'default')");
  run->add_option("--backend", flags->backend,
                  "Sandbox backend: native or gvisor (default: the profile's `backend`)");
  run->add_option("-c", flags->code, "Program text")->each([flags](const std::string&) {
    flags->code_set = true;
  });
  run->add_option("target", flags->target, "FILE to run, or - for stdin");
  run->callback([flags, action] { *action = [flags] { return DoRun(*flags); }; });
}

}  // namespace kiln::cli
