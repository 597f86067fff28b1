#include "store/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "store/api_key.h"
#include "store/backends.h"
#include "testlib/pg_cluster.h"
#include "testlib/temp_dir.h"

namespace kiln::store {
namespace {

using kiln::testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every byte the database could hold: the main file, the WAL and the shm.
std::string AllDbBytes(const std::string& dir) {
  return ReadFile(dir + "/kiln.db") + ReadFile(dir + "/kiln.db-wal") +
         ReadFile(dir + "/kiln.db-shm");
}

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

std::unique_ptr<Store> MustOpen(const std::string& dir, OpenOptions options = {}) {
  auto s = Store::Open(dir, std::move(options));
  if (!s.ok()) {
    ADD_FAILURE() << s.error().ToString();
    return nullptr;
  }
  return std::move(*s);
}

AuditStart Start(std::string id, int64_t started_ms, std::string tenant = "acme") {
  AuditStart s;
  s.id = std::move(id);
  s.tenant = std::move(tenant);
  s.key_id = "0123456789ab";
  s.profile = "default";
  s.started_ms = started_ms;
  s.code = "print(1)";
  s.client_addr = "10.0.0.7:51234";
  return s;
}

AuditFinish Finish(std::string id, int64_t ended_ms, std::string status = "ok") {
  AuditFinish f;
  f.id = std::move(id);
  f.ended_ms = ended_ms;
  f.status = std::move(status);
  f.exit_code = 0;
  return f;
}

// Designated initializers would trip -Wmissing-field-initializers.
AuditQuery Q(std::optional<std::string> tenant = std::nullopt,
             std::optional<std::string> session = std::nullopt,
             std::optional<std::string> status = std::nullopt,
             std::optional<int64_t> since_ms = std::nullopt, int limit = 100) {
  AuditQuery q;
  q.tenant = std::move(tenant);
  q.session_id = std::move(session);
  q.status = std::move(status);
  q.since_ms = since_ms;
  q.limit = limit;
  return q;
}
AuditQuery Limit(int n) { return Q(std::nullopt, std::nullopt, std::nullopt, std::nullopt, n); }
OpenOptions NoCreate() {
  OpenOptions o;
  o.create = false;
  return o;
}
OpenOptions FakeClock(int64_t* now) {
  OpenOptions o;
  o.now_ms = [now] { return *now; };
  return o;
}

std::optional<AuditRow> Get(Store& s, const std::string& id) {
  auto rows = s.Query(Limit(1'000'000));
  if (!rows.ok()) return std::nullopt;
  for (auto& r : *rows) {
    if (r.id == id) return r;
  }
  return std::nullopt;
}

// --- Opening.

TEST(StoreOpen, CreatesPrivateDirectoryAndFiles) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/data";
  const mode_t old = ::umask(0);  // the modes must not depend on the caller's umask
  auto s = MustOpen(dir);
  ::umask(old);
  ASSERT_NE(s, nullptr);
  auto k = s->CreateKey("t");  // something in the WAL
  ASSERT_TRUE(k.ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((tmp.path() + "/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (const char* f : {"/kiln.db", "/kiln.db-wal", "/kiln.db-shm"}) {
    ASSERT_EQ(::stat((dir + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << f;
  }
  EXPECT_EQ(s->path(), dir + "/kiln.db");
}

TEST(StoreOpen, UsesWalAndRecordsTheSchemaVersion) {
  TempDir tmp;
  ASSERT_NE(MustOpen(tmp.path()), nullptr);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((tmp.path() + "/kiln.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(static_cast<const char*>(static_cast<const void*>(sqlite3_column_text(st, 0))),
               "wal");
  sqlite3_finalize(st);
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT version FROM schema_version", -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), kSchemaVersion);
  EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);  // exactly one row
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(StoreOpen, RefusesANewerSchema) {
  TempDir tmp;
  ASSERT_NE(MustOpen(tmp.path()), nullptr);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((tmp.path() + "/kiln.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 99", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = Store::Open(tmp.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kFailedPrecondition);
  EXPECT_NE(s.error().message.find("99"), std::string::npos) << s.error().message;
}

TEST(StoreOpen, WithoutCreateAMissingDatabaseIsNotFound) {
  TempDir tmp;
  auto s = Store::Open(tmp.path() + "/nope", NoCreate());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/nope"));
  ASSERT_NE(MustOpen(tmp.path()), nullptr);
  EXPECT_NE(MustOpen(tmp.path(), NoCreate()), nullptr);
}

TEST(StoreOpen, DefaultDataDir) {
  EXPECT_EQ(DefaultDataDirFor(true, "/x", "/h"), "/var/lib/kiln");
  EXPECT_EQ(DefaultDataDirFor(false, "/x/state", "/h"), "/x/state/kiln");
  EXPECT_EQ(DefaultDataDirFor(false, "relative", "/h"), "/h/.local/state/kiln");
  EXPECT_EQ(DefaultDataDirFor(false, "", "/h"), "/h/.local/state/kiln");
  if (::geteuid() == 0) {
    EXPECT_EQ(DefaultDataDir(), "/var/lib/kiln");
  }
}

// --- The same tests on both backends (P16; docs/adr/0020).

// One throwaway PostgreSQL cluster for the whole binary, started on first
// use; nullptr (and the reason) where it cannot start here.
kiln::testing::PgCluster* SharedCluster(std::string* why_not) {
  static std::string why;
  static std::unique_ptr<kiln::testing::PgCluster> cluster = kiln::testing::PgCluster::Start(&why);
  *why_not = why;
  return cluster.get();
}

// A fresh database per test: a directory for SQLite, a new database in the
// shared cluster for PostgreSQL. Open() may be called again for another
// connection to the same database (another process, a restart).
class StoreBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "postgres") {
      std::string why;
      cluster_ = SharedCluster(&why);
      if (cluster_ == nullptr) GTEST_SKIP() << "no PostgreSQL cluster: " << why;
      static int n = 0;
      auto url =
          cluster_->CreateDatabase("t" + std::to_string(::getpid()) + "_" + std::to_string(++n));
      ASSERT_TRUE(url.has_value());
      url_ = *url;
    }
  }
  bool postgres() const { return GetParam() == "postgres"; }
  Result<std::unique_ptr<Store>> OpenRaw(OpenOptions options = {}) {
    return postgres() ? Store::OpenUrl(url_, std::move(options))
                      : Store::Open(tmp_.path(), std::move(options));
  }
  std::unique_ptr<Store> Open(OpenOptions options = {}) {
    auto s = OpenRaw(std::move(options));
    if (!s.ok()) {
      ADD_FAILURE() << s.error().ToString();
      return nullptr;
    }
    return std::move(*s);
  }
  // Every byte the database could hold.
  std::string DbBytes() const {
    return postgres() ? cluster_->AllBytes() : AllDbBytes(tmp_.path());
  }

  TempDir tmp_;
  kiln::testing::PgCluster* cluster_ = nullptr;
  std::string url_;
};

std::string BackendName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

#define KILN_STORE_SUITE(name)             \
  class name : public StoreBackendTest {}; \
  INSTANTIATE_TEST_SUITE_P(, name, ::testing::Values("sqlite", "postgres"), BackendName)
KILN_STORE_SUITE(StoreKeys);
KILN_STORE_SUITE(StoreAudit);
KILN_STORE_SUITE(StoreOutputHits);
KILN_STORE_SUITE(StoreEvents);
KILN_STORE_SUITE(StoreDurability);
KILN_STORE_SUITE(StoreConcurrency);
KILN_STORE_SUITE(StoreControls);
KILN_STORE_SUITE(StoreNodes);
#undef KILN_STORE_SUITE

// --- Keys.

TEST_P(StoreKeys, CreateAuthenticateListRevoke) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto a = s->CreateKey("acme");
  auto b = s->CreateKey("globex");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->info.id, b->info.id);
  EXPECT_EQ(a->key.rfind("kiln_" + a->info.id + "_", 0), 0u);
  EXPECT_EQ(a->key.size(), kKeyChars);

  auto auth = s->Authenticate(a->key);
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  ASSERT_TRUE(auth->has_value());
  EXPECT_EQ((*auth)->id, a->info.id);
  EXPECT_EQ((*auth)->tenant, "acme");
  auto auth_b = s->Authenticate(b->key);
  ASSERT_TRUE(auth_b.ok() && auth_b->has_value());
  EXPECT_EQ((*auth_b)->tenant, "globex");

  auto list = s->ListKeys();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  std::set<std::string> ids;
  for (const auto& k : *list) {
    ids.insert(k.id);
    EXPECT_FALSE(k.revoked_ms.has_value());
    EXPECT_TRUE(k.last_used_ms.has_value());  // both were used above
  }
  EXPECT_EQ(ids, (std::set<std::string>{a->info.id, b->info.id}));

  ASSERT_TRUE(s->RevokeKey(a->info.id).ok());
  auto after = s->Authenticate(a->key);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
  auto other = s->Authenticate(b->key);  // revoking one key leaves the others
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->has_value());
  list = s->ListKeys();
  ASSERT_TRUE(list.ok());
  for (const auto& k : *list) EXPECT_EQ(k.revoked_ms.has_value(), k.id == a->info.id);
}

TEST_P(StoreKeys, RevokeTwiceKeepsTheFirstTimeAndUnknownIdsAreNotFound) {
  int64_t now = 1'000'000;
  auto s = Open(FakeClock(&now));
  ASSERT_NE(s, nullptr);
  auto k = s->CreateKey("acme");
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(s->RevokeKey(k->info.id).ok());
  now += 5000;
  ASSERT_TRUE(s->RevokeKey(k->info.id).ok());
  auto list = s->ListKeys();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].revoked_ms, 1'000'000);

