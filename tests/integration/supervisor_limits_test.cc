// Integration tier: what a sandbox leaves behind cannot make the root
// supervisor that reads it grow without bound (the outside review's first
// finding: 20,000 symlinks with return_files grew a supervisor to 325 MB and
// its answer to 80 MB). The record of skipped files is capped, and every
// server supervisor runs under a soft RLIMIT_DATA of its own, which the
// sandbox it clones does not inherit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"
#include "testlib/procs.h"

namespace kiln::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kBuiltWithAddressSanitizer = true;
#else
constexpr bool kBuiltWithAddressSanitizer = false;
#endif

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;

// Children of `parent` whose comm is `name`.
std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name) {
  std::vector<pid_t> out;
  for (const auto& p : ChildProcs(parent, name)) out.push_back(p.pid);
  return out;
}

// The "Max data size" line of /proc/PID/limits (or of the text itself).
std::string DataLimitLine(const std::string& limits) {
  std::istringstream in(limits);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Max data size", 0) == 0) return line;
  }
  return "";
}

class SupervisorLimits : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    WriteFile(dir_.path() + "/kiln.toml", R"TOML(
[server]
concurrency = 2
[tenants.default]
rate = 1000
burst = 1000
[pool]
enabled = false
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 60
memory = "256m"
[profiles.default.max]
memory = "3g"
)TOML");
    ASSERT_TRUE(server_.Start(dir_.path() + "/data", dir_.path() + "/kiln.toml", "limits", &why_))
        << why_;
    key_ = Trim(server_.Stdout());
  }
  HttpResponse Post(const std::string& path, const json& body) {
    return server_.Call("POST", path, {{"Authorization", "Bearer " + key_}}, body.dump(), 120s);
  }

  TempDir dir_;
  KilnServer server_;
  std::string key_, why_;
};

TEST_F(SupervisorLimits, TwentyThousandSymlinksLeaveABoundedRecord) {
  const HttpResponse r =
      Post("/v1/execute", {{"code",
                            "import os\n"
                            "for i in range(20000): os.symlink('/etc/passwd', f'l{i:05}')\n"
                            "open('kept.txt', 'w').write('kept')\n"},
                           {"return_files", true}});
  ASSERT_EQ(r.status, 200) << r.Describe();
  const json j = Parse(r);
  EXPECT_EQ(j.value("status", ""), "ok") << r.Describe();
  ASSERT_TRUE(j["files_skipped"].is_array()) << r.Describe();
  EXPECT_LE(j["files_skipped"].size(), 102u);
  EXPECT_NE(j["files_skipped"].back().get<std::string>().find("more skipped"), std::string::npos)
      << j["files_skipped"].back();
  ASSERT_EQ(j["files"].size(), 1u) << r.Describe();
  EXPECT_EQ(j["files"][0].value("path", ""), "kept.txt");
  EXPECT_LT(r.body.size(), 64u << 10) << "the answer grew with the sandbox's symlinks";
}

TEST_F(SupervisorLimits, SupervisorsHaveADataLimitTheirSandboxesDoNot) {
  // Without cgroups the sandbox's RLIMIT_DATA is its memory limit instead.
  KILN_REQUIRE_CGROUP_LIMITS();
  // The kiln under test is this build: under AddressSanitizer, whose shadow
  // memory counts as data, the supervisor sets no RLIMIT_DATA
  // (spawner/supervise_main.cc, LimitOwnMemory).
  if (kBuiltWithAddressSanitizer) {
    GTEST_SKIP() << "an AddressSanitizer build's supervisors have no data limit (shadow memory)";
  }
  const HttpResponse created = Post("/v1/sessions", {{"memory", "2g"}});
  ASSERT_EQ(created.status, 201) << created.Describe();
  const std::string id = Parse(created).value("id", "");
  // The session's supervisor: kiln serve -> kiln-spawner -> kiln-supervise.
  const auto spawners = ChildrenNamed(server_.pid(), "kiln-spawner");
  ASSERT_EQ(spawners.size(), 1u);
  const auto supervisors = ChildrenNamed(spawners[0], "kiln-supervise");
  ASSERT_FALSE(supervisors.empty());
  const std::string line =
      DataLimitLine(ReadFile("/proc/" + std::to_string(supervisors[0]) + "/limits").value_or(""));
  ASSERT_FALSE(line.empty());
  std::istringstream fields(line.substr(std::string("Max data size").size()));
  std::string soft, hard;
  fields >> soft >> hard;
  EXPECT_EQ(soft, std::to_string(1ULL << 30)) << line;
  // The sandbox it cloned: no data limit of its own (the cgroup limits its
  // memory), and it can use more than the supervisor's 1 GiB.
  const HttpResponse cell =
      Post("/v1/sessions/" + id + "/execute",
           {{"code",
             "print([l for l in open('/proc/self/limits') if l.startswith('Max data size')][0])\n"
             "b = bytearray(1536 << 20)\n"
             "for i in range(0, len(b), 4096): b[i] = 1\n"
             "print(len(b) >> 20)\n"}});
  ASSERT_EQ(cell.status, 200) << cell.Describe();
  const json j = Parse(cell);
  EXPECT_EQ(j.value("status", ""), "ok") << cell.Describe();
  EXPECT_NE(j.value("stdout", "").find("unlimited"), std::string::npos) << cell.Describe();
  EXPECT_NE(j.value("stdout", "").find("1536\n"), std::string::npos) << cell.Describe();
}

}  // namespace
}  // namespace kiln::testing
