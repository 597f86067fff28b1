// Integration tier: a fleet (docs/adr/0020, docs/deploy.md). A throwaway
// PostgreSQL cluster, three `kiln serve` nodes on loopback ports sharing it,
// and HAProxy with the shipped deploy/haproxy/haproxy.cfg terminating TLS (a
// self-signed certificate made here) in front of them; clients speak HTTPS
// to HAProxy with curl. Skipped with the reason where PostgreSQL or HAProxy
// cannot start.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"
#include "testlib/pg_cluster.h"
#include "testlib/temp_dir.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kiln_server_detail::HasExited;
using kiln_server_detail::IsKey;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;
using kiln_server_detail::WaitFor;

constexpr int kNodes = 3;
constexpr double kNodeTimeoutS = 3;

struct Reply {
  int status = 0;
  std::string body;
  double seconds = 0;
  json Json() const { return json::parse(body, nullptr, false); }
  std::string Describe() const {
    return "HTTP " + std::to_string(status) + " " + body.substr(0, 500);
  }
};

class Fleet : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    for (const char* tool : {"/usr/sbin/haproxy", "/usr/bin/openssl", "/usr/bin/curl"}) {
      if (::access(tool, X_OK) != 0) GTEST_SKIP() << tool << " is not installed";
    }
    std::string why;
    pg_ = PgCluster::Start(&why);
    if (!pg_) GTEST_SKIP() << "no PostgreSQL cluster: " << why;
    auto url = pg_->CreateDatabase("fleet");
    ASSERT_TRUE(url.has_value());
    url_ = *url;
    const std::string dir = fs::canonical(dir_.path()).string();

    // One key, made once, in the shared store.
    ProcessOptions o;
    o.timeout = 30s;
    const ProcessResult created =
        RunKiln({"keys", "create", "--tenant", "acme", "--store", url_}, o);
    ASSERT_EQ(created.exit_code, 0) << created.err;
    key_ = Trim(created.out);
    ASSERT_TRUE(IsKey(key_));

    for (int i = 0; i < kNodes; ++i) {
      const std::string node = "kiln-" + std::to_string(i);
      WriteFile(dir + "/" + node + ".toml", R"TOML(
[server]
concurrency = 4
max_sessions = 20
shutdown_grace = 20
[tenants.default]
rate = 1000
burst = 1000
max_concurrent = 50
max_sessions = 20
[tenants.capped]
max_concurrent = 4
rate = 1000
burst = 1000
[tenants.metered]
max_concurrent = 50
rate = 0.001
burst = 3
[pool]
max = 1
[fleet]
node = ")TOML" + node + R"TOML("
heartbeat = 0.5
node_timeout = )TOML" + std::to_string(kNodeTimeoutS) +
                                                R"TOML(
drain_wait = 2
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 60
memory = "256m"
)TOML");
      ASSERT_TRUE(nodes_[i].Start(dir + "/data-" + node, dir + "/" + node + ".toml", node, &why,
                                  {"--store", url_}))
          << why;
    }

    // HAProxy with the shipped config, TLS with a certificate made now.
    const std::string pem = dir + "/haproxy.pem";
    const ProcessResult cert = RunProcess(
        {"/bin/sh", "-c",
         "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout '" + dir +
             "/k.pem' -out '" + dir + "/c.pem' 2>/dev/null && cat '" + dir + "/c.pem' '" + dir +
             "/k.pem' > '" + pem + "'"});
    ASSERT_EQ(cert.exit_code, 0) << cert.err;
    haproxy_port_ = FreePort();
    ProcessOptions ho;
    ho.timeout = 30min;
    ho.env = {{"KILN_HAPROXY_BIND", "127.0.0.1:" + std::to_string(haproxy_port_)},
              {"KILN_HAPROXY_CERT", pem}};
    for (int i = 0; i < kNodes; ++i) {
      ho.env.emplace_back("KILN_NODE_" + std::to_string(i),
                          "127.0.0.1:" + std::to_string(nodes_[i].port()));
    }
    const std::string cfg = SourceDir() + "/deploy/haproxy/haproxy.cfg";
    // The shipped file must be valid: that is kiln's to keep, a failure here.
    ProcessOptions co = ho;
    co.timeout = 30s;
    const ProcessResult checked = RunProcess({"/usr/sbin/haproxy", "-c", "-f", cfg}, co);
    ASSERT_EQ(checked.exit_code, 0) << "haproxy -c: " << checked.out << checked.err;
    haproxy_ = std::make_unique<Subprocess>();
    ASSERT_TRUE(haproxy_->Start({"/usr/sbin/haproxy", "-db", "-f", cfg}, ho));
    // Every node up in HAProxy's eyes: one-shots reach all of them.
    Reply ready;
    bool exited = false;
    ASSERT_TRUE(WaitFor(
        [&] {
          exited = HasExited(haproxy_->pid());
          ready = Call("GET", "/readyz");
          return ready.status == 200 || exited;
        },
        20s))
        << "HAProxy does not answer /readyz: " << ready.Describe()
        << "; node 0 directly: " << nodes_[0].Get("/readyz").Describe();
    if (exited) {
      // A valid config that cannot run here (no port, no permission): the host's, not kiln's.
      const ProcessResult r = haproxy_->Wait();
      haproxy_.reset();
      GTEST_SKIP() << "HAProxy cannot start here (exit " << r.exit_code << "): " << r.out << r.err;
    }
    std::this_thread::sleep_for(1500ms);  // rise 2 checks of every server
  }

  void TearDown() override {
    if (haproxy_ && haproxy_->pid() > 0) {
      ::kill(haproxy_->pid(), SIGTERM);
      (void)haproxy_->Wait();
    }
  }

  static uint16_t FreePort() {
    for (uint16_t p = 20000 + static_cast<uint16_t>(::getpid() % 20000);; ++p) {
      if (!CanConnect("127.0.0.1", p)) return p;
    }
  }

  // HTTPS through HAProxy (curl; the certificate is self-signed).
  Reply Call(const std::string& method, const std::string& path, const std::string& body = "",
             std::vector<std::string> headers = {}, int max_s = 90) const {
    std::vector<std::string> argv{"/usr/bin/curl",       "-sk", "-X", method, "--max-time",
                                  std::to_string(max_s), "-o",  "-",  "-w",   "\n%{http_code}"};
    if (!key_.empty()) headers.push_back("Authorization: Bearer " + key_);
    if (!body.empty()) headers.push_back("Content-Type: application/json");
    for (const auto& h : headers) argv.insert(argv.end(), {"-H", h});
    if (!body.empty()) argv.insert(argv.end(), {"--data-binary", body});
    argv.push_back("https://127.0.0.1:" + std::to_string(haproxy_port_) + path);
    ProcessOptions o;
    o.timeout = std::chrono::seconds(max_s + 10);
    const auto t0 = Clock::now();
    const ProcessResult p = RunProcess(argv, o);
    Reply r;
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const size_t nl = p.out.rfind('\n');
    if (nl == std::string::npos) return r;
    r.status = std::atoi(p.out.c_str() + nl + 1);
    r.body = p.out.substr(0, nl);
    return r;
  }
  Reply Cell(const std::string& session, const std::string& code) const {
    return Call("POST", "/v1/sessions/" + session + "/execute", json{{"code", code}}.dump());
  }
  json Audit() const {
    ProcessOptions o;
    o.timeout = 30s;
    const ProcessResult p = RunKiln({"audit", "--store", url_, "--json", "--limit", "100000"}, o);
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return json::parse(p.out, nullptr, false);
  }
  std::string CreateKey(const std::string& tenant) const {
    ProcessOptions o;
    o.timeout = 30s;
    const ProcessResult p = RunKiln({"keys", "create", "--tenant", tenant, "--store", url_}, o);
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return Trim(p.out);
  }
  // `n` one-shots at once for `key`, each running `code`: the replies.
  std::vector<Reply> AtOnce(int n, const std::string& key, const std::string& code,
                            int direct_node = -1) const {
    std::vector<Reply> replies(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        if (direct_node < 0) {
          replies[i] = Call("POST", "/v1/execute", json{{"code", code}}.dump(),
                            {"Authorization: Bearer " + key});
          return;
        }
        const HttpResponse h = nodes_[direct_node].Execute(key, {{"code", code}}, 60s);
        replies[i].status = h.status;
        replies[i].body = h.body;
      });
    }
    for (auto& t : threads) t.join();
    return replies;
  }
  int NodeIndex(const std::string& session_id) const {
    for (int i = 0; i < kNodes; ++i) {
      if (session_id.rfind("kiln-" + std::to_string(i) + "-", 0) == 0) return i;
    }
    return -1;
  }

  TempDir dir_;
  std::unique_ptr<PgCluster> pg_;
  std::string url_, key_;
  KilnServer nodes_[kNodes];
  std::unique_ptr<Subprocess> haproxy_;
  uint16_t haproxy_port_ = 0;
};

