#include "config/config.h"

#include <gtest/gtest.h>

namespace kiln::config {
namespace {

TEST(Config, BuiltinParsesAndHasTheShippedProfiles) {
  const Config& c = BuiltinConfig();
  ASSERT_TRUE(c.Find("default").ok());
  auto strict = c.Find("strict");
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ((*strict)->imports.mode, policy::ImportPolicy::Mode::kDenylist);
  EXPECT_EQ((*strict)->imports.modules, policy::StrictDenylist());
  EXPECT_TRUE(c.Find("datascience").ok());
  auto missing = c.Find("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("strict"), std::string::npos);  // lists the known ones
}

TEST(Config, UnknownKeysNameTheKeyAndLine) {
  auto c =
      ParseConfig("[profiles.a]\ninterpreter = \"/usr/bin/python3\"\nmemroy = \"1g\"\n", "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("t.toml:3"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("profiles.a.memroy"), std::string::npos) << c.error().message;
  auto top = ParseConfig("[server]\nx = 1\n", "t.toml");
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.error().message.find("server"), std::string::npos);
  auto lim = ParseConfig("[profiles.a.defaults]\nmemory = \"1g\"\nspeed = 3\n", "t.toml");
  ASSERT_FALSE(lim.ok());
  EXPECT_NE(lim.error().message.find("profiles.a.defaults.speed"), std::string::npos);
}

TEST(Config, BadValuesNameTheKey) {
  struct Case {
    const char* toml;
    const char* key;
  } cases[] = {
      {"[profiles.a.defaults]\nmemory = \"12parsecs\"\n", "profiles.a.defaults.memory"},
      {"[profiles.a.defaults]\ntimeout = -3\n", "profiles.a.defaults.timeout"},
      {"[profiles.a.defaults]\npids = 1.5\n", "profiles.a.defaults.pids"},
      {"[profiles.a]\nimport_policy = \"maybe\"\n", "profiles.a.import_policy"},
      {"[profiles.a]\npreload = \"numpy\"\n", "profiles.a.preload"},
      {"[profiles.a]\npreload = [1]\n", "profiles.a.preload"},
      {"[profiles.a]\nmodules = [\"os\"]\n", "profiles.a.modules"},
      {"[profiles.a]\ninterpreter = \"python3\"\n", "interpreter"},
      {"[profiles.a]\npreload = [\"not a module\"]\n", "preload"},
      {"[profiles.a]\nmounts = [\"/proc\"]\n", "mounts"},
      {"[profiles.a.defaults]\nmemory = \"1m\"\n", "memory"},
      {"profiles = 3\n", "profiles"},
      {"[profiles.a\n", "t.toml:1"},
      {"[profiles.a]\nio = 3\n", "profiles.a.io"},
      {"[profiles.a.io]\nread_bps = 0\n", "t.toml:2: profiles.a.io.read_bps: must be positive"},
      {"[profiles.a.io]\nread_bps = \"fast\"\n", "t.toml:2: profiles.a.io.read_bps"},
      {"[profiles.a.io]\nwrite_bps = 1.5\n", "t.toml:2: profiles.a.io.write_bps"},
      {"[profiles.a.io]\nread_iops = \"100\"\n", "t.toml:2: profiles.a.io.read_iops"},
      {"[profiles.a.io]\nwrite_iops = -1\n", "t.toml:2: profiles.a.io.write_iops"},
      {"[profiles.a.io]\nread_bps = \"512k\"\n", "profiles.a: io.read_bps: must be at least"},
      {"[profiles.a.io]\nread_iops = 2\n", "profiles.a: io.read_iops: must be at least"},
      {"[profiles.a.io]\nbps = \"1m\"\n", "t.toml:2: profiles.a.io.bps: unknown key"},
      {"[profiles.a]\nbackend = \"firecracker\"\n",
       "t.toml:2: profiles.a.backend: must be \"native\" or \"gvisor\""},
      {"[profiles.a]\nbackend = true\n", "t.toml:2: profiles.a.backend"},
  };
  for (const auto& c : cases) {
    auto r = ParseConfig(c.toml, "t.toml");
    ASSERT_FALSE(r.ok()) << c.toml;
    EXPECT_NE(r.error().message.find(c.key), std::string::npos)
        << c.toml << " -> " << r.error().message;
  }
}

TEST(Config, DefaultsAndMaximums) {
  auto c = ParseConfig(R"(
[profiles.p]
[profiles.p.defaults]
timeout = "10s"
memory = "256m"
[profiles.p.max]
timeout = 20
memory = "1g"
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  const Profile& p = c->profiles.at("p");
  auto b = PolicyFor(p, {});
  ASSERT_TRUE(b.ok());
  auto pol = b->Build();
  ASSERT_TRUE(pol.ok());
  EXPECT_DOUBLE_EQ(pol->limits().wall_timeout_s, 10);
  EXPECT_EQ(pol->limits().memory_bytes, 256u << 20);

  LimitSpec req;
  req.memory_bytes = 512u << 20;
  auto b2 = PolicyFor(p, req);
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2->Build()->limits().memory_bytes, 512u << 20);

  req.memory_bytes = 2ULL << 30;
  auto over = PolicyFor(p, req);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().message, "memory: 2 GiB is over the profile's maximum of 1 GiB");
  LimitSpec t;
  t.timeout_s = 30;
  auto over_t = PolicyFor(p, t);
  ASSERT_FALSE(over_t.ok());
  EXPECT_EQ(over_t.error().message.rfind("timeout:", 0), 0u);
}

TEST(Config, IoLimitsPerProfile) {
  auto c = ParseConfig(R"(
[profiles.p]
[profiles.p.io]
read_bps = "4m"
write_bps = "max"
read_iops = 100
write_iops = "max"
[profiles.q]
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto p = PolicyFor(c->profiles.at("p"), {});
  ASSERT_TRUE(p.ok());
  auto pol = p->Build();
  ASSERT_TRUE(pol.ok()) << pol.error().message;
  EXPECT_EQ(pol->limits().io.read_bps, 4u << 20);
  EXPECT_EQ(pol->limits().io.write_bps, 0u);  // no limit
  EXPECT_EQ(pol->limits().io.read_iops, 100u);
  EXPECT_EQ(pol->limits().io.write_iops, 0u);
  // A profile without [io] gets the generous defaults.
  auto q = PolicyFor(c->profiles.at("q"), {});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->Build()->limits().io.read_bps, policy::IoLimits{}.read_bps);
  // The shipped profiles say what they use.
  auto d = PolicyFor(**BuiltinConfig().Find("default"), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->Build()->limits().io.read_bps, 256u << 20);
}

TEST(Config, ServerAndTenants) {
  const Config& b = BuiltinConfig();
  EXPECT_EQ(b.server.listen, "127.0.0.1:8080");
  EXPECT_EQ(b.server.retention_days, 30);
  EXPECT_EQ(b.Tenant("anyone").max_concurrent, 4);
  auto c = ParseConfig(R"(
[server]
listen = "0.0.0.0:9000"
queue = 3
max_body = "1m"
store_code = false
mcp_allowed_origins = ["https://app.example", "http://10.0.0.5:3000"]
[tenants.big]
max_concurrent = 10
rate = 100
burst = 200
[profiles.default]
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->server.queue, 3);
  EXPECT_EQ(c->server.max_body_bytes, 1u << 20);
  EXPECT_FALSE(c->server.store_code);
  EXPECT_EQ(c->server.mcp_allowed_origins,
            (std::vector<std::string>{"https://app.example", "http://10.0.0.5:3000"}));
  EXPECT_TRUE(b.server.mcp_allowed_origins.empty());
  EXPECT_EQ(c->Tenant("big").max_concurrent, 10);
  EXPECT_EQ(c->Tenant("small").max_concurrent, 4);
  for (const char* bad :
       {"[server]\nlisten = 3\n[profiles.default]\n", "[server]\nqueue = -1\n[profiles.default]\n",
        "[server]\nporty = 1\n[profiles.default]\n",
        "[server]\nmax_bodies_in_flight = \"1m\"\n[profiles.default]\n",
        "[server]\nclient_timeout = inf\n[profiles.default]\n",
        "[server]\nqueue_timeout = 1e300\n[profiles.default]\n",
        "[tenants.x]\nrate = 0\n[profiles.default]\n",
        "[tenants.x]\nspeed = 1\n[profiles.default]\n",
        "[server]\ndefault_profile = \"nope\"\n[profiles.default]\n",
        "[server]\nmcp_allowed_origins = \"*\"\n[profiles.default]\n",
        "[server]\nmcp_allowed_origins = [1]\n[profiles.default]\n"}) {
    EXPECT_FALSE(ParseConfig(bad, "t.toml").ok()) << bad;
  }
}

TEST(Config, Pool) {
  const Config& b = BuiltinConfig();
  EXPECT_TRUE(b.pool.enabled);
  EXPECT_LE(b.pool.min, b.pool.max);
  EXPECT_EQ(b.pool.preload, (std::vector<std::string>{"numpy", "pandas", "matplotlib"}));
  EXPECT_EQ(b.pool.max_refilling, 0);  // one per cpu
  EXPECT_EQ(b.pool.refill_nice, 10);
  auto c = ParseConfig(R"(
[pool]
enabled = false
min = 2
max = 12
target_wait = 0.01
max_refilling = 3
refill_nice = 19
preload = ["numpy"]
[profiles.default]
[profiles.quiet]
pool = false
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_FALSE(c->pool.enabled);
  EXPECT_EQ(c->pool.min, 2);
  EXPECT_EQ(c->pool.max, 12);
  EXPECT_DOUBLE_EQ(c->pool.target_wait, 0.01);
  EXPECT_EQ(c->pool.max_refilling, 3);
  EXPECT_EQ(c->pool.refill_nice, 19);
  EXPECT_EQ(c->pool.preload, std::vector<std::string>{"numpy"});
  EXPECT_TRUE(c->profiles.at("default").pool);
  EXPECT_FALSE(c->profiles.at("quiet").pool);
  for (const char* bad :
       {"[pool]\nenabled = 1\n[profiles.default]\n",
        "[pool]\nmin = 5\nmax = 2\n[profiles.default]\n", "[pool]\nmax = 0\n[profiles.default]\n",
        "[pool]\ntarget_wait = 1.5\n[profiles.default]\n", "[pool]\nsize = 3\n[profiles.default]\n",
        "[profiles.default]\npool = \"yes\"\n", "[pool]\nrefill_nice = 20\n[profiles.default]\n",
        "[pool]\nrefill_nice = -1\n[profiles.default]\n",
        "[pool]\nmax_refilling = 1.5\n[profiles.default]\n"}) {
    auto r = ParseConfig(bad, "t.toml");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("pool"), std::string::npos) << r.error().message;
    }
  }
}

TEST(Config, BackendPerProfileNativeByDefault) {
  for (const auto& [name, p] : BuiltinConfig().profiles)
    EXPECT_EQ(p.backend, policy::Backend::kNative) << name;
  auto c = ParseConfig(
      "[profiles.a]\n[profiles.b]\nbackend = \"gvisor\"\n[profiles.c]\n"
      "backend = \"native\"\n",
      "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->profiles.at("a").backend, policy::Backend::kNative);
  EXPECT_EQ(c->profiles.at("b").backend, policy::Backend::kGvisor);
  EXPECT_EQ(c->profiles.at("c").backend, policy::Backend::kNative);
  // The policy carries it to the supervisor.
  auto b = PolicyFor(c->profiles.at("b"), {});
  ASSERT_TRUE(b.ok()) << b.error().message;
  auto built = b->Build();
  ASSERT_TRUE(built.ok()) << built.error().message;
  EXPECT_EQ(built->backend(), policy::Backend::kGvisor);
}

// Durations past what the clocks they become hold used to be accepted (found
// by fuzz/config_fuzzer.cc).
TEST(Config, OutputAuditDefaultsToTheServersKeysAndPrivateKeysRedacted) {
  for (const auto& [name, p] : BuiltinConfig().profiles) {
    EXPECT_TRUE(p.output_audit.enabled) << name;
    ASSERT_EQ(p.output_audit.detectors.size(), 2u) << name;
    EXPECT_EQ(p.output_audit.detectors[0].name, "kiln_api_key");
    EXPECT_EQ(p.output_audit.detectors[1].name, "pem_private_key");
    for (const auto& d : p.output_audit.detectors) EXPECT_EQ(d.action, AuditAction::kRedact);
  }
}

TEST(Config, OutputAuditPerProfile) {
  auto c = ParseConfig(R"(
[profiles.a.output_audit]
action = "flag"
detectors = ["kiln_api_key", "aws_access_key_id", "jwt"]
actions = { jwt = "block" }
[profiles.a.output_audit.patterns]
internal_host = "db[0-9]+\\.corp\\.example"
ticket = { regex = "TKT-[0-9]{8}", action = "redact", max_length = 12 }
[profiles.b.output_audit]
enabled = false
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  const auto& a = c->profiles.at("a").output_audit;
  ASSERT_EQ(a.detectors.size(), 5u);
  EXPECT_EQ(a.detectors[0].name, "kiln_api_key");
  EXPECT_EQ(a.detectors[0].action, AuditAction::kFlag);
  EXPECT_EQ(a.detectors[2].name, "jwt");
  EXPECT_EQ(a.detectors[2].action, AuditAction::kBlock);
  EXPECT_EQ(a.detectors[3].name, "internal_host");
  EXPECT_EQ(a.detectors[3].action, AuditAction::kFlag);
  EXPECT_EQ(a.detectors[3].max_length, 1024u);
  EXPECT_EQ(a.detectors[4].name, "ticket");
  EXPECT_EQ(a.detectors[4].action, AuditAction::kRedact);
  EXPECT_EQ(a.detectors[4].max_length, 12u);
  EXPECT_FALSE(c->profiles.at("b").output_audit.enabled);
}

TEST(Config, OutputAuditErrorsNameTheKey) {
  struct Case {
    const char* toml;
    const char* key;
  } cases[] = {
      {"[profiles.a.output_audit]\naction = \"hide\"\n", "profiles.a.output_audit.action"},
      {"[profiles.a.output_audit]\ndetectors = [\"passwords\"]\n",
       "profiles.a.output_audit.detectors"},
      {"[profiles.a.output_audit]\nsecrets = 1\n", "profiles.a.output_audit.secrets"},
      {"[profiles.a.output_audit.patterns]\nx = \"(unclosed\"\n",
       "profiles.a.output_audit.patterns.x"},
      {"[profiles.a.output_audit.patterns]\nx = \"a*\"\n", "profiles.a.output_audit.patterns.x"},
      {"[profiles.a.output_audit.patterns]\njwt = \"abc\"\n",
       "profiles.a.output_audit.patterns.jwt"},
      {"[profiles.a.output_audit.patterns]\nx = { regex = \"abc\", max_length = 0 }\n",
       "profiles.a.output_audit.patterns.x.max_length"},
      {"[profiles.a.output_audit.actions]\nnope = \"flag\"\n",
       "profiles.a.output_audit.actions.nope"},
  };
  for (const auto& c : cases) {
    auto r = ParseConfig(c.toml, "t.toml");
    ASSERT_FALSE(r.ok()) << c.toml;
    EXPECT_NE(r.error().message.find(c.key), std::string::npos) << r.error().message;
  }
}

TEST(Config, EventsRulesAndWebhooks) {
  auto c = ParseConfig(R"(
[profiles.a]
[events]
memory_kills_in_a_row = 5
auth_failures = 20
auth_window = "2m"
[[events.quarantine]]
name = "escapes"
kinds = ["seccomp_kill", "protocol_error"]
count = 2
window = "5m"
[[events.webhook]]
url = "http://127.0.0.1:9000/hook"
secret = "0123456789abcdef"
kinds = ["lockdown"]
max_per_minute = 5
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->events.quarantine.size(), 1u);
  EXPECT_EQ(c->events.quarantine[0].name, "escapes");
  EXPECT_EQ(c->events.quarantine[0].count, 2);
  EXPECT_EQ(c->events.quarantine[0].window_s, 300);
  ASSERT_EQ(c->events.webhooks.size(), 1u);
  EXPECT_EQ(c->events.webhooks[0].name, "webhook1");
  EXPECT_EQ(c->events.webhooks[0].max_per_minute, 5);
  EXPECT_EQ(c->events.memory_kills_in_a_row, 5);
  EXPECT_EQ(c->events.auth_failures, 20);
  EXPECT_EQ(c->events.auth_window_s, 120);
  auto defaults = ParseConfig("[profiles.a]\n", "t.toml");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->events.memory_kills_in_a_row, 3);
  EXPECT_EQ(defaults->events.auth_failures, 10);
  EXPECT_EQ(defaults->events.auth_window_s, 60);
  struct Case {
    const char* toml;
    const char* key;
  } bad[] = {
      {"[[events.quarantine]]\nkinds = [\"volcano\"]\n", "events.quarantine[0].kinds"},
      {"[[events.quarantine]]\ncount = 3\n", "events.quarantine[0]"},
      {"[[events.webhook]]\nurl = \"https://x/h\"\nsecret = \"0123456789abcdef\"\n",
       "events.webhook[0].url"},
      {"[[events.webhook]]\nurl = \"http://x/h\"\nsecret = \"short\"\n",
       "events.webhook[0].secret"},
      {"[events]\nalarms = 1\n", "events.alarms"},
      {"[events]\nmemory_kills_in_a_row = 0\n", "events.memory_kills_in_a_row"},
      {"[events]\nauth_failures = \"ten\"\n", "events.auth_failures"},
      {"[events]\nauth_window = \"500ms\"\n", "events.auth_window"},
  };
  for (const auto& b : bad) {
    auto r = ParseConfig(std::string("[profiles.a]\n") + b.toml, "t.toml");
    ASSERT_FALSE(r.ok()) << b.toml;
    EXPECT_NE(r.error().message.find(b.key), std::string::npos) << r.error().message;
  }
}

TEST(Config, DurationsAreFiniteAndBounded) {
  struct Case {
    const char* toml;
    const char* key;
  } cases[] = {
      {"[server]\nqueue_timeout = inf\n[profiles.default]\n", "server.queue_timeout"},
      {"[server]\nsession_idle_ttl = \"1e308m\"\n[profiles.default]\n", "server.session_idle_ttl"},
      {"[server]\nclient_timeout = 2e9\n[profiles.default]\n", "server.client_timeout"},
      {"[profiles.default.max]\ntimeout = 1e300\n", "profiles.default.max.timeout"},
  };
  for (const auto& c : cases) {
    auto r = ParseConfig(c.toml, "t.toml");
    ASSERT_FALSE(r.ok()) << c.toml;
    EXPECT_NE(r.error().message.find(c.key), std::string::npos) << r.error().message;
  }
  EXPECT_TRUE(
      ParseConfig("[server]\nsession_max_lifetime = 1e9\n[profiles.default]\n", "t.toml").ok());
}

// toml++ 3.3.0 aborted (an assertion) or reached __builtin_unreachable() on
// these; they are parse errors (found by fuzz/config_fuzzer.cc).
TEST(Config, MalformedTextIsAnErrorNeverACrash) {
  for (const std::string& bad :
       {std::string("[\t\0", 3), std::string("[[[1]]]"), std::string("\xC3\xA9 = 1\n"),
        std::string("[caf\xC3\xA9]\n"), std::string("a = 1\"\xC2\xA7\"\n")}) {
    auto r = ParseConfig(bad, "t.toml");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().message.rfind("t.toml:1", 0), 0u) << r.error().message;
    }
  }
  // Outside ASCII inside strings and comments is fine.
  EXPECT_TRUE(
      ParseConfig(
          "# caf\xC3\xA9\n[server]\nmcp_allowed_origins = [\"https://caf\xC3\xA9.example\"]\n"
          "[profiles.default]\n",
          "t.toml")
          .ok());
}

