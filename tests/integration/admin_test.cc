// Integration tier: the operator's controls (docs/api.md, "Operator
// controls") through a real `kiln serve`: admin keys and their routes, 404
// for tenants' keys, quarantine and release, revocation, lockdown over HTTP
// and from the CLI, kept across a restart, and every action audited.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kConfig = R"TOML(
[server]
concurrency = 2
queue = 16
shutdown_grace = "5s"

[tenants.default]
rate = 1000
burst = 1000

[profiles.default]
interpreter = "/usr/bin/python3"

[profiles.default.defaults]
timeout = 60
memory = "256m"
)TOML";

using Headers = std::vector<std::pair<std::string, std::string>>;

Headers Bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

class Admin : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    data_ = dir_.path() + "/data";
    config_ = dir_.path() + "/kiln.toml";
    WriteFile(config_, kConfig);
    Start("first");
    tenant_key_ = Trim(server_->Stdout());
    ASSERT_TRUE(IsKey(tenant_key_));
    admin_key_ = CreateAdminKey();
    other_key_ = CreateKey(data_, "other");
  }

  void Start(const std::string& tag) {
    server_ = std::make_unique<KilnServer>();
    std::string why;
    ASSERT_TRUE(server_->Start(data_, config_, tag, &why)) << why;
  }

  std::string CreateAdminKey() {
    const ProcessResult p = RunKiln({"keys", "create", "--admin", "--data-dir", data_});
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return Trim(p.out);
  }

  HttpResponse AdminCall(const std::string& method, const std::string& path,
                         const std::string& body = "", const std::string& key = "") {
    return server_->Call(method, path, Bearer(key.empty() ? admin_key_ : key), body, 60s);
  }

  HttpResponse Exec(const std::string& key, const std::string& code = "print(1)") {
    return server_->Execute(key, {{"code", code}}, 120s);
  }

  json Events(const std::string& kind) {
    const HttpResponse r = AdminCall("GET", "/v1/admin/events?kind=" + kind);
    EXPECT_EQ(r.status, 200) << r.Describe();
    return Parse(r).value("events", json::array());
  }

  TempDir dir_;
  std::string data_, config_;
  std::unique_ptr<KilnServer> server_;
  std::string tenant_key_, admin_key_, other_key_;
};

TEST_F(Admin, ATenantsKeyGets404OnEveryAdminRouteAndAnAdminKeyGetsThrough) {
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v1/admin/events"},
           {"GET", "/v1/admin/tenants"},
           {"GET", "/v1/admin/lockdown"},
           {"POST", "/v1/admin/lockdown"},
           {"POST", "/v1/admin/tenants/other/quarantine"},
           {"POST", "/v1/admin/tenants/other/release"},
           {"POST", "/v1/admin/keys/0123456789ab/revoke"}}) {
    const HttpResponse r = AdminCall(method, path, method == "POST" ? "{}" : "", tenant_key_);
    EXPECT_EQ(r.status, 404) << method << " " << path << ": " << r.Describe();
    EXPECT_EQ(Parse(r)["error"]["code"], "not_found");
  }
  EXPECT_EQ(server_->Get("/v1/admin/tenants").status, 401);  // no key at all
  const HttpResponse tenants = AdminCall("GET", "/v1/admin/tenants");
  ASSERT_EQ(tenants.status, 200) << tenants.Describe();
  std::set<std::string> names;
  const json tenant_list = Parse(tenants);
  for (const auto& t : tenant_list["tenants"]) {
    names.insert(t.value("tenant", ""));
    EXPECT_TRUE(t["quarantine"].is_null());
  }
  EXPECT_TRUE(names.count("default") && names.count("other") && names.count("admin"))
      << tenants.body;
  // The admin key is a key like any other for the rest of the API.
  EXPECT_EQ(Exec(admin_key_).status, 200);
  // kiln keys list says which keys are admins.
  const ProcessResult list = RunKiln({"keys", "list", "--data-dir", data_, "--json"});
  int admins = 0;
  for (const auto& k : json::parse(list.out, nullptr, false)) admins += k.value("admin", false);
  EXPECT_EQ(admins, 1) << list.out;
}

