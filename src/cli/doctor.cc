// kiln doctor: which isolation layers this host really gives, and whether
// kiln will run here in its strict default. It tries each mechanism, then runs
// one real sandbox end to end.
#include <unistd.h>

#include <iomanip>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "isolation/host_probe.h"
#include "policy/policy.h"
#include "supervisor/sandbox.h"

namespace kiln::cli {
namespace {

using isolation::LayerReport;
using isolation::LayerState;

struct DoctorFlags {
  bool json = false;
  bool no_smoke = false;
};

}  // namespace

nlohmann::json DoctorReport(bool smoke_test) {
  DoctorFlags f;
  f.no_smoke = !smoke_test;
  std::vector<LayerReport> layers = isolation::ProbeNamespacesAndKernel();
  auto host = supervisor::LoadHostContext();

  LayerReport cg{"cgroup", LayerState::kMissing, "", ::geteuid() == 0};
  LayerReport rt{"runtime", LayerState::kMissing, "", true};
  if (host.ok()) {
    const auto& m = *host->cgroups;
    std::string ctrls;
    for (const auto& c : m.controllers()) ctrls += (ctrls.empty() ? "" : ",") + c;
    cg.detail = m.reason();
    if (m.mode() == isolation::CgroupMode::kNone) {
      cg.detail += "; falls back to rlimits (RLIMIT_DATA, RLIMIT_NPROC, RLIMIT_CPU)";
      if (::geteuid() != 0) cg.state = LayerState::kDegraded;
    } else {
      // Really create one: detection says what is mounted, not what we may use.
      auto probe = host->cgroups->Create("doctor-probe-" + std::to_string(::getpid()),
                                         {64ULL << 20, 16, 0.5});
      if (probe.ok()) {
        cg.state = LayerState::kAvailable;
        cg.detail = std::string(isolation::ToString(m.mode())) + " (" + ctrls + "): " + m.reason();
        (void)(*probe)->Remove();
      } else {
        cg.state = ::geteuid() == 0 ? LayerState::kMissing : LayerState::kDegraded;
        cg.detail = "cannot create a sandbox cgroup: " + probe.error().ToString() +
                    "; falls back to rlimits (RLIMIT_DATA, RLIMIT_NPROC, RLIMIT_CPU)";
      }
    }
    rt.state = LayerState::kAvailable;
    rt.detail = host->runtime_dir;
  } else {
    rt.detail = host.error().ToString();
    cg.detail = "not probed: " + host.error().ToString();
  }
  layers.push_back(cg);
  layers.push_back(rt);

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
      layers.push_back({"matplotlib font cache", LayerState::kDegraded, s.error().ToString(), false});
    } else {
      layers.push_back({"matplotlib font cache", LayerState::kAvailable, host->cache_dir + "/matplotlib", false});
    }
    supervisor::Program prog{"<doctor>", "print('kiln-ok', 6 * 7)\n", {}};
    auto res = supervisor::RunSandboxed(*host, *pol, prog, {});
    if (!res.ok()) {
      smoke.detail = "refused: " + res.error().ToString();
    } else if (res->outcome == supervisor::Outcome::kOk && res->stdout_data == "kiln-ok 42\n") {
      smoke.state = LayerState::kAvailable;
      char buf[160];
      std::snprintf(buf, sizeof buf, "print() in a full sandbox (%s) took %.1f ms setup, %.1f ms run",
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
  return j;
}

namespace {

int DoDoctor(const DoctorFlags& f) {
  const nlohmann::json j = DoctorReport(!f.no_smoke);
  if (f.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    for (const auto& l : j["layers"]) {
      std::cout << std::left << std::setw(22) << l["name"].get<std::string>() << std::setw(11)
                << l["state"].get<std::string>() << l["detail"].get<std::string>() << "\n";
    }
    std::cout << "\nverdict: " << j["verdict"].get<std::string>() << "\n";
  }
  return j["ready"].get<bool>() ? 0 : 1;
}

}  // namespace

void RegisterDoctor(CLI::App& app, Action* action) {
  auto flags = std::make_shared<DoctorFlags>();
  CLI::App* doctor = app.add_subcommand("doctor", "Report which isolation layers this host gives");
  doctor->add_flag("--json", flags->json, "Print the report as JSON");
  doctor->add_flag("--no-smoke", flags->no_smoke, "Do not run a real sandbox");
  doctor->callback([flags, action] { *action = [flags] { return DoDoctor(*flags); }; });
}

}  // namespace kiln::cli
