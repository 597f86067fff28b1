// Security events from results and 401s, with the real store and metrics.
#include "executions/security_events.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <csignal>
#include <filesystem>
#include <sstream>
#include <vector>

#include "config/config.h"

namespace kiln::executions {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-events-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class SecurityEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::Store::Open(tmp_.path());
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    store_ = std::move(*s);
    events_ = std::make_unique<SecurityEvents>(store_.get(), &metrics_);
  }

  std::vector<store::EventRow> All() {
    store::EventQuery q;
    q.oldest_first = true;
    q.limit = 1000;
    auto rows = store_->QueryEvents(q);
    EXPECT_TRUE(rows.ok());
    return rows.ok() ? *rows : std::vector<store::EventRow>{};
  }

  std::vector<std::string> Kinds() {
    std::vector<std::string> out;
    for (const auto& r : All()) out.push_back(r.kind);
    return out;
  }

  // A result given by the members that matter (the API's JSON names), the
  // rest as an empty run's.
  void From(nlohmann::json result, const std::string& tenant = "acme") {
    for (const char* key : {"exit_code", "signal"}) {
      if (!result.contains(key)) result[key] = nullptr;
    }
    for (const char* key : {"stdout", "stderr", "reason"}) {
      if (!result.contains(key)) result[key] = "";
    }
    auto typed = supervisor::FromJson(result);
    ASSERT_TRUE(typed.ok()) << typed.error().ToString();
    events_->FromResult(tenant, "key1", "10.0.0.9", "exec1", std::nullopt, *typed);
  }

  TempDir tmp_;
  std::unique_ptr<store::Store> store_;
  metrics::Metrics metrics_;
  std::unique_ptr<SecurityEvents> events_;
};

TEST_F(SecurityEventsTest, KindsHaveStableNames) {
  EXPECT_EQ(ToString(EventKind::kSeccompKill), "seccomp_kill");
  for (EventKind k : kAllEventKinds) EXPECT_EQ(ParseEventKind(ToString(k)), k);
  EXPECT_FALSE(ParseEventKind("nope").has_value());
  EXPECT_NE(EventKindNames().find("output_audit"), std::string::npos);
  // kiln.toml's [events] checks kinds against config's copy of the names.
  ASSERT_EQ(std::size(config::kEventKindNames), std::size(kAllEventKinds));
  for (size_t i = 0; i < std::size(kAllEventKinds); ++i) {
    EXPECT_EQ(config::kEventKindNames[i], ToString(kAllEventKinds[i]));
  }
}

TEST_F(SecurityEventsTest, AQuietResultMakesNoEvent) {
  From({{"status", "ok"}, {"exit_code", 0}, {"signal", nullptr}, {"pids_limit_hits", 0}});
  From({{"status", "error"}, {"exit_code", 1}, {"reason", "ValueError: x"}});
  EXPECT_TRUE(All().empty());
}

TEST_F(SecurityEventsTest, EachSuspiciousResultIsItsKind) {
  From({{"status", "policy_violation"}, {"signal", SIGSYS}, {"reason", "killed by seccomp"}});
  From(
      {{"status", "policy_violation"},
       {"policy_violation", {{"module", "socket"}, {"line", 1}, {"message", "import of socket"}}}});
  From({{"status", "error"}, {"pids_limit_hits", 37}});
  From({{"status", "output_limit"}, {"reason", "stdout passed 1.0 MiB"}});
  From({{"status", "protocol_error"}, {"reason", "frame for cell 7 during cell 1"}});
  From({{"status", "timeout"},
        {"session_state", "lost"},
        {"reason", "the interrupt went unanswered"}});
  EXPECT_EQ(Kinds(),
            (std::vector<std::string>{"seccomp_kill", "import_violation", "pids_limit",
                                      "output_flood", "protocol_error", "sigkill_needed"}));
  const auto rows = All();
  EXPECT_EQ(rows[0].tenant, "acme");
  EXPECT_EQ(rows[0].key_id, "key1");
  EXPECT_EQ(rows[0].execution_id, "exec1");
  EXPECT_EQ(rows[0].client_addr, "10.0.0.9");
  EXPECT_NE(rows[1].detail.find("import of socket"), std::string::npos);
  const std::string m = metrics_.Render();
  EXPECT_NE(m.find("kiln_security_events_total{kind=\"seccomp_kill\"} 1"), std::string::npos) << m;
  // A kept session's timeout (interrupt answered) is not a kill.
  From({{"status", "timeout"}, {"session_state", "kept"}});
  EXPECT_EQ(All().size(), 6u);
}

TEST_F(SecurityEventsTest, MemoryKillsCountInARowPerTenant) {
  const nlohmann::json oom = {{"status", "memory_limit"}};
  From(oom);
  From(oom);
  From({{"status", "ok"}});  // breaks the row
  From(oom);
  From(oom, "other");  // another tenant's row is its own
  From(oom);
  EXPECT_TRUE(All().empty());
  From(oom);
  ASSERT_EQ(Kinds(), std::vector<std::string>{"memory_kills"});
  EXPECT_EQ(All()[0].tenant, "acme");
}

TEST_F(SecurityEventsTest, AuthFailuresFromOneAddressAreOneEventPerWindow) {
  for (int i = 0; i < EventThresholds{}.auth_failures - 1; ++i) events_->AuthFailure("192.0.2.1");
  events_->AuthFailure("192.0.2.2");
  EXPECT_TRUE(All().empty());
  events_->AuthFailure("192.0.2.1");
  for (int i = 0; i < 20; ++i) events_->AuthFailure("192.0.2.1");
  const auto rows = All();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].kind, "auth_failures");
  EXPECT_EQ(rows[0].client_addr, "192.0.2.1");
  EXPECT_EQ(rows[0].tenant, "");
}

TEST_F(SecurityEventsTest, ThresholdsComeFromTheConfig) {
  EventThresholds t;
  t.memory_kills_in_a_row = 1;
  t.auth_failures = 2;
  t.auth_window_ms = 1500;
  events_ = std::make_unique<SecurityEvents>(store_.get(), &metrics_, t);
  From({{"status", "memory_limit"}});
  ASSERT_EQ(Kinds(), std::vector<std::string>{"memory_kills"});
  events_->AuthFailure("192.0.2.7");
  EXPECT_EQ(All().size(), 1u);
  events_->AuthFailure("192.0.2.7");
  const auto rows = All();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].kind, "auth_failures");
  EXPECT_NE(rows[1].detail.find("2 requests"), std::string::npos) << rows[1].detail;
  EXPECT_NE(rows[1].detail.find("within 1.5 s"), std::string::npos) << rows[1].detail;
}

TEST_F(SecurityEventsTest, ListenersSeeEveryStoredEventWithItsId) {
  std::vector<store::EventRow> seen;
  const int h = events_->Subscribe([&seen](const store::EventRow& r) { seen.push_back(r); });
  From({{"status", "protocol_error"}, {"reason", "forged"}});
  events_->Unsubscribe(h);
  From({{"status", "protocol_error"}, {"reason", "again"}});
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_GT(seen[0].id, 0);
  const nlohmann::json j = EventJson(seen[0]);
  EXPECT_EQ(j["kind"], "protocol_error");
  EXPECT_EQ(j["detail"], "forged");
  EXPECT_EQ(j["session_id"], nullptr);
  EXPECT_EQ(All().size(), 2u);
}

}  // namespace
}  // namespace kiln::executions