  Status missing = s->RevokeKey("0123456789ab");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Code::kNotFound);
  Status bad = s->RevokeKey("not-an-id");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Code::kInvalidArgument);
}

TEST_P(StoreKeys, TenantNamesAreValidated) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  for (std::string bad : {std::string(), std::string(65, 'x'), std::string("a b"),
                          std::string("a/b"), std::string("x;DROP TABLE api_keys")}) {
    auto r = s->CreateKey(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Code::kInvalidArgument);
  }
  EXPECT_TRUE(s->CreateKey(std::string(64, 'x')).ok());
  EXPECT_TRUE(s->CreateKey("Team-1.prod_x").ok());
  auto list = s->ListKeys();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
}

TEST_P(StoreKeys, WrongOrMalformedKeysAreNotAuthenticated) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto a = s->CreateKey("acme");
  auto b = s->CreateKey("acme");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string& key = a->key;
  const std::string secret_part = key.substr(kKeyPrefix.size() + kKeyIdChars + 1);

  // Same id, another valid secret: flip the first secret character (any of
  // the first 42 characters carries only data bits, so the result is canonical).
  std::string wrong_secret = key;
  char& c = wrong_secret[kKeyPrefix.size() + kKeyIdChars + 1];
  c = c == 'A' ? 'B' : 'A';
  ASSERT_TRUE(ParseApiKey(wrong_secret).has_value());
  // Another key's id with this key's secret, and an unknown id.
  const std::string swapped = "kiln_" + b->info.id + "_" + secret_part;
  const std::string unknown_id = "kiln_ffffffffffff_" + secret_part;
  std::string bad_b64 = key;
  bad_b64.back() = '!';
  // The last character carries 2 unused bits, which must be zero.
  constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string noncanonical = key;
  noncanonical.back() = kAlphabet[kAlphabet.find(key.back()) | 1];
  std::string upper_id = key;
  for (size_t i = 5; i < 17; ++i) upper_id[i] = static_cast<char>(std::toupper(upper_id[i]));

  const std::string cases[] = {
      "",
      "kiln_",
      key.substr(kKeyPrefix.size()),  // no prefix
      "KILN_" + key.substr(kKeyPrefix.size()),
      "Bearer " + key,
      key + "\n",
      key + "=",
      key.substr(0, key.size() - 1),
      key + "A",
      bad_b64,
      noncanonical,
      upper_id == key ? std::string("x") : upper_id,
      wrong_secret,
      swapped,
      unknown_id,
      std::string(1 << 20, 'k'),
      key + std::string(1 << 20, 'A'),
      std::string(key.size(), '\0'),
  };
  for (const auto& presented : cases) {
    auto r = s->Authenticate(presented);
    ASSERT_TRUE(r.ok()) << r.error().ToString();  // never an error
    EXPECT_FALSE(r->has_value()) << "authenticated: '" << presented.substr(0, 80) << "'";
  }
  auto good = s->Authenticate(key);  // and the real key still works
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good->has_value());
}

