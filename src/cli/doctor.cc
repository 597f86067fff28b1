// kiln doctor: which isolation layers this host really gives, and whether
// kiln will run here in its strict default. It tries each mechanism, then runs
// one real sandbox end to end. With --server URL it also shows a running
// kiln serve's warm pool (its GET /readyz).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/units.h"
#include "cli/commands.h"
#include "config/config.h"
#include "isolation/host_probe.h"
#include "isolation/mount_ns.h"
#include "mcp/http_backend.h"
#include "policy/policy.h"
#include "supervisor/gvisor.h"
#include "supervisor/sandbox.h"
#include "zygote/handoff.h"

namespace kiln::cli {
namespace {

using isolation::LayerReport;
using isolation::LayerState;

struct DoctorFlags {
  bool json = false;
  bool no_smoke = false;
  std::string server;  // --server URL: a running kiln serve's pool too
};

// The built-in default profile's I/O caps, "read 256 MiB/s, 8000 iops; ...".
std::string DescribeIo(const policy::IoLimits& io) {
  auto rate = [](uint64_t bps) { return bps == 0 ? std::string("max") : FormatSize(bps) + "/s"; };
  auto ops = [](uint64_t n) { return n == 0 ? std::string("max") : std::to_string(n); };
  return "read " + rate(io.read_bps) + ", " + ops(io.read_iops) + " iops; write " +
         rate(io.write_bps) + ", " + ops(io.write_iops) + " iops";
}

// The default profile's limits (the built-in kiln.toml), as a sandbox gets them.
policy::Limits DefaultProfileLimits() {
  const config::Config& c = config::BuiltinConfig();
  auto profile = c.Find(c.server.default_profile);
  if (!profile.ok()) return {};
  auto b = config::PolicyFor(**profile, {});
  if (!b.ok()) return {};
  auto pol = b->Build();
  return pol.ok() ? pol->limits() : policy::Limits{};
}

// The block devices a default sandbox reads from: its mount plan's binds.
Result<std::vector<isolation::BlockDevice>> DefaultSandboxIoDevices(
    const supervisor::HostContext& host) {
  isolation::MountLayout layout;
  layout.runtime_dir = host.runtime_dir;
  layout.workspace_bytes = layout.tmp_bytes = layout.shm_bytes = 1 << 20;
  KILN_ASSIGN_OR_RETURN(isolation::MountPlan plan, isolation::BuildMountPlan(layout));
  return supervisor::SandboxIoDevices(plan);
}

// What the gVisor backend gives a sandbox, and what of the native jail's it
// does not (docs/threat-model.md, "The gVisor backend").
const char* const kGvisorProvides[] = {
    "system calls answered by the Sentry (gVisor's kernel in user space, itself under seccomp)",
    "files through the gofer; a read-only root of the allow-listed host paths",
    "size-capped tmpfs /workspace, /tmp, /dev/shm",
    "no network (--network=none, an empty network namespace)",
    "uid 1000, no capabilities, no_new_privs",
    "cgroup memory (no swap), pids and cpu around runsc, its gofer and the Sentry",
    "kiln's wall clock, cpu time and output caps"};
const char* const kGvisorLacks[] = {
    "kiln's seccomp allow-list and Landlock (the Sentry's own filter instead)",
    "block I/O caps (io limits)", "the warm pool (gVisor sandboxes start cold)"};

// The gVisor backend's layer: runsc found and runnable by kiln (root,
// cgroups), and with `smoke` a real sandbox on it. Never required: only
// profiles with backend = "gvisor" need it, and they are refused without it.
LayerReport GvisorLayer(const Result<supervisor::HostContext>& host, bool smoke,
                        nlohmann::json* report) {
  LayerReport l{"gvisor backend", LayerState::kMissing, "", false};
  nlohmann::json& g = *report;
  g = {{"usable", false}, {"platform", supervisor::kGvisorPlatform}};
  g["provides"] = kGvisorProvides;
  g["not_applied"] = kGvisorLacks;
  if (!host.ok()) {
    l.detail = "not probed: " + host.error().ToString();
    g["reason"] = l.detail;
    return l;
  }
  const supervisor::GvisorHost& probe = supervisor::ProbeGvisorHost(*host);
  g["runsc"] = probe.runsc;
  g["version"] = probe.version;
  if (probe.missing) {
    l.detail = "profiles with backend = \"gvisor\" are refused: " + *probe.missing;
    g["reason"] = *probe.missing;
    return l;
  }
  const std::string what =
      probe.version + " (" + probe.runsc + "), platform " + supervisor::kGvisorPlatform;
  if (!smoke) {
    l.state = LayerState::kAvailable;
    l.detail = what + "; smoke run skipped (--no-smoke)";
    g["usable"] = true;
    return l;
  }
  policy::PolicyBuilder b;
  b.WallTimeout(30).JailBackend(policy::Backend::kGvisor);
  auto pol = b.Build();
  supervisor::Program prog{
      "<doctor>", "import os\nprint('kiln-ok', 6 * 7, os.uname().release)\n", {}};
  auto res = supervisor::RunSandboxed(*host, *pol, prog, {});
  const std::string prefix = "kiln-ok 42 ";
  if (!res.ok()) {
    l.detail = what + "; smoke run refused: " + res.error().ToString();
  } else if (res->outcome == supervisor::Outcome::kOk && res->stdout_data.rfind(prefix, 0) == 0) {
    std::string kernel = res->stdout_data.substr(prefix.size());
    while (!kernel.empty() && kernel.back() == '\n') kernel.pop_back();
    const double start_ms = res->phases.plan_ms + res->phases.cgroup_ms + res->phases.clone_ms +
                            res->phases.child_setup_ms + res->phases.start_ms;
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "; print() under gVisor (Sentry kernel %s) took %.0f ms to start", kernel.c_str(),
                  start_ms);
    l.state = LayerState::kAvailable;
    l.detail = what + buf + "; adds the Sentry between the program and the host kernel";
    g["usable"] = true;
    g["sentry_kernel"] = kernel;
    g["smoke_start_ms"] = start_ms;
  } else {
    l.detail = what + "; smoke run: " + std::string(supervisor::ToString(res->outcome)) + ": " +
               res->reason + " " + res->stderr_data.substr(0, 300);
  }
  if (!g["usable"].get<bool>()) g["reason"] = l.detail;
  return l;
}

}  // namespace

