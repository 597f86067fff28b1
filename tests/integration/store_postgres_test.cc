// Integration tier: kiln against a PostgreSQL store (docs/adr/0020), through
// the real binary. A throwaway cluster (tests/testlib/pg_cluster.h) holds the
// state; `kiln keys`, `kiln audit`, `kiln events` and `kiln lockdown` take
// --store URL with their usual flags, and `kiln serve --store URL` serves
// from it. Skipped with the reason where PostgreSQL cannot start.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"
#include "testlib/pg_cluster.h"
#include "testlib/temp_dir.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using kiln_server_detail::IsKey;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;
using kiln_server_detail::WaitFor;

ProcessResult Kiln(const std::vector<std::string>& args) {
  ProcessOptions o;
  o.timeout = 30s;
  return RunKiln(args, o);
}

json KilnJson(const std::vector<std::string>& args) {
  const ProcessResult p = Kiln(args);
  EXPECT_EQ(p.exit_code, 0) << p.err;
  json j = json::parse(p.out, nullptr, false);
  if (j.is_discarded()) ADD_FAILURE() << "not JSON: " << p.out << p.err;
  return j;
}

class StorePostgres : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    std::string why;
    pg_ = PgCluster::Start(&why);
    if (!pg_) GTEST_SKIP() << "no PostgreSQL cluster: " << why;
    auto url = pg_->CreateDatabase("kiln");
    ASSERT_TRUE(url.has_value());
    url_ = *url;
  }
  std::unique_ptr<PgCluster> pg_;
  std::string url_;
  TempDir dir_;
};

TEST_F(StorePostgres, TheCliAndTheServerShareOneDatabase) {
  // A key made by the CLI in PostgreSQL, with no data directory at all.
  const ProcessResult created = Kiln({"keys", "create", "--tenant", "acme", "--store", url_});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string key = Trim(created.out);
  ASSERT_TRUE(IsKey(key)) << created.out;
  EXPECT_EQ(created.err.find("s3cret"), std::string::npos);
  const json keys = KilnJson({"keys", "list", "--json", "--store", url_});
  ASSERT_TRUE(keys.is_array());
  ASSERT_EQ(keys.size(), 1u) << keys.dump();
  EXPECT_EQ(keys[0]["tenant"], "acme");

  WriteFile(dir_.path() + "/kiln.toml", R"TOML(
[server]
concurrency = 2
[pool]
max = 1
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 30
memory = "256m"
)TOML");
  KilnServer server;
  std::string why;
  ASSERT_TRUE(server.Start(dir_.path() + "/data", dir_.path() + "/kiln.toml", "pg", &why,
                           {"--store", url_}))
      << why;
  // The server made no key of its own: the store already had one.
  EXPECT_EQ(Trim(server.Stdout()), "") << server.Stdout();
  EXPECT_NE(server.Stderr().find("(data in postgresql:///kiln?"), std::string::npos)
      << server.Stderr();

  const HttpResponse ran = server.Execute(key, {{"code", "print(6 * 7)"}});
  ASSERT_EQ(ran.status, 200) << ran.Describe();
  const json r = Parse(ran);
  EXPECT_EQ(r["stdout"], "42\n") << r.dump();

  // The audit row, read by the CLI from PostgreSQL with audit's usual flags.
  const json rows =
      KilnJson({"audit", "--store", url_, "--json", "--tenant", "acme", "--status", "ok"});
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 1u) << rows.dump();
  EXPECT_EQ(rows[0]["id"], r["id"]);
  EXPECT_EQ(rows[0]["code"], "print(6 * 7)");
  EXPECT_TRUE(KilnJson({"audit", "--store", url_, "--json", "--tenant", "globex"}).empty());

  // Security events: repeated bad keys from one address, stored in PostgreSQL.
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(server.Execute("kiln_000000000000_nope", {{"code", "1"}}).status, 401);
  }
  json events;
  ASSERT_TRUE(WaitFor(
      [&] {
        events = KilnJson({"events", "--store", url_, "--json", "--kind", "auth_failures"});
        return events.is_array() && events.size() == 1;
      },
      10s))
      << events.dump();
  EXPECT_EQ(events[0]["client_addr"], "127.0.0.1");

  // Lockdown through the CLI: the server follows the shared state.
  const ProcessResult on = Kiln({"lockdown", "on", "--reason", "drill", "--store", url_});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  HttpResponse refused;
  ASSERT_TRUE(WaitFor(
      [&] {
        refused = server.Execute(key, {{"code", "print(1)"}});
        return refused.status == 503;
      },
      10s))
      << refused.Describe();
  EXPECT_NE(refused.body.find("drill"), std::string::npos) << refused.Describe();
  const json state = KilnJson({"lockdown", "status", "--json", "--store", url_});
  EXPECT_EQ(state.value("on", false), true) << state.dump();
  ASSERT_EQ(Kiln({"lockdown", "off", "--store", url_}).exit_code, 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        return server.Execute(key, {{"code", "print(1)"}}).status == 200;
      },
      10s));

  // Revoked in the store by another process: the server may still accept the
  // key for [store] key_cache (1 s by default, docs/deploy.md) after its last
  // read of it, then refuses it for good. 5 s covers the bound on a noisy host.
  ASSERT_EQ(Kiln({"keys", "revoke", keys[0]["id"].get<std::string>(), "--store", url_}).exit_code,
            0);
  HttpResponse after;
  ASSERT_TRUE(WaitFor(
      [&] {
        after = server.Execute(key, {{"code", "print(1)"}});
        return after.status == 401;
      },
      5s))
      << after.Describe();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(server.Execute(key, {{"code", "print(1)"}}).status, 401);
  }
  EXPECT_TRUE(server.Terminate(30s).in_time);
}

TEST_F(StorePostgres, ABadOrUnreachableStoreIsAClearError) {
  const ProcessResult scheme = Kiln({"audit", "--store", "mysql://db/kiln"});
  EXPECT_NE(scheme.exit_code, 0);
  EXPECT_NE(scheme.err.find("postgresql://"), std::string::npos) << scheme.err;
  const ProcessResult gone =
      Kiln({"keys", "list", "--store",
            "postgresql://kiln:s3cret@/kiln?host=" + dir_.path() + "&connect_timeout=2"});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_NE(gone.err.find("postgresql: connect to postgresql://kiln@/kiln"), std::string::npos)
      << gone.err;
  EXPECT_EQ(gone.err.find("s3cret"), std::string::npos) << gone.err;
  WriteFile(dir_.path() + "/bad.toml", "[store]\nurl = \"sqlite:///x\"\n");
  const ProcessResult serve = Kiln({"serve", "--config", dir_.path() + "/bad.toml"});
  EXPECT_EQ(serve.exit_code, 2) << serve.err;
  EXPECT_NE(serve.err.find("store.url"), std::string::npos) << serve.err;
}

}  // namespace
}  // namespace kiln::testing