TEST_P(StoreKeys, LastUsedIsUpdatedAtMostOnceAMinute) {
  int64_t now = 10'000'000;
  auto s = Open(FakeClock(&now));
  ASSERT_NE(s, nullptr);
  auto k = s->CreateKey("acme");
  ASSERT_TRUE(k.ok());
  auto last_used = [&]() -> std::optional<int64_t> {
    auto list = s->ListKeys();
    return list.ok() && list->size() == 1 ? (*list)[0].last_used_ms : std::nullopt;
  };
  EXPECT_EQ(last_used(), std::nullopt);
  ASSERT_TRUE(s->Authenticate(k->key).ok());
  EXPECT_EQ(last_used(), 10'000'000);
  now += 59'000;
  auto r = s->Authenticate(k->key);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->last_used_ms, 10'000'000);
  EXPECT_EQ(last_used(), 10'000'000);
  now += 1'000;
  ASSERT_TRUE(s->Authenticate(k->key).ok());
  EXPECT_EQ(last_used(), 10'060'000);
}

// OpenOptions::key_cache_ms (a fleet's [store] key_cache): a key that
// authenticated is answered from memory for that long, so a revocation made
// through another Store (another node, `kiln keys revoke --store`) is seen at
// most key_cache_ms later; this Store's own RevokeKey at once.
TEST_P(StoreKeys, CachedKeysAreRefusedAtMostTheCacheTimeAfterARevocationElsewhere) {
  int64_t now = 5'000'000;
  OpenOptions cached = FakeClock(&now);
  cached.key_cache_ms = 1000;
  auto node = Open(cached);
  ASSERT_NE(node, nullptr);
  auto other = Open(FakeClock(&now));  // the same database, no cache
  ASSERT_NE(other, nullptr);
  auto k = node->CreateKey("acme");
  auto k2 = node->CreateKey("acme");
  ASSERT_TRUE(k.ok() && k2.ok());
  auto ok = [&](Store& s, const std::string& key) {
    auto r = s.Authenticate(key);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() && r->has_value();
  };
  ASSERT_TRUE(ok(*node, k->key));
  ASSERT_TRUE(ok(*node, k2->key));

  ASSERT_TRUE(other->RevokeKey(k->info.id).ok());
  EXPECT_FALSE(ok(*other, k->key));  // the uncached store sees it at once
  now += 999;
  EXPECT_TRUE(ok(*node, k->key));  // within the cache time: still from memory
  now += 1;
  EXPECT_FALSE(ok(*node, k->key));  // the bound: refused from then on
  now += 5000;
  EXPECT_FALSE(ok(*node, k->key));

  // A wrong secret for a cached id is refused from memory too.
  ASSERT_TRUE(ok(*node, k2->key));
  std::string wrong = k2->key;
  wrong[18] = wrong[18] == 'a' ? 'b' : 'a';  // the secret's first character
  EXPECT_FALSE(ok(*node, wrong));
  EXPECT_TRUE(ok(*node, k2->key));
  // This store's own revocation is not delayed.
  ASSERT_TRUE(node->RevokeKey(k2->info.id).ok());
  EXPECT_FALSE(ok(*node, k2->key));

  // Without a cache (the default, and every SQLite node) each call reads.
  auto k3 = node->CreateKey("acme");
  ASSERT_TRUE(k3.ok());
  ASSERT_TRUE(ok(*other, k3->key));
  ASSERT_TRUE(node->RevokeKey(k3->info.id).ok());
  EXPECT_FALSE(ok(*other, k3->key));
}

TEST_P(StoreKeys, SecretIsNowhereInTheDatabaseFiles) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  std::vector<NewKey> keys;
  for (int i = 0; i < 3; ++i) {
    auto k = s->CreateKey("tenant" + std::to_string(i));
    ASSERT_TRUE(k.ok());
    auto r = s->Authenticate(k->key);
    ASSERT_TRUE(r.ok() && r->has_value());
    keys.push_back(std::move(*k));
  }
  ASSERT_TRUE(s->ListKeys().ok());
  ASSERT_TRUE(s->RevokeKey(keys[0].info.id).ok());
  // Once with the store open (rows in the WAL), once closed (checkpointed
  // into the main file).
  for (int round = 0; round < 2; ++round) {
    if (round == 1) s.reset();
    const std::string bytes = DbBytes();
    ASSERT_FALSE(bytes.empty());
    for (const auto& k : keys) {
      auto parsed = ParseApiKey(k.key);
      ASSERT_TRUE(parsed.has_value());
      const std::string secret_text = k.key.substr(kKeyPrefix.size() + kKeyIdChars + 1);
      EXPECT_FALSE(Contains(bytes, k.key));
      EXPECT_FALSE(Contains(bytes, secret_text));
      EXPECT_FALSE(Contains(bytes, secret_text.substr(0, 16)));
      EXPECT_FALSE(Contains(bytes, parsed->secret));
      EXPECT_FALSE(Contains(bytes, HexEncode(parsed->secret)));
      // The search is over the right bytes: the id and the hash are there.
      EXPECT_TRUE(Contains(bytes, k.info.id));
      auto digest = Sha256(parsed->secret);
      ASSERT_TRUE(digest.ok());
      EXPECT_TRUE(Contains(bytes, *digest)) << "round " << round;
    }
  }
}