TEST_F(Admin, QuarantineStopsTheTenantWith403UntilReleasedAndIsAudited) {
  ASSERT_EQ(Exec(tenant_key_).status, 200);
  // A cell running in the tenant's session is ended by the quarantine.
  const HttpResponse created = server_->Call("POST", "/v1/sessions", Bearer(tenant_key_), "{}");
  ASSERT_EQ(created.status, 201) << created.Describe();
  const std::string sid = Parse(created).value("id", "");
  auto running = std::async(std::launch::async, [&] {
    return server_->Call("POST", "/v1/sessions/" + sid + "/execute", Bearer(tenant_key_),
                         json({{"code", "import time\ntime.sleep(50)"}}).dump(), 90s);
  });
  std::this_thread::sleep_for(1s);
  const auto t0 = std::chrono::steady_clock::now();
  const HttpResponse q = AdminCall("POST", "/v1/admin/tenants/default/quarantine",
                                   json({{"reason", "leaked a key"}}).dump());
  ASSERT_EQ(q.status, 200) << q.Describe();
  EXPECT_EQ(Parse(q)["quarantine"]["reason"], "leaked a key");
  const HttpResponse cell = running.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "the running cell was not stopped";
  EXPECT_EQ(Parse(cell).value("status", ""), "cancelled") << cell.Describe();

  const HttpResponse refused = Exec(tenant_key_);
  ASSERT_EQ(refused.status, 403) << refused.Describe();
  EXPECT_EQ(Parse(refused)["error"]["code"], "tenant_quarantined");
  EXPECT_NE(Parse(refused)["error"]["message"].get<std::string>().find("leaked a key"),
            std::string::npos);
  EXPECT_EQ(Exec(other_key_).status, 200);  // another tenant is not touched
  const HttpResponse ref = server_->Call("POST", "/execute", {{"X-API-Key", tenant_key_}},
                                         json({{"code", "print(1)"}}).dump());
  EXPECT_EQ(ref.status, 403) << ref.Describe();
  bool listed = false;
  const json after_quarantine = Parse(AdminCall("GET", "/v1/admin/tenants"));
  for (const auto& t : after_quarantine["tenants"]) {
    if (t["tenant"] == "default") listed = t["quarantine"].is_object();
  }
  EXPECT_TRUE(listed);

  // It survives a restart.
  server_->Terminate(20s);
  Start("second");
  EXPECT_EQ(Exec(tenant_key_).status, 403);

  const HttpResponse released = AdminCall("POST", "/v1/admin/tenants/default/release");
  ASSERT_EQ(released.status, 200) << released.Describe();
  EXPECT_EQ(Parse(released)["released"], true);
  EXPECT_EQ(Exec(tenant_key_).status, 200);

  const json q_events = Events("tenant_quarantined");
  ASSERT_EQ(q_events.size(), 1u) << q_events.dump();
  EXPECT_EQ(q_events[0]["tenant"], "default");
  EXPECT_EQ(q_events[0]["key_id"], KeyId(admin_key_));
  EXPECT_EQ(Events("tenant_released").size(), 1u);
}

TEST_F(Admin, RevokingAKeyOverTheApiLocksItOutAndIsAudited) {
  ASSERT_EQ(Exec(other_key_).status, 200);
  const HttpResponse bad = AdminCall("POST", "/v1/admin/keys/NOT-A-KEY/revoke");
  EXPECT_EQ(bad.status, 400) << bad.Describe();
  const HttpResponse unknown = AdminCall("POST", "/v1/admin/keys/0123456789ab/revoke");
  EXPECT_EQ(unknown.status, 404) << unknown.Describe();
  const HttpResponse r = AdminCall("POST", "/v1/admin/keys/" + KeyId(other_key_) + "/revoke");
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(Exec(other_key_).status, 401);
  const json actions = Events("admin_action");
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_NE(actions[0]["detail"].get<std::string>().find(KeyId(other_key_)), std::string::npos);
}