TEST_F(Fleet, SessionsStayOnTheirNodeAndALostNodeIsAnswered) {
  // The key made once works on every node, directly.
  for (int i = 0; i < kNodes; ++i) {
    const HttpResponse r = nodes_[i].Execute(key_, {{"code", "print('direct')"}});
    ASSERT_EQ(r.status, 200) << "node " << i << ": " << r.Describe();
  }

  // 20 sessions through HAProxy, each keeping its state and files over 10 cells.
  constexpr int kSessions = 20, kCells = 10;
  std::vector<std::string> ids;
  for (int s = 0; s < kSessions; ++s) {
    const Reply created = Call("POST", "/v1/sessions", "{}");
    ASSERT_EQ(created.status, 201) << created.Describe();
    const std::string id = created.Json().value("id", "");
    ASSERT_GE(NodeIndex(id), 0) << "session id names no node: " << id;
    ids.push_back(id);
  }
  std::set<int> session_nodes;
  for (const auto& id : ids) session_nodes.insert(NodeIndex(id));
  EXPECT_GE(session_nodes.size(), 2u) << "least connections put every session on one node";
  for (int c = 0; c < kCells; ++c) {
    for (int s = 0; s < kSessions; ++s) {
      const std::string code =
          c == 0 ? "n = 0\nopen('mark.txt', 'w').write('" + ids[s] + "')\nprint(n)"
                 : "n += 1\nprint(n, open('mark.txt').read())";
      const Reply r = Cell(ids[s], code);
      ASSERT_EQ(r.status, 200) << ids[s] << " cell " << c << ": " << r.Describe();
      const json j = r.Json();
      ASSERT_EQ(j.value("status", ""), "ok") << j.dump();
      const std::string want = c == 0 ? "0\n" : std::to_string(c) + " " + ids[s] + "\n";
      ASSERT_EQ(j.value("stdout", ""), want) << ids[s] << " cell " << c;
    }
  }

  // One-shots through HAProxy reach all three nodes; the CLI sees every row,
  // each naming the node that ran it.
  for (int i = 0; i < 30; ++i) {
    const Reply r = Call("POST", "/v1/execute", json{{"code", "print('spread')"}}.dump());
    ASSERT_EQ(r.status, 200) << r.Describe();
  }
  const json rows = Audit();
  ASSERT_TRUE(rows.is_array());
  EXPECT_EQ(rows.size(), static_cast<size_t>(kNodes + kSessions * kCells + 30));
  std::map<std::string, int> by_node, one_shots_by_node, cells_by_node;
  for (const auto& r : rows) {
    ASSERT_TRUE(r["node"].is_string()) << r.dump();
    const std::string node = r["node"];
    by_node[node]++;
    if (r["code"] == "print('spread')") one_shots_by_node[node]++;
    // A session's cells ran on the node its id names.
    if (r["session_id"].is_string()) {
      cells_by_node[node]++;
      EXPECT_EQ("kiln-" + std::to_string(NodeIndex(r["session_id"])), node) << r.dump();
    }
  }
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_GT(one_shots_by_node["kiln-" + std::to_string(i)], 0)
        << "no one-shot through HAProxy reached kiln-" << i << ": "
        << json(one_shots_by_node).dump();
  }
  int cells = 0;
  for (const auto& [node, n] : cells_by_node) cells += n;
  EXPECT_EQ(cells, kSessions * kCells);

  // SIGKILL the node of the first session, while it runs a long one-shot.
  const int victim = NodeIndex(ids[0]);
  std::thread long_call([&] {
    (void)nodes_[victim].Execute(key_, {{"code", "import time; time.sleep(60)"}}, 90s);
  });
  ASSERT_TRUE(WaitFor(
      [&] {
        const json a = Audit();
        for (const auto& r : a)
          if (r.value("status", "") == "running" &&
              r.value("node", "") == "kiln-" + std::to_string(victim))
            return true;
        return false;
      },
      20s));
  const auto killed_at = Clock::now();
  nodes_[victim].Kill();
  long_call.join();

  // Its sessions answer 410 "node lost" through HAProxy within the timeout
  // (plus a heartbeat and HAProxy's checks), each answer quick.
  std::vector<std::string> victims;
  for (const auto& id : ids)
    if (NodeIndex(id) == victim) victims.push_back(id);
  ASSERT_FALSE(victims.empty());
  Reply gone;
  ASSERT_TRUE(WaitFor(
      [&] {
        gone = Cell(victims[0], "print(n)");
        EXPECT_LT(gone.seconds, 10) << "a call for a lost node's session hung";
        EXPECT_NE(gone.status, 502) << gone.Describe();
        EXPECT_TRUE(gone.status == 410 || gone.status == 503 || gone.status == 200)
            << gone.Describe();
        return gone.status == 410;
      },
      std::chrono::milliseconds(static_cast<int64_t>(kNodeTimeoutS * 1000) + 5000)))
      << gone.Describe();
  EXPECT_NE(gone.body.find("node lost"), std::string::npos) << gone.Describe();
  EXPECT_EQ(gone.Json()["error"].value("code", ""), "session_gone") << gone.Describe();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed_at).count(), kNodeTimeoutS + 5);
  for (const auto& id : victims) {
    const Reply r = Cell(id, "print(n)");
    EXPECT_EQ(r.status, 410) << id << ": " << r.Describe();
  }
  // Its running row became interrupted, by another node.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& r : Audit())
          if (r.value("node", "") == "kiln-" + std::to_string(victim) &&
              r.value("status", "") == "running")
            return false;
        return true;
      },
      10s));
  bool interrupted = false;
  for (const auto& r : Audit()) {
    if (r.value("node", "") == "kiln-" + std::to_string(victim) &&
        r.value("status", "") == "interrupted") {
      interrupted = true;
      EXPECT_NE(r.value("reason", "").find("was lost"), std::string::npos) << r.dump();
    }
  }
  EXPECT_TRUE(interrupted);
  // New work goes to the others; the other sessions are untouched.
  for (int i = 0; i < 10; ++i) {
    const Reply r = Call("POST", "/v1/execute", json{{"code", "print(2)"}}.dump());
    ASSERT_EQ(r.status, 200) << r.Describe();
  }
  for (const auto& id : ids) {
    if (NodeIndex(id) == victim) continue;
    const Reply r = Cell(id, "print(n)");
    ASSERT_EQ(r.status, 200) << r.Describe();
    EXPECT_EQ(r.Json().value("stdout", ""), std::to_string(kCells - 1) + "\n");
  }

  // A SIGTERM drain of another node fails no request.
  const int drained = (victim + 1) % kNodes;
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, failed{0};
  std::string first_failure;
  std::mutex mu;
  std::vector<std::thread> load;
  for (int t = 0; t < 3; ++t) {
    load.emplace_back([&] {
      while (!stop) {
        const Reply r = Call("POST", "/v1/execute", json{{"code", "print(3)"}}.dump());
        ++sent;
        if (r.status != 200) {
          ++failed;
          std::lock_guard lock(mu);
          if (first_failure.empty()) first_failure = r.Describe();
        }
      }
    });
  }
  std::this_thread::sleep_for(1s);
  const KilnServer::Exit exit = nodes_[drained].Terminate(40s);
  std::this_thread::sleep_for(1s);
  stop = true;
  for (auto& t : load) t.join();
  EXPECT_TRUE(exit.in_time);
  EXPECT_EQ(exit.code, 0);
  EXPECT_GT(sent.load(), 5);
  EXPECT_EQ(failed.load(), 0) << first_failure;
}