// --- Audit.

TEST_P(StoreAudit, BeginFinishRoundTrip) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  AuditStart st = Start("exec-1", 1000);
  st.session_id = "sess-9";
  st.code = "import numpy\nprint('hi')\n";
  ASSERT_TRUE(s->BeginExecution(st).ok());
  auto running = Get(*s, "exec-1");
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->status, "running");
  EXPECT_FALSE(running->ended_ms.has_value());
  EXPECT_FALSE(running->exit_code.has_value());
  EXPECT_FALSE(running->duration_ms.has_value());

  AuditFinish f = Finish("exec-1", 1500, "policy_violation");
  f.exit_code = std::nullopt;
  f.signal = 31;
  f.duration_ms = 480.5;
  f.cpu_ms = 120.25;
  f.peak_memory_bytes = 5ULL << 30;
  f.stdout_bytes = 1 << 20;
  f.stderr_bytes = 17;
  f.stdout_truncated = true;
  f.policy_violation = R"({"module":"os","line":1})";
  f.reason = "import of os refused";
  ASSERT_TRUE(s->FinishExecution(f).ok());

  auto r = Get(*s, "exec-1");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->tenant, "acme");
  EXPECT_EQ(r->key_id, "0123456789ab");
  EXPECT_EQ(r->profile, "default");
  EXPECT_EQ(r->session_id, "sess-9");
  EXPECT_EQ(r->client_addr, "10.0.0.7:51234");
  EXPECT_EQ(r->started_ms, 1000);
  EXPECT_EQ(r->ended_ms, 1500);
  EXPECT_EQ(r->status, "policy_violation");
  EXPECT_EQ(r->code, st.code);
  auto sha = Sha256Hex(st.code);
  ASSERT_TRUE(sha.ok());
  EXPECT_EQ(r->code_sha256, *sha);
  EXPECT_EQ(r->code_size, st.code.size());
  EXPECT_EQ(r->exit_code, std::nullopt);
  EXPECT_EQ(r->signal, 31);
  EXPECT_EQ(r->duration_ms, 480.5);
  EXPECT_EQ(r->cpu_ms, 120.25);
  EXPECT_EQ(r->peak_memory_bytes, 5ULL << 30);
  EXPECT_EQ(r->stdout_bytes, 1u << 20);
  EXPECT_EQ(r->stderr_bytes, 17u);
  EXPECT_EQ(r->stdout_truncated, true);
  EXPECT_EQ(r->stderr_truncated, false);
  EXPECT_EQ(r->policy_violation, f.policy_violation);
  EXPECT_EQ(r->reason, "import of os refused");
}

TEST_P(StoreAudit, WithoutStoreCodeOnlyTheHashAndSizeAreKept) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  AuditStart st = Start("exec-h", 1000);
  st.code = "abc";
  st.store_code = false;
  AuditStart marker = Start("exec-m", 1001);
  marker.code = "print('kiln-private-marker-7f3a9c')";
  marker.store_code = false;
  ASSERT_TRUE(s->BeginExecution(st).ok());
  ASSERT_TRUE(s->BeginExecution(marker).ok());
  ASSERT_TRUE(s->FinishExecution(Finish("exec-h", 1200)).ok());
  auto r = Get(*s, "exec-h");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, std::nullopt);
  EXPECT_EQ(r->code_sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(r->code_size, 3u);
  EXPECT_FALSE(Contains(DbBytes(), "kiln-private-marker-7f3a9c"));

  AuditStart kept = Start("exec-k", 1002);
  kept.code = "print('kiln-kept-marker-1b2c')";
  ASSERT_TRUE(s->BeginExecution(kept).ok());
  EXPECT_TRUE(Contains(DbBytes(), "kiln-kept-marker-1b2c"));  // the scan can see code
}

TEST_P(StoreAudit, DuplicateIdsUnknownIdsAndEmptyIdsAreErrors) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->BeginExecution(Start("dup", 1)).ok());
  Status again = s->BeginExecution(Start("dup", 2));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Code::kAlreadyExists);
  EXPECT_NE(again.error().message.find("insert execution"), std::string::npos)
      << again.error().message;
  Status unknown = s->FinishExecution(Finish("never-begun", 5));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Code::kNotFound);
  Status empty = s->BeginExecution(Start("", 1));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, Code::kInvalidArgument);
  auto bad_limit = s->Query(Limit(0));
  ASSERT_FALSE(bad_limit.ok());
  EXPECT_EQ(bad_limit.error().code, Code::kInvalidArgument);
}