TEST_F(Admin, LockdownRefusesStopsPersistsAndIsLiftedFromTheCli) {
  auto running = std::async(std::launch::async,
                            [&] { return Exec(tenant_key_, "import time\ntime.sleep(50)"); });
  std::this_thread::sleep_for(1s);
  const HttpResponse bad = AdminCall("POST", "/v1/admin/lockdown", json({{"on", "yes"}}).dump());
  EXPECT_EQ(bad.status, 400) << bad.Describe();
  EXPECT_EQ(Parse(bad)["error"]["field"], "on");
  const HttpResponse on = AdminCall("POST", "/v1/admin/lockdown",
                                    json({{"on", true}, {"reason", "incident 42"}}).dump());
  ASSERT_EQ(on.status, 200) << on.Describe();
  EXPECT_EQ(Parse(on)["on"], true);
  // The running execution was stopped.
  const HttpResponse stopped = running.get();
  EXPECT_EQ(Parse(stopped).value("status", ""), "cancelled") << stopped.Describe();
  // New executions and sessions: 503 with the reason, no Retry-After.
  const HttpResponse refused = Exec(other_key_);
  ASSERT_EQ(refused.status, 503) << refused.Describe();
  EXPECT_EQ(Parse(refused)["error"]["code"], "lockdown");
  EXPECT_NE(refused.body.find("incident 42"), std::string::npos);
  EXPECT_FALSE(refused.Header("Retry-After").has_value());
  EXPECT_EQ(server_->Call("POST", "/v1/sessions", Bearer(tenant_key_), "{}").status, 503);
  const HttpResponse ready = server_->Get("/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(Parse(ready)["lockdown"]["reason"], "incident 42") << ready.body;

  // Kept across a restart.
  server_->Terminate(20s);
  Start("second");
  EXPECT_EQ(Exec(tenant_key_).status, 503);
  EXPECT_EQ(Parse(AdminCall("GET", "/v1/admin/lockdown"))["on"], true);

  // Lifted from the CLI: the running server follows within a second or two.
  const ProcessResult off = RunKiln({"lockdown", "off", "--data-dir", data_});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(WaitFor([&] { return Exec(tenant_key_).status == 200; }, 10s));
  EXPECT_EQ(server_->Get("/readyz").status, 200);
  // On from the CLI too.
  ASSERT_EQ(RunKiln({"lockdown", "on", "--reason", "from the cli", "--data-dir", data_}).exit_code,
            0);
  EXPECT_TRUE(WaitFor([&] { return Exec(tenant_key_).status == 503; }, 10s));
  const ProcessResult status = RunKiln({"lockdown", "status", "--json", "--data-dir", data_});
  EXPECT_EQ(json::parse(status.out, nullptr, false)["reason"], "from the cli") << status.out;
  // Every switch is a lockdown event: on (API), off (CLI), on (CLI).
  EXPECT_EQ(Events("lockdown").size(), 3u);
}

TEST_F(Admin, TheEventStreamDeliversEventsAsTheyHappen) {
  // Open the live stream, then cause an event: it arrives on the stream.
  auto stream = std::async(std::launch::async, [&] {
    HttpRequest r;
    r.method = "GET";
    r.path = "/v1/admin/events?kind=tenant_quarantined";
    r.headers = Bearer(admin_key_);
    r.headers.emplace_back("Accept", "text/event-stream");
    r.timeout = 6s;  // the stream never ends by itself: read what came within 6 s
    return HttpCall("127.0.0.1", server_->port(), r);
  });
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(AdminCall("POST", "/v1/admin/tenants/other/quarantine", "{}").status, 200);
  const HttpResponse got = stream.get();
  EXPECT_NE(got.body.find("event: security_event"), std::string::npos) << got.Describe();
  EXPECT_NE(got.body.find("\"kind\":\"tenant_quarantined\""), std::string::npos) << got.body;
  EXPECT_NE(got.body.find("\"tenant\":\"other\""), std::string::npos) << got.body;
  // JSON: the same event, with a cursor.
  const json all = Parse(AdminCall("GET", "/v1/admin/events?after=0&limit=10"));
  ASSERT_FALSE(all["events"].empty()) << all.dump();
  EXPECT_GT(all["events"][0]["id"].get<int64_t>(), 0);
  const HttpResponse bad = AdminCall("GET", "/v1/admin/events?kind=volcano");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Parse(bad)["error"]["field"], "kind");
}

}  // namespace
}  // namespace kiln::testing