nlohmann::json DoctorReport(bool smoke_test) {
  DoctorFlags f;
  f.no_smoke = !smoke_test;
  std::vector<LayerReport> layers = isolation::ProbeNamespacesAndKernel();
  auto host = supervisor::LoadHostContext();

  LayerReport cg{"cgroup", LayerState::kMissing, "", ::geteuid() == 0};
  LayerReport rt{"runtime", LayerState::kMissing, "", true};
  // Best effort (docs/threat-model.md): a sandbox without them still runs.
  LayerReport io{"io limits", LayerState::kDegraded, "", false};
  if (host.ok()) {
    const auto& m = *host->cgroups;
    std::string ctrls;
    for (const auto& c : m.controllers()) ctrls += (ctrls.empty() ? "" : ",") + c;
    cg.detail = m.reason();
    if (m.mode() == isolation::CgroupMode::kNone) {
      cg.detail += "; falls back to rlimits (RLIMIT_DATA, RLIMIT_NPROC, RLIMIT_CPU)";
      if (::geteuid() != 0) cg.state = LayerState::kDegraded;
      io.detail = "no cgroups here, so no I/O limits";
    } else {
      // Really create one, with the default profile's I/O caps on the devices
      // a default sandbox reads: detection says what is mounted, not what we
      // may use.
      isolation::CgroupLimits probe_limits{64ULL << 20, 16, 0.5, {}, {}};
      const policy::IoLimits caps = DefaultProfileLimits().io;
      probe_limits.io = {caps.read_bps, caps.write_bps, caps.read_iops, caps.write_iops};
      auto devices = DefaultSandboxIoDevices(*host);
      if (devices.ok()) probe_limits.io_devices = *devices;
      auto probe =
          host->cgroups->Create("doctor-probe-" + std::to_string(::getpid()), probe_limits);
      if (probe.ok()) {
        cg.state = LayerState::kAvailable;
        cg.detail = std::string(isolation::ToString(m.mode())) + " (" + ctrls + "): " + m.reason();
        const std::string& note = (*probe)->io_note();
        if (!devices.ok()) {
          io.detail = "cannot plan a sandbox's mounts: " + devices.error().ToString();
        } else if (note.rfind("io limits on ", 0) == 0) {
          io.state = LayerState::kAvailable;
          io.detail = note + ": " + DescribeIo(caps) + " (the default profile's)";
        } else {
          io.detail = note + "; sandboxes run without I/O limits";
        }
        (void)(*probe)->Remove();
      } else {
        cg.state = ::geteuid() == 0 ? LayerState::kMissing : LayerState::kDegraded;
        cg.detail = "cannot create a sandbox cgroup: " + probe.error().ToString() +
                    "; falls back to rlimits (RLIMIT_DATA, RLIMIT_NPROC, RLIMIT_CPU)";
        io.detail = "no sandbox cgroup here, so no I/O limits";
      }
    }
    rt.state = LayerState::kAvailable;
    rt.detail = host->runtime_dir;
  } else {
    rt.detail = host.error().ToString();
    cg.detail = "not probed: " + host.error().ToString();
    io.detail = "not probed: " + host.error().ToString();
  }
  layers.push_back(cg);
  layers.push_back(io);
  layers.push_back(rt);
  // The warm pool (docs/adr/0011-zygote.md) of kiln serve with the built-in
  // configuration: what this host allows; a configuration may still turn it off.
  LayerReport pool{"warm pool", LayerState::kDegraded, "", false};
  if (host.ok()) {
    const auto why_not = zygote::PoolUnavailableReason(config::BuiltinConfig(), *host);
    pool.state = why_not ? LayerState::kDegraded : LayerState::kAvailable;
    pool.detail =
        why_not ? "executions and sessions start cold: " + *why_not
                : "kiln serve pre-forks sandboxes per profile (live: kiln doctor --server URL)";
  } else {
    pool.detail = "not probed: " + host.error().ToString();
  }
  layers.push_back(pool);
  // Executable memfds off in each sandbox's pid namespace (child_steps.h).
  LayerReport memfd{"memfd noexec", LayerState::kDegraded, "", false};
  if (::access("/proc/sys/vm/memfd_noexec", F_OK) != 0) {
    memfd.detail =
        "the kernel has no vm.memfd_noexec (Linux < 6.3): code written to a memfd can be exec'd";
  } else if (::geteuid() != 0) {
    memfd.detail =
        "only a root kiln sets vm.memfd_noexec = 2 in its sandboxes: code written to a memfd can "
        "be exec'd";
  } else {
    memfd.state = LayerState::kAvailable;
    memfd.detail = "vm.memfd_noexec = 2 in every sandbox's pid namespace";
  }
  layers.push_back(memfd);

  LayerReport smoke{"sandbox smoke test", LayerState::kMissing, "", true};
  if (f.no_smoke) {
    smoke.state = LayerState::kDegraded;
    smoke.detail = "skipped (--no-smoke)";
  } else if (host.ok()) {
    policy::PolicyBuilder b;
    b.WallTimeout(30);
    if (::geteuid() != 0) b.CgroupRequirement(policy::Requirement::kBestEffort);
    auto pol = b.Build();
    if (Status s = supervisor::EnsureFontCache(*host); !s.ok()) {
      layers.push_back(
          {"matplotlib font cache", LayerState::kDegraded, s.error().ToString(), false});
    } else {
      layers.push_back({"matplotlib font cache", LayerState::kAvailable,
                        host->cache_dir + "/matplotlib", false});
    }
    supervisor::Program prog{"<doctor>", "print('kiln-ok', 6 * 7)\n", {}};
    auto res = supervisor::RunSandboxed(*host, *pol, prog, {});
    if (!res.ok()) {
      smoke.detail = "refused: " + res.error().ToString();
    } else if (res->outcome == supervisor::Outcome::kOk && res->stdout_data == "kiln-ok 42\n") {
      smoke.state = LayerState::kAvailable;
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "print() in a full sandbox (%s) took %.1f ms setup, %.1f ms run",
                    res->limits_backend.c_str(), res->phases.child_setup_ms + res->phases.exec_ms,
                    res->duration_ms);
      smoke.detail = buf;
    } else {
      smoke.detail = std::string(supervisor::ToString(res->outcome)) + ": " + res->reason + " " +
                     res->stderr_data.substr(0, 500);
    }
  } else {
    smoke.detail = "not run: " + host.error().ToString();
  }
  layers.push_back(smoke);
  nlohmann::json gvisor;
  layers.push_back(GvisorLayer(host, !f.no_smoke, &gvisor));

  bool verdict = true;
  std::string missing, degraded;
  for (const auto& l : layers) {
    if (l.required && l.state == LayerState::kMissing) {
      verdict = false;
      missing += (missing.empty() ? "" : ", ") + l.name;
    }
    if (l.state == LayerState::kDegraded) degraded += (degraded.empty() ? "" : ", ") + l.name;
  }
  std::string verdict_text =
      verdict ? "kiln will run here in its strict default"
              : "kiln will NOT run here in its strict default; missing: " + missing;
  if (verdict && !degraded.empty()) verdict_text += ", with degraded layers: " + degraded;
  nlohmann::json j;
  j["layers"] = nlohmann::json::array();
  for (const auto& l : layers) {
    j["layers"].push_back({{"name", l.name},
                           {"state", std::string(isolation::ToString(l.state))},
                           {"required", l.required},
                           {"detail", l.detail}});
  }
  j["ready"] = verdict;
  j["verdict"] = verdict_text;
  j["gvisor"] = gvisor;
  return j;
}