TEST_P(StoreAudit, QueryFiltersAndOrder) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  struct Row {
    const char* id;
    int64_t started;
    const char* tenant;
    const char* session;
    const char* status;  // nullptr: still running
  } rows[] = {
      {"r1", 100, "acme", "s1", "ok"},      {"r2", 200, "acme", "s1", "error"},
      {"r3", 300, "globex", nullptr, "ok"}, {"r4", 400, "acme", "s2", "timeout"},
      {"r5", 500, "globex", "s1", nullptr},
  };
  for (const auto& r : rows) {
    AuditStart st = Start(r.id, r.started, r.tenant);
    if (r.session != nullptr) st.session_id = r.session;
    ASSERT_TRUE(s->BeginExecution(st).ok());
    if (r.status != nullptr) {
      ASSERT_TRUE(s->FinishExecution(Finish(r.id, r.started + 5, r.status)).ok());
    }
  }
  auto ids = [&](const AuditQuery& q) {
    std::vector<std::string> out;
    auto res = s->Query(q);
    EXPECT_TRUE(res.ok());
    if (res.ok()) {
      for (const auto& r : *res) out.push_back(r.id);
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(ids({}), (V{"r5", "r4", "r3", "r2", "r1"}));
  EXPECT_EQ(ids(Q("acme")), (V{"r4", "r2", "r1"}));
  EXPECT_EQ(ids(Q(std::nullopt, "s1")), (V{"r5", "r2", "r1"}));
  EXPECT_EQ(ids(Q(std::nullopt, std::nullopt, "ok")), (V{"r3", "r1"}));
  EXPECT_EQ(ids(Q(std::nullopt, std::nullopt, "running")), (V{"r5"}));
  EXPECT_EQ(ids(Q(std::nullopt, std::nullopt, std::nullopt, 300)), (V{"r5", "r4", "r3"}));
  EXPECT_EQ(ids(Limit(2)), (V{"r5", "r4"}));
  EXPECT_EQ(ids(Q("acme", "s1", std::nullopt, 150)), (V{"r2"}));
  EXPECT_EQ(ids(Q("nobody")), V{});
  EXPECT_EQ(ids(Q("acme' OR '1'='1")), V{});
}

TEST_P(StoreAudit, MarkInterruptedFinishesRunningRowsOnly) {
  int64_t now = 777'000;
  auto s = Open(FakeClock(&now));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->BeginExecution(Start("a", 100)).ok());
  ASSERT_TRUE(s->BeginExecution(Start("b", 200)).ok());
  ASSERT_TRUE(s->BeginExecution(Start("c", 300)).ok());
  ASSERT_TRUE(s->FinishExecution(Finish("b", 250)).ok());
  auto n = s->MarkInterrupted();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  for (const char* id : {"a", "c"}) {
    auto r = Get(*s, id);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, "interrupted");
    EXPECT_EQ(r->ended_ms, 777'000);
    EXPECT_TRUE(r->reason.has_value());
  }
  auto b = Get(*s, "b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->status, "ok");
  EXPECT_EQ(b->ended_ms, 250);
  auto again = s->MarkInterrupted();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
}

TEST_P(StoreAudit, PruneDeletesOldFinishedRowsInBatches) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  // 1203 old finished rows (more than two batches), 3 new ones, and one old
  // row still running.
  for (int i = 0; i < 1203; ++i) {
    const std::string id = "old" + std::to_string(i);
    ASSERT_TRUE(s->BeginExecution(Start(id, 1000 + i)).ok());
    ASSERT_TRUE(s->FinishExecution(Finish(id, 3000)).ok());
  }
  for (int i = 0; i < 3; ++i) {
    const std::string id = "new" + std::to_string(i);
    ASSERT_TRUE(s->BeginExecution(Start(id, 1'000'000 + i)).ok());
    ASSERT_TRUE(s->FinishExecution(Finish(id, 1'000'100)).ok());
  }
  ASSERT_TRUE(s->BeginExecution(Start("old-running", 5)).ok());
  auto n = s->Prune(500'000);
  ASSERT_TRUE(n.ok()) << n.error().ToString();
  EXPECT_EQ(*n, 1203);
  auto rest = s->Query({});
  ASSERT_TRUE(rest.ok());
  std::set<std::string> ids;
  for (const auto& r : *rest) ids.insert(r.id);
  EXPECT_EQ(ids, (std::set<std::string>{"new0", "new1", "new2", "old-running"}));
  auto none = s->Prune(500'000);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  EXPECT_EQ(kDefaultRetentionDays, 30);
}

TEST_P(StoreOutputHits, RecordQueryAndPrune) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  OutputHitRow a;
  a.at_ms = 1000;
  a.execution_id = "e1";
  a.tenant = "acme";
  a.profile = "default";
  a.detector = "kiln_api_key";
  a.location = "stdout";
  a.action = "redact";
  a.count = 2;
  OutputHitRow b = a;
  b.execution_id = std::nullopt;
  b.session_id = "s1";
  b.location = "files/x.txt";
  b.at_ms = 2'000'000;
  ASSERT_TRUE(s->RecordOutputHits({a, b}).ok());
  auto all = s->QueryOutputHits({});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].location, "files/x.txt");  // newest first
  EXPECT_FALSE((*all)[0].execution_id.has_value());
  EXPECT_EQ((*all)[0].session_id, "s1");
  OutputHitQuery q;
  q.execution_id = "e1";
  auto one = s->QueryOutputHits(q);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].count, 2u);
  EXPECT_EQ((*one)[0].detector, "kiln_api_key");
  // Retention: pruned with the executions.
  auto n = s->Prune(500'000);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  auto rest = s->QueryOutputHits({});
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->size(), 1u);
}

TEST_P(StoreEvents, RecordQueryFilterCursorAndPrune) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EventRow e;
  e.at_ms = 1000;
  e.kind = "protocol_error";
  e.tenant = "acme";
  e.key_id = "0123456789ab";
  e.execution_id = "x1";
  e.client_addr = "127.0.0.1";
  e.detail = "forged frame";
  auto first = s->RecordEvent(e);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  e.at_ms = 2'000'000;
  e.kind = "auth_failures";
  e.tenant = "";
  e.execution_id = std::nullopt;
  auto second = s->RecordEvent(e);
  ASSERT_TRUE(second.ok());
  EXPECT_GT(*second, *first);
  auto all = s->QueryEvents({});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].kind, "auth_failures");  // newest first
  EXPECT_FALSE((*all)[0].execution_id.has_value());
  EventQuery by_kind;
  by_kind.kind = "protocol_error";
  auto pe = s->QueryEvents(by_kind);
  ASSERT_TRUE(pe.ok());
  ASSERT_EQ(pe->size(), 1u);
  EXPECT_EQ((*pe)[0].detail, "forged frame");
  EXPECT_EQ((*pe)[0].execution_id, "x1");
  EventQuery after;
  after.after_id = *first;
  after.oldest_first = true;
  auto later = s->QueryEvents(after);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ((*later)[0].id, *second);
  auto n = s->Prune(500'000);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  auto rest = s->QueryEvents({});
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->size(), 1u);
}

// --- Durability and concurrency.