TEST(Config, StoreUrlAndPool) {
  const std::string profile = "[profiles.default]\ninterpreter = \"/usr/bin/python3\"\n";
  auto none = ParseConfig(profile, "t.toml");
  ASSERT_TRUE(none.ok()) << none.error().ToString();
  EXPECT_EQ(none->store.url, "");  // SQLite in data_dir, as before
  EXPECT_EQ(none->store.pool, 4);
  EXPECT_EQ(none->store.key_cache_s, 1);
  auto pg = ParseConfig(
      profile + "[store]\nurl = \"postgresql://kiln@db/kiln\"\npool = 8\nkey_cache = 0.5\n",
      "t.toml");
  ASSERT_TRUE(pg.ok()) << pg.error().ToString();
  EXPECT_EQ(pg->store.url, "postgresql://kiln@db/kiln");
  EXPECT_EQ(pg->store.pool, 8);
  EXPECT_EQ(pg->store.key_cache_s, 0.5);
  for (const char* bad :
       {"[store]\nurl = \"mysql://db\"\n", "[store]\nurl = 5\n", "[store]\npool = 0\n",
        "[store]\npool = 65\n", "[store]\nhost = \"x\"\n", "store = 1\n",
        "[store]\nkey_cache = 61\n", "[store]\nkey_cache = -1\n"}) {
    auto r = ParseConfig(profile + bad, "t.toml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("store"), std::string::npos) << r.error().message;
  }
}

TEST(Config, Fleet) {
  const std::string profile = "[profiles.default]\ninterpreter = \"/usr/bin/python3\"\n";
  auto c = ParseConfig(profile +
                           "[fleet]\nnode = \"kiln-1\"\nadvertise = \"10.0.0.1:8080\"\n"
                           "heartbeat = 1\nnode_timeout = 5\n",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->fleet.node, "kiln-1");
  EXPECT_EQ(c->fleet.advertise, "10.0.0.1:8080");
  EXPECT_EQ(c->fleet.heartbeat_s, 1);
  EXPECT_EQ(c->fleet.node_timeout_s, 5);
  for (const char* bad : {"[fleet]\nnode = \"Kiln.1\"\n", "[fleet]\nheartbeat = 0\n",
                          "[fleet]\nheartbeat = 3\nnode_timeout = 5\n", "[fleet]\nx = 1\n",
                          "[fleet]\nadvertise = \"10.0.0.1\"\n", "[fleet]\nadvertise = \":8080\"\n",
                          "[fleet]\nadvertise = \"h:0\"\n", "[fleet]\nadvertise = \"h:65536\"\n",
                          "[fleet]\nadvertise = \"h:80x\"\n"}) {
    auto r = ParseConfig(profile + bad, "t.toml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("fleet"), std::string::npos) << r.error().message;
  }
}

TEST(Config, TheRulesFlagsShareWithTheFile) {
  EXPECT_TRUE(CheckNodeId("kiln-0").ok());
  EXPECT_TRUE(CheckNodeId(std::string(32, 'a')).ok());
  for (const char* bad : {"", "Kiln", "kiln_0", "kiln.0", "kiln 0"}) {
    EXPECT_FALSE(CheckNodeId(bad).ok()) << bad;
  }
  EXPECT_FALSE(CheckNodeId(std::string(33, 'a')).ok());
  for (const char* good : {"", "postgresql://u@h/db", "postgres:///db?host=/run"}) {
    EXPECT_TRUE(CheckStoreUrl(good).ok()) << good;
  }
  for (const char* bad : {"mysql://h/db", "/var/lib/kiln", "postgresql:/h"}) {
    EXPECT_FALSE(CheckStoreUrl(bad).ok()) << bad;
  }
  for (const char* good : {"10.0.0.1:8080", "kiln-0.kiln.kiln.svc:1", "[::1]:65535"}) {
    EXPECT_TRUE(CheckHostPort(good).ok()) << good;
  }
  for (const char* bad :
       {"", "10.0.0.1", ":80", "h:", "h:0", "h:65536", "h:123456", "[]:80", "h:-1", "h: 80"}) {
    EXPECT_FALSE(CheckHostPort(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace kiln::config