namespace {

// A running server's pool, from its GET /readyz ("pool": Spawner::PoolStatus).
Result<nlohmann::json> ServerPool(const std::string& url) {
  auto got = mcp::HttpBackend::GetPublic(url, "/readyz", std::chrono::seconds(10));
  if (!got.ok()) {
    Error e = std::move(got).error();
    if (e.code == Code::kInvalidArgument) e.message = "--server: " + e.message;
    return e;
  }
  const auto body = nlohmann::json::parse(got->second, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("pool") || !body["pool"].is_object()) {
    return MakeError(Code::kUnavailable,
                     url + "/readyz answered " + std::to_string(got->first) +
                         " without a pool status (not kiln serve, or an older one)");
  }
  return body["pool"];
}

// "default: 2 ready, 0 refilling, 1 in use (target 2); 41 taken, 3 started cold;
// refill 38 ms (last), 42 ms (mean); 0 failed, 1 zygote start"
std::string DescribePool(const std::string& name, const nlohmann::json& p) {
  auto num = [&p](const char* k) { return p.value(k, 0.0); };
  char buf[400];
  const double refills = num("refills");
  std::snprintf(
      buf, sizeof buf,
      "%s: %.0f ready, %.0f refilling, %.0f in use (target %.0f); %.0f taken, %.0f started cold; "
      "refill %.0f ms (last), %.0f ms (mean); %.0f failed, %.0f zygote start(s)%s",
      name.c_str(), num("ready"), num("refilling"), num("in_use"), num("target"), num("hits"),
      num("cold_fallbacks"), num("last_refill_ms"),
      refills > 0 ? num("refill_ms_total") / refills : 0.0, num("failures"), num("zygote_starts"),
      p.value("zygote_ready", false) ? "" : "; zygote not ready");
  return buf;
}

int DoDoctor(const DoctorFlags& f) {
  nlohmann::json j = DoctorReport(!f.no_smoke);
  std::optional<Error> server_error;
  if (!f.server.empty()) {
    auto pool = ServerPool(f.server);
    if (pool.ok()) {
      j["server"] = {{"url", f.server}, {"pool", *pool}};
    } else {
      server_error = pool.error();
      j["server"] = {{"url", f.server}, {"error", pool.error().ToString()}};
    }
  }
  if (f.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    for (const auto& l : j["layers"]) {
      std::cout << std::left << std::setw(22) << l["name"].get<std::string>() << std::setw(11)
                << l["state"].get<std::string>() << l["detail"].get<std::string>() << "\n";
    }
    if (!f.server.empty()) {
      std::cout << "\nserver " << f.server << "\n";
      if (server_error) {
        std::cout << "  " << server_error->ToString() << "\n";
      } else {
        const auto& pool = j["server"]["pool"];
        if (!pool.value("enabled", false)) {
          const auto& why = pool["reason"];
          std::cout << "  warm pool off: " << (why.is_string() ? why.get<std::string>() : "?")
                    << "\n";
        } else if (!pool.value("running", false)) {
          std::cout << "  warm pool: its process is not running (restarting)\n";
        }
        const nlohmann::json profiles = pool.value("profiles", nlohmann::json::object());
        for (const auto& [name, p] : profiles.items()) {
          std::cout << "  " << DescribePool(name, p) << "\n";
        }
      }
    }
    std::cout << "\nverdict: " << j["verdict"].get<std::string>() << "\n";
  }
  if (server_error) return 2;
  return j["ready"].get<bool>() ? 0 : 1;
}

}  // namespace

void RegisterDoctor(CLI::App& app, Action* action) {
  auto flags = std::make_shared<DoctorFlags>();
  CLI::App* doctor = app.add_subcommand("doctor", "Report which isolation layers this host gives");
  doctor->add_flag("--json", flags->json, "Print the report as JSON");
  doctor->add_flag("--no-smoke", flags->no_smoke, "Do not run a real sandbox");
  doctor->add_option("--server", flags->server,
                     "Also show the warm pool of the kiln serve at this URL (http://HOST:PORT)");
  doctor->callback([flags, action] { *action = [flags] { return DoDoctor(*flags); }; });
}

}  // namespace kiln::cli
