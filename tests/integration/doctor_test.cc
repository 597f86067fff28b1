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
        "io limits", "runtime", "warm pool", "memfd noexec", "sandbox smoke test"}) {
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

}  // namespace
}  // namespace kiln::testing
