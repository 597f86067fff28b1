// Integration tier (an escape test seen from the host): no process of a
// sandbox holds anything of the server's data directory (the SQLite store of
// keys and audit rows). `kiln serve` used to open the store before forking
// its spawner; supervisors, the pool process and cold pid 1 are forks that
// never exec, so pid 1 of every cold sandbox held kiln.db, -wal and -shm and
// mapped the -shm read-write. Checked from outside (root reads /proc of
// every process under the spawner), for a cold session and a pooled one-shot.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"
#include "testlib/procs.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;

// "comm[pid]: what" for each fd or mapping of `pid` naming something under `dir`.
std::vector<std::string> HoldsOf(const ProcInfo& p, const std::string& dir) {
  std::vector<std::string> found;
  const std::string base = "/proc/" + std::to_string(p.pid);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(base + "/fd", ec)) {
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().find(dir) != std::string::npos) {
      found.push_back(p.comm + "[" + std::to_string(p.pid) + "]: fd " + target.string());
    }
  }
  std::istringstream maps(ReadFile(base + "/maps").value_or(""));
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(dir) != std::string::npos)
      found.push_back(p.comm + "[" + std::to_string(p.pid) + "]: " + line);
  }
  return found;
}

class ServerState : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    if (::geteuid() != 0)
      GTEST_SKIP() << "reading every sandbox process's /proc/PID/fd and maps needs root";
    WriteFile(dir_.path() + "/kiln.toml", R"TOML(
[server]
concurrency = 2
[tenants.default]
rate = 1000
burst = 1000
[pool]
max = 2
preload = ["numpy"]
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 60
memory = "256m"
)TOML");
    data_ = fs::canonical(dir_.path()).string() + "/data";
    ASSERT_TRUE(server_.Start(data_, dir_.path() + "/kiln.toml", "state", &why_)) << why_;
    key_ = Trim(server_.Stdout());
  }
  HttpResponse Post(const std::string& path, const json& body) {
    return server_.Call("POST", path, {{"Authorization", "Bearer " + key_}}, body.dump(), 120s);
  }
  // What any process under the server other than the server itself holds
  // of the data directory; and how many sandbox processes were looked at.
  std::vector<std::string> Leaks(size_t* looked_at) {
    std::vector<std::string> found;
    *looked_at = 0;
    for (const auto& p : DescendantProcs(server_.pid())) {
      ++*looked_at;
      for (auto& f : HoldsOf(p, data_)) found.push_back(std::move(f));
    }
    return found;
  }

  TempDir dir_;
  KilnServer server_;
  std::string data_, key_, why_;
};

TEST_F(ServerState, NoSandboxHoldsTheServersStore) {
  // The server itself does hold it (the check can see what it looks for).
  size_t own = 0;
  for (const auto& p : AllProcs()) {
    if (p.pid == server_.pid()) own = HoldsOf(p, data_).size();
  }
  ASSERT_GT(own, 0u) << "the server holds nothing of " << data_ << ": the check would see nothing";

  // A cold session (sessions start cold), alive while we look.
  const HttpResponse created = Post("/v1/sessions", json::object());
  ASSERT_EQ(created.status, 201) << created.Describe();
  const HttpResponse cell = Post("/v1/sessions/" + Parse(created).value("id", "") + "/execute",
                                 {{"code", "import numpy; x = 1"}});
  ASSERT_EQ(cell.status, 200) << cell.Describe();
  // A one-shot that sleeps while we look (pooled once the pool is warm).
  auto sleeper = std::async(std::launch::async, [this] {
    return Post("/v1/execute", {{"code", "import time; print('awake'); time.sleep(4)"}});
  });
  // Looked at while both run: the session's supervisor and the one-shot's.
  const bool both = kiln_server_detail::WaitFor(
      [this] {
        size_t supervisors = 0;
        for (const auto& p : DescendantProcs(server_.pid()))
          supervisors += p.comm == "kiln-supervise";
        return supervisors >= 2;
      },
      30s);
  EXPECT_TRUE(both) << "the one-shot's supervisor never showed up";
  size_t looked_at = 0;
  const auto leaks = Leaks(&looked_at);
  EXPECT_GE(looked_at, 4u) << "expected the spawner, supervisors, sandbox processes";
  std::string all;
  for (const auto& l : leaks) all += l + "\n";
  EXPECT_TRUE(leaks.empty()) << all;
  const HttpResponse slept = sleeper.get();
  EXPECT_EQ(slept.status, 200) << slept.Describe();
}

}  // namespace
}  // namespace kiln::testing