TEST_P(StoreDurability, RowsSurviveSigkillAndAreSeenByAnotherConnection) {
  {
    // Visible to a second connection while the first is still open.
    auto a = Open();
    ASSERT_NE(a, nullptr);
    ASSERT_TRUE(a->BeginExecution(Start("live", 10)).ok());
    auto b = Open(NoCreate());
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(Get(*b, "live").has_value());
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: write a finished and a running row, then die without any
    // cleanup, as a SIGKILLed server would.
    auto opened = OpenRaw();
    if (!opened.ok()) ::_exit(10);
    Store& s = **opened;
    if (!s.BeginExecution(Start("done", 100)).ok()) ::_exit(11);
    if (!s.FinishExecution(Finish("done", 200)).ok()) ::_exit(12);
    if (!s.BeginExecution(Start("in-flight", 300)).ok()) ::_exit(13);
    ::kill(::getpid(), SIGKILL);
    ::_exit(14);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);

  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto done = Get(*s, "done");
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->status, "ok");
  EXPECT_EQ(done->ended_ms, 200);
  auto n = s->MarkInterrupted();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);  // "live" from above and the child's "in-flight"
  auto in_flight = Get(*s, "in-flight");
  ASSERT_TRUE(in_flight.has_value());
  EXPECT_EQ(in_flight->status, "interrupted");
}

TEST_P(StoreConcurrency, EightThreadsBeginFinishAuthenticate) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto key = s->CreateKey("acme");
  ASSERT_TRUE(key.ok());
  // A second process-like connection reading at the same time.
  auto reader = Open();
  ASSERT_NE(reader, nullptr);
  constexpr int kThreads = 8, kPerThread = 40;
  std::string wrong = key->key;
  wrong[kKeyPrefix.size() + kKeyIdChars + 1] =
      wrong[kKeyPrefix.size() + kKeyIdChars + 1] == 'A' ? 'B' : 'A';
  std::atomic<int> failures{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        if (!s->BeginExecution(Start(id, t * 1000 + i)).ok()) ++failures;
        auto ok = s->Authenticate(key->key);
        if (!ok.ok() || !ok->has_value()) ++failures;
        auto bad = s->Authenticate(wrong);
        if (!bad.ok() || bad->has_value()) ++failures;
        if (!s->FinishExecution(Finish(id, t * 1000 + i + 1)).ok()) ++failures;
      }
    });
  }
  std::thread read_thread([&] {
    while (!stop) {
      if (!reader->Query(Limit(10)).ok()) ++failures;
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  read_thread.join();
  EXPECT_EQ(failures.load(), 0);
  auto all = s->Query(Limit(1000));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kThreads * kPerThread));
  for (const auto& r : *all) EXPECT_EQ(r.status, "ok") << r.id;
}

// --- Operator controls, usage and the webhook queue.

TEST_P(StoreControls, QuarantineSetReplaceListClear) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto none = s->ListQuarantines();
  ASSERT_TRUE(none.ok()) << none.error().ToString();
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(s->SetQuarantine(QuarantineRow{"zeta", 10, "first", "kiln CLI"}).ok());
  ASSERT_TRUE(s->SetQuarantine(QuarantineRow{"Acme", 20, "why", "key 0123456789ab"}).ok());
  // Again for the same tenant: replaced, not a second row.
  ASSERT_TRUE(s->SetQuarantine(QuarantineRow{"zeta", 30, "second", "rule r1"}).ok());
  auto list = s->ListQuarantines();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].tenant, "Acme");  // byte order: upper case first
  EXPECT_EQ((*list)[1].tenant, "zeta");
  EXPECT_EQ((*list)[1].since_ms, 30);
  EXPECT_EQ((*list)[1].reason, "second");
  EXPECT_EQ((*list)[1].by, "rule r1");
  EXPECT_FALSE(s->SetQuarantine(QuarantineRow{"a b", 1, "", ""}).ok());
  auto cleared = s->ClearQuarantine("zeta");
  ASSERT_TRUE(cleared.ok());
  EXPECT_TRUE(*cleared);
  cleared = s->ClearQuarantine("zeta");
  ASSERT_TRUE(cleared.ok());
  EXPECT_FALSE(*cleared);
  list = s->ListQuarantines();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].tenant, "Acme");
}

TEST_P(StoreControls, LockdownIsKeptAcrossOpens) {
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    auto off = s->GetLockdown();
    ASSERT_TRUE(off.ok()) << off.error().ToString();
    EXPECT_FALSE(off->on);
    ASSERT_TRUE(s->SetLockdown(LockdownState{true, "incident 7", 500, "kiln CLI"}).ok());
    ASSERT_TRUE(s->SetLockdown(LockdownState{true, "incident 8", 600, "key abc"}).ok());
  }
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto on = s->GetLockdown();
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->on);
  EXPECT_EQ(on->reason, "incident 8");
  EXPECT_EQ(on->since_ms, 600);
  EXPECT_EQ(on->by, "key abc");
  ASSERT_TRUE(s->SetLockdown(LockdownState{false, "", 700, "kiln CLI"}).ok());
  on = s->GetLockdown();
  ASSERT_TRUE(on.ok());
  EXPECT_FALSE(on->on);
}

TEST_P(StoreControls, UsageSinceCountsExecutionsRejectionsAndEvents) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->BeginExecution(Start("old", 50, "acme")).ok());
  ASSERT_TRUE(s->BeginExecution(Start("a1", 100, "acme")).ok());
  ASSERT_TRUE(s->BeginExecution(Start("a2", 300, "acme")).ok());
  ASSERT_TRUE(s->FinishExecution(Finish("a2", 310, "rejected")).ok());
  ASSERT_TRUE(s->BeginExecution(Start("g1", 200, "globex")).ok());
  EventRow e;
  e.at_ms = 150;
  e.kind = "auth_failures";
  e.tenant = "initech";
  ASSERT_TRUE(s->RecordEvent(e).ok());
  e.tenant = "";  // an unauthenticated address: no tenant to count it for
  ASSERT_TRUE(s->RecordEvent(e).ok());
  auto usage = s->UsageSince(100);
  ASSERT_TRUE(usage.ok()) << usage.error().ToString();
  ASSERT_EQ(usage->size(), 3u);
  EXPECT_EQ((*usage)[0].tenant, "acme");
  EXPECT_EQ((*usage)[0].executions, 2);
  EXPECT_EQ((*usage)[0].rejected, 1);
  EXPECT_EQ((*usage)[0].last_execution_ms, 300);
  EXPECT_EQ((*usage)[1].tenant, "globex");
  EXPECT_EQ((*usage)[1].executions, 1);
  EXPECT_EQ((*usage)[1].rejected, 0);
  EXPECT_EQ((*usage)[2].tenant, "initech");
  EXPECT_EQ((*usage)[2].executions, 0);
  EXPECT_EQ((*usage)[2].events, 1);
}

