// Integration tier: `kiln doctor` on this host. Each layer's state must be
// what the host really gives, as the tests probe it themselves
// (testlib/host_facts.h): available where the host has the feature, degraded
// where kiln runs without it by design (an unprivileged user, an older
// Landlock ABI, no cgroups for a non-root user). A host without a layer that
// kiln requires skips the fixture (SandboxTest).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <utility>

#include "testlib/host_facts.h"
#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class Doctor : public SandboxTest {};

// The state doctor must report for `name` on this host, and why.
std::pair<std::string, std::string> ExpectedState(const std::string& name) {
  if (name == "user namespace") {
    return HostIsRoot() ? std::make_pair("available", "root: a host uid per sandbox")
                        : std::make_pair("degraded", "not root: sandboxes share the caller's uid");
  }
  if (name == "landlock") {
    const LandlockFact& l = HostLandlock();
    return {l.abi >= 6   ? "available"
            : l.abi >= 1 ? "degraded"
                         : "missing",
            l.detail + " (kiln wants ABI 6)"};
  }
  if (name == "cgroup") {
    // As root kiln must use the cgroups the host gives; unprivileged, it uses
    // them where it can (best effort, never "missing"), as doctor --no-smoke
    // said too (testlib: CgroupLimitsMissingReason).
    const HostFact& c = HostCgroupControllers();
    if (HostIsRoot()) return {c.present ? "available" : "missing", c.detail};
    const auto none = CgroupLimitsMissingReason();
    return {none ? "degraded" : "available", none.value_or(c.detail)};
  }
  if (name == "io limits") {
    // Best effort: degraded, never missing, where the host cannot throttle.
    const HostFact& io = HostIoThrottle();
    return {io.present ? "available" : "degraded", io.detail};
  }
  if (name == "matplotlib font cache") {
    const auto missing = PythonModulesMissingReason({"matplotlib"});
    return {missing ? "degraded" : "available", missing.value_or("matplotlib is installed")};
  }
  if (name == "memfd noexec") {
    std::error_code ec;
    if (!std::filesystem::exists("/proc/sys/vm/memfd_noexec", ec))
      return {"degraded", "Linux < 6.3"};
    return {HostIsRoot() ? "available" : "degraded",
            HostIsRoot() ? "root, Linux >= 6.3" : "not root"};
  }
  if (name == "warm pool") {
    // kiln serve's pool needs root (a host uid per sandbox) and cgroups.
    if (!HostIsRoot()) return {"degraded", "not root"};
    const HostFact& c = HostCgroupControllers();
    return {c.present ? "available" : "degraded", c.detail};
  }
  if (name == "gvisor backend") {
    // Optional (only gVisor profiles need it): missing where runsc cannot run.
    const HostFact& g = HostGvisor();
    return {g.present ? "available" : "missing", g.present ? "runsc runs here" : g.detail};
  }
  return {"available", "any Debian 12 kernel (Linux >= 6.1) has it"};
}

TEST_F(Doctor, JsonSaysReadyAndListsEveryLayer) {
  const ProcessResult p = RunKiln({"doctor", "--json"});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << p.out;
  EXPECT_EQ(j["ready"], true) << p.out;
  ASSERT_TRUE(j["layers"].is_array()) << p.out;
  std::set<std::string> names;
  for (const auto& layer : j["layers"]) {
    const std::string name = layer.value("name", "");
    names.insert(name);
    EXPECT_TRUE(layer.contains("state") && layer.contains("required") && layer.contains("detail"))
        << layer.dump();
    const auto [state, why] = ExpectedState(name);
    EXPECT_EQ(layer.value("state", ""), state)
        << name << " (host: " << why << "): " << layer.dump();
  }
  for (const char* expected :
       {"user namespace", "pid namespace", "mount namespace", "network namespace", "ipc namespace",
        "uts namespace", "cgroup namespace", "seccomp", "no_new_privs", "landlock", "cgroup",
        "io limits", "runtime", "warm pool", "memfd noexec", "sandbox smoke test",
        "gvisor backend"}) {
    EXPECT_EQ(names.count(expected), 1u) << "no layer named '" << expected << "': " << p.out;
  }
}

TEST_F(Doctor, PlainExitsZeroWithAVerdict) {
  const ProcessResult p = RunKiln({"doctor"});
  EXPECT_EQ(p.exit_code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("verdict: kiln will run here"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("landlock"), std::string::npos) << p.out;
}

TEST_F(Doctor, NoSmokeSkipsTheSandboxRun) {
  const ProcessResult p = RunKiln({"doctor", "--json", "--no-smoke"});
  const auto j = nlohmann::json::parse(p.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << p.out;
  bool seen = false;
  for (const auto& layer : j["layers"]) {
    if (layer.value("name", "") != "sandbox smoke test") continue;
    seen = true;
    EXPECT_EQ(layer.value("state", ""), "degraded") << layer.dump();
    EXPECT_EQ(layer.value("detail", ""), "skipped (--no-smoke)") << layer.dump();
  }
  EXPECT_TRUE(seen) << p.out;
}

TEST_F(Doctor, GvisorBackendIsReportedWithWhatItProvides) {
  const ProcessResult p = RunKiln({"doctor", "--json"});
  const auto j = nlohmann::json::parse(p.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << p.out;
  const auto& g = j["gvisor"];
  ASSERT_TRUE(g.is_object()) << p.out;
  EXPECT_EQ(g.value("platform", ""), "ptrace");
  EXPECT_FALSE(g["provides"].empty()) << g.dump();
  EXPECT_FALSE(g["not_applied"].empty()) << g.dump();
  if (HostGvisor().present) {
    EXPECT_EQ(g.value("usable", false), true) << g.dump();
    EXPECT_EQ(g.value("version", "").rfind("runsc version", 0), 0u) << g.dump();
    // The smoke run's program saw the Sentry's kernel, not the host's.
    EXPECT_FALSE(g.value("sentry_kernel", "").empty()) << g.dump();
    EXPECT_GT(g.value("smoke_start_ms", 0.0), 0.0) << g.dump();
  } else {
    EXPECT_EQ(g.value("usable", true), false) << g.dump();
    EXPECT_FALSE(g.value("reason", "").empty()) << g.dump();
  }
}

TEST_F(Doctor, WithoutRunscTheGvisorBackendIsMissingAndKilnStillReady) {
  ProcessOptions o;
  o.env = {{"KILN_RUNSC", "/nonexistent/runsc"}};
  const ProcessResult p = RunKiln({"doctor", "--json", "--no-smoke"}, o);
  const auto j = nlohmann::json::parse(p.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << p.out;
  EXPECT_EQ(j["gvisor"].value("usable", true), false) << p.out;
  EXPECT_NE(j["gvisor"].value("reason", "").find("KILN_RUNSC=/nonexistent/runsc"),
            std::string::npos)
      << p.out;
  bool seen = false;
  for (const auto& layer : j["layers"]) {
    if (layer.value("name", "") != "gvisor backend") continue;
    seen = true;
    EXPECT_EQ(layer.value("state", ""), "missing") << layer.dump();
    EXPECT_EQ(layer.value("required", true), false) << layer.dump();
  }
  EXPECT_TRUE(seen) << p.out;
  // Optional: the native jail's verdict does not depend on it.
  const ProcessResult with = RunKiln({"doctor", "--json", "--no-smoke"});
  const auto k = nlohmann::json::parse(with.out, nullptr, false);
  ASSERT_FALSE(k.is_discarded()) << with.out;
  EXPECT_EQ(j.value("ready", false), k.value("ready", true)) << p.out;
}

}  // namespace
}  // namespace kiln::testing