// Quotas hold fleet-wide (docs/deploy.md, Quotas): each of the three nodes
// admits its share of a tenant's limits, ceil(limit / 3), with no store round
// trip per request; without it every node would admit the whole limit.
TEST_F(Fleet, ATenantsQuotasHoldAcrossTheFleet) {
  const std::string capped = CreateKey("capped");    // max_concurrent 4: 2 a node, 6 at most
  const std::string metered = CreateKey("metered");  // burst 3, no refill to speak of: 1 a node
  ASSERT_TRUE(IsKey(capped) && IsKey(metered));
  constexpr int kBound = kNodes * ((4 + kNodes - 1) / kNodes);  // 6: 4 + kNodes - 1
  const std::string hold = "import time; time.sleep(4); print('held')";
  auto count = [](const std::vector<Reply>& replies, int status) {
    int n = 0;
    for (const auto& r : replies) n += r.status == status ? 1 : 0;
    return n;
  };
  auto only_200_and_429 = [](const std::vector<Reply>& replies, const std::string& reason) {
    for (const auto& r : replies) {
      if (r.status == 200) continue;
      EXPECT_EQ(r.status, 429) << r.Describe();
      EXPECT_NE(r.body.find("across 3 nodes"), std::string::npos) << r.Describe();
      EXPECT_EQ(r.Json()["error"].value("code", ""), reason) << r.Describe();
    }
  };

  // Concurrency, on each node directly: 3 at once, exactly the share (2) run.
  for (int i = 0; i < kNodes; ++i) {
    const auto replies = AtOnce(3, capped, hold, i);
    EXPECT_EQ(count(replies, 200), 2) << "node " << i;
    EXPECT_EQ(count(replies, 429), 1) << "node " << i;
    only_200_and_429(replies, "tenant_concurrency");
  }
  // Through HAProxy: 12 at once, at most the fleet's bound run, the rest are 429.
  const auto through = AtOnce(12, capped, hold);
  const int admitted = count(through, 200);
  EXPECT_LE(admitted, kBound);
  EXPECT_GE(admitted, 1);
  EXPECT_EQ(admitted + count(through, 429), 12);
  only_200_and_429(through, "tenant_concurrency");
  // The ones that ran are in the shared audit log, each on the node that ran it.
  std::set<std::string> nodes_used;
  for (const auto& row : Audit())
    if (row.value("tenant", "") == "capped" && row.value("status", "") == "ok")
      nodes_used.insert(row.value("node", ""));
  EXPECT_GE(nodes_used.size(), 2u);

  // Rate: through HAProxy 9 quick ones, at most one per node's bucket (3), and a
  // node asked directly has nothing left.
  std::vector<Reply> rated;
  for (int i = 0; i < 9; ++i) {
    rated.push_back(Call("POST", "/v1/execute", json{{"code", "print(1)"}}.dump(),
                         {"Authorization: Bearer " + metered}));
  }
  const int passed = count(rated, 200);
  EXPECT_LE(passed, kNodes);
  EXPECT_GE(passed, 1);
  only_200_and_429(rated, "rate");
  for (int i = 0; i < kNodes; ++i) {
    const auto direct = AtOnce(2, metered, "print(1)", i);
    EXPECT_LE(count(direct, 200), 1) << "node " << i;
    EXPECT_GE(count(direct, 429), 1) << "node " << i;
    only_200_and_429(direct, "rate");
  }
}

}  // namespace
}  // namespace kiln::testing