TEST_P(StoreControls, WebhookQueueDueRetryDone) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 3; ++i) {
    WebhookDelivery d;
    d.webhook = "pager";
    d.event_id = 10 + i;
    d.kind = "escape_attempt";
    d.body = "{\"n\":" + std::to_string(i) + "}";
    d.created_ms = 1000;
    d.next_ms = 1000 + i * 100;
    ASSERT_TRUE(s->EnqueueWebhook(d).ok());
  }
  auto queued = s->WebhookQueued();
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(*queued, 3);
  auto due = s->DueWebhooks(1100, 10);
  ASSERT_TRUE(due.ok()) << due.error().ToString();
  ASSERT_EQ(due->size(), 2u);  // the third is not due before 1200
  EXPECT_EQ((*due)[0].event_id, 10);
  EXPECT_EQ((*due)[0].body, "{\"n\":0}");
  EXPECT_EQ((*due)[0].attempts, 0);
  EXPECT_LT((*due)[0].id, (*due)[1].id);
  ASSERT_TRUE(s->WebhookRetry((*due)[0].id, 1, 5000, std::string(600, 'e')).ok());
  ASSERT_TRUE(s->WebhookDone((*due)[1].id).ok());
  due = s->DueWebhooks(1300, 10);
  ASSERT_TRUE(due.ok());
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ((*due)[0].event_id, 12);
  due = s->DueWebhooks(5000, 1);
  ASSERT_TRUE(due.ok());
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ((*due)[0].event_id, 10);
  EXPECT_EQ((*due)[0].attempts, 1);
  EXPECT_EQ((*due)[0].last_error, std::string(500, 'e'));  // kept to 500 bytes
  queued = s->WebhookQueued();
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(*queued, 2);
}

// --- The node registry.

TEST_P(StoreNodes, HeartbeatListDrainRemove) {
  int64_t now = 1'000'000;
  auto s = Open(FakeClock(&now));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Heartbeat(NodeRow{"n2", "127.0.0.1:8082", 0, 0, false, std::nullopt}).ok());
  ASSERT_TRUE(s->Heartbeat(NodeRow{"n1", "127.0.0.1:8081", 0, 0, false, std::nullopt}).ok());
  now += 2000;
  ASSERT_TRUE(s->Heartbeat(NodeRow{"n1", "127.0.0.1:9091", 0, 0, true, std::nullopt}).ok());
  auto nodes = s->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].id, "n1");
  EXPECT_EQ((*nodes)[0].address, "127.0.0.1:9091");
  EXPECT_EQ((*nodes)[0].started_ms, 1'000'000);  // the first beat's, kept
  EXPECT_EQ((*nodes)[0].heartbeat_ms, 1'002'000);
  EXPECT_TRUE((*nodes)[0].draining);
  EXPECT_FALSE((*nodes)[0].lost_ms.has_value());
  EXPECT_EQ((*nodes)[1].id, "n2");
  EXPECT_EQ((*nodes)[1].heartbeat_ms, 1'000'000);
  EXPECT_FALSE((*nodes)[1].draining);
  ASSERT_TRUE(s->RemoveNode("n2").ok());
  nodes = s->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].id, "n1");
}

TEST_P(StoreNodes, ALostNodesRunningRowsAreInterruptedOnceAndOnlyItsOwn) {
  int64_t now = 5'000'000;
  OpenOptions a = FakeClock(&now);
  a.node_id = "node-a";
  OpenOptions b = FakeClock(&now);
  b.node_id = "node-b";
  auto sa = Open(a);
  auto sb = Open(b);
  ASSERT_NE(sa, nullptr);
  ASSERT_NE(sb, nullptr);
  ASSERT_TRUE(sa->Heartbeat(NodeRow{"node-a", "a:1", 0, 0, false, std::nullopt}).ok());
  ASSERT_TRUE(sb->Heartbeat(NodeRow{"node-b", "b:1", 0, 0, false, std::nullopt}).ok());
  ASSERT_TRUE(sa->BeginExecution(Start("a-running", 10)).ok());
  ASSERT_TRUE(sa->BeginExecution(Start("a-done", 11)).ok());
  ASSERT_TRUE(sa->FinishExecution(Finish("a-done", 12)).ok());
  ASSERT_TRUE(sb->BeginExecution(Start("b-running", 13)).ok());

  // Within the timeout nobody is lost.
  now += 9'000;
  ASSERT_TRUE(sb->Heartbeat(NodeRow{"node-b", "b:1", 0, 0, false, std::nullopt}).ok());
  auto lost = sb->ReapLostNodes(10'000);
  ASSERT_TRUE(lost.ok()) << lost.error().ToString();
  EXPECT_TRUE(lost->empty());
  // node-a stops beating; past the timeout node-b claims it, once.
  now += 2'000;
  lost = sb->ReapLostNodes(10'000);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(*lost, std::vector<std::string>{"node-a"});
  lost = sb->ReapLostNodes(10'000);
  ASSERT_TRUE(lost.ok());
  EXPECT_TRUE(lost->empty());  // already claimed
  auto running = Get(*sb, "a-running");
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->status, "interrupted");
  EXPECT_EQ(running->ended_ms, now);
  EXPECT_EQ(running->node, "node-a");
  EXPECT_NE(running->reason.value_or("").find("node node-a was lost"), std::string::npos);
  EXPECT_EQ(Get(*sb, "a-done")->status, "ok");
  EXPECT_EQ(Get(*sb, "b-running")->status, "running");  // the living node's rows stay
  auto nodes = sb->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].lost_ms, now);
  // A lost node that beats again is back.
  ASSERT_TRUE(sa->Heartbeat(NodeRow{"node-a", "a:1", 0, 0, false, std::nullopt}).ok());
  nodes = sb->ListNodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_FALSE((*nodes)[0].lost_ms.has_value());
  // A restarted node marks its own old rows.
  ASSERT_TRUE(sb->BeginExecution(Start("b-second", 14)).ok());
  auto own = sb->MarkNodeInterrupted("node-b", "restarted");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(*own, 2);
  EXPECT_EQ(Get(*sb, "b-second")->reason, "restarted");
}

