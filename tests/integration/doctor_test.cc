// Integration tier: `kiln doctor` on this host, which gives every layer
// (user namespaces as root, cgroup v1 controllers, Landlock ABI 7, seccomp).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class Doctor : public SandboxTest {};

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
    // Everything this host has: each layer must be available, not degraded.
    EXPECT_EQ(layer.value("state", ""), "available") << name << ": " << layer.dump();
  }
  for (const char* expected :
       {"user namespace", "pid namespace", "mount namespace", "network namespace", "ipc namespace",
        "uts namespace", "cgroup namespace", "seccomp", "no_new_privs", "landlock", "cgroup",
        "runtime", "sandbox smoke test"}) {
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