// --- PostgreSQL only: the URL, the schema, the pool.

class StorePostgres : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    cluster_ = SharedCluster(&why);
    if (cluster_ == nullptr) GTEST_SKIP() << "no PostgreSQL cluster: " << why;
    static int n = 0;
    auto url =
        cluster_->CreateDatabase("p" + std::to_string(::getpid()) + "_" + std::to_string(++n));
    ASSERT_TRUE(url.has_value());
    url_ = *url;
  }
  kiln::testing::PgCluster* cluster_ = nullptr;
  std::string url_;
};

TEST(StoreUrl, OnlyPostgresUrlsAreAcceptedAndPasswordsAreNeverShown) {
  auto s = Store::OpenUrl("mysql://db/kiln");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kInvalidArgument);
  EXPECT_EQ(RedactUrl("postgresql://kiln:s3cret@db.example:5432/kiln?sslmode=require"),
            "postgresql://kiln@db.example:5432/kiln?sslmode=require");
  EXPECT_EQ(RedactUrl("postgresql://kiln@db/kiln"), "postgresql://kiln@db/kiln");
  EXPECT_EQ(RedactUrl("postgresql:///kiln?host=/run/pg"), "postgresql:///kiln?host=/run/pg");
  EXPECT_TRUE(IsPostgresUrl("postgres://x/y"));
  EXPECT_FALSE(IsPostgresUrl("sqlite:///x"));
}

TEST(StoreUrl, AnUnreachableServerIsUnavailableNamingItWithoutThePassword) {
  TempDir tmp;  // a socket directory with no server in it
  auto s =
      Store::OpenUrl("postgresql://kiln:s3cret@/kiln?host=" + tmp.path() + "&connect_timeout=2");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kUnavailable) << s.error().ToString();
  EXPECT_EQ(s.error().message.find("s3cret"), std::string::npos) << s.error().message;
}

TEST_F(StorePostgres, RecordsTheSchemaVersionAndRefusesANewerOne) {
  {
    auto s = Store::OpenUrl(url_);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    EXPECT_EQ((*s)->dialect(), Dialect::kPostgres);
    EXPECT_EQ((*s)->path(), url_);  // no password in it to hide
  }
  // Opening again migrates nothing and keeps the rows.
  {
    auto s = Store::OpenUrl(url_);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    ASSERT_TRUE((*s)->CreateKey("acme").ok());
  }
  auto psql = std::string(kiln::testing::PgCluster::kBinDir) + "/psql -q -h " + cluster_->dir() +
              " -p 5432 -U kiln -d " +
              url_.substr(url_.find(":///") + 4, url_.find('?') - url_.find(":///") - 4);
  ASSERT_EQ(std::system((psql + " -tAc 'SELECT version FROM schema_version' > " + cluster_->dir() +
                         "/v.txt")
                            .c_str()),
            0);
  EXPECT_EQ(ReadFile(cluster_->dir() + "/v.txt"), std::to_string(kPostgresSchemaVersion) + "\n");
  ASSERT_EQ(std::system((psql + " -c 'UPDATE schema_version SET version = 99'").c_str()), 0);
  auto s = Store::OpenUrl(url_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kFailedPrecondition);
  EXPECT_NE(s.error().message.find("99"), std::string::npos) << s.error().message;
}

TEST_F(StorePostgres, NodesOpeningANewDatabaseTogetherMigrateItOnce) {
  constexpr int kOpeners = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&] {
      auto s = Store::OpenUrl(url_);
      if (!s.ok()) {
        ADD_FAILURE() << s.error().ToString();
        ++failures;
        return;
      }
      if (!(*s)->CreateKey("acme").ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto s = Store::OpenUrl(url_);
  ASSERT_TRUE(s.ok());
  auto keys = (*s)->ListKeys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), static_cast<size_t>(kOpeners));
}

TEST_F(StorePostgres, AConnectionTheServerClosedIsOpenedAgain) {
  OpenOptions one;
  one.pool_size = 1;
  auto s = Store::OpenUrl(url_, one);
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  ASSERT_TRUE((*s)->CreateKey("acme").ok());
  // Ends every backend of this database, as a server restart would.
  const std::string db = url_.substr(url_.find(":///") + 4, url_.find('?') - url_.find(":///") - 4);
  const std::string psql = std::string(kiln::testing::PgCluster::kBinDir) + "/psql -q -h " +
                           cluster_->dir() +
                           " -p 5432 -U kiln -d postgres -c \"SELECT "
                           "pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" +
                           db + "'\" > /dev/null";
  ASSERT_EQ(std::system(psql.c_str()), 0);
  // The statement that meets the closed connection fails (never retried: it
  // might have been applied); the next one reconnects.
  auto first = (*s)->ListKeys();
  if (!first.ok()) {
    EXPECT_EQ(first.error().code, Code::kUnavailable) << first.error().ToString();
  }
  auto keys = (*s)->ListKeys();
  ASSERT_TRUE(keys.ok()) << keys.error().ToString();
  EXPECT_EQ(keys->size(), 1u);
}

}  // namespace
}  // namespace kiln::store
