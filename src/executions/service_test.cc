// The executions service against a fake Runner: no root, no sandbox. The
// store (SQLite in a temporary directory), admission and metrics are the
// real ones.
#include "executions/service.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "testlib/temp_dir.h"

namespace kiln::executions {
namespace {

using kiln::testing::TempDir;

bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

// What the runner does is the test's: a canned result, an error, or waiting
// for its cancel token.
class FakeRunner final : public Runner {
 public:
  using Fn = std::function<Result<spawner::ExecResponse>(const spawner::CancelToken&)>;
  explicit FakeRunner(Fn fn) : fn_(std::move(fn)) {}
  Result<spawner::ExecResponse> Run(const std::string& id, const spawner::CancelToken& cancel,
                                    const spawner::EventFn& on_event) override {
    ++calls;
    seen_id = id;
    seen_cancel = &cancel;
    // The events a supervisor would stream, in order, before the result.
    if (on_event) {
      for (const auto& [event, data] : emit) on_event(event, data);
    }
    return fn_(cancel);
  }
  std::vector<std::pair<std::string, nlohmann::json>> emit;
  int calls = 0;
  std::string seen_id;
  const spawner::CancelToken* seen_cancel = nullptr;

 private:
  Fn fn_;
};

// A supervisor's answer given by the members that matter (the API's JSON
// names), the rest as an empty run's, read as the job channel reads it.
spawner::ExecResponse Answer(nlohmann::json result) {
  for (const char* key : {"exit_code", "signal"}) {
    if (!result.contains(key)) result[key] = nullptr;
  }
  for (const char* key : {"stdout", "stderr", "reason"}) {
    if (!result.contains(key)) result[key] = "";
  }
  auto typed = supervisor::FromJson(result);
  EXPECT_TRUE(typed.ok()) << typed.error().ToString();
  spawner::ExecResponse r;
  if (typed.ok()) r.result = std::move(*typed);
  return r;
}

// What a client is shown of an outcome's result.
nlohmann::json Shown(const Outcome& out) { return ResultJson(*out.response); }

FakeRunner::Fn Returns(nlohmann::json result) {
  return [result](const spawner::CancelToken&) -> kiln::Result<spawner::ExecResponse> {
    return Answer(result);
  };
}

// Blocks until the token fires, then answers "cancelled" as a supervisor does.
kiln::Result<spawner::ExecResponse> UntilCancelled(const spawner::CancelToken& cancel) {
  pollfd pfd{cancel.fd(), POLLIN, 0};
  if (::poll(&pfd, 1, 10000) != 1) return Internal("never cancelled");
  return Answer({{"status", "cancelled"}, {"reason", "cancelled"}});
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = store::Store::Open(tmp_.path());
    ASSERT_TRUE(store.ok()) << store.error().ToString();
    store_ = std::move(*store);
    MakeAdmission({});
  }

  void MakeAdmission(admission::AdmissionConfig config) {
    service_.reset();
    auto admission = admission::AdmissionController::Create(std::move(config));
    ASSERT_TRUE(admission.ok());
    admission_ = std::move(*admission);
    Deps deps;
    deps.store = store_.get();
    deps.admission = admission_.get();
    deps.metrics = &metrics_;
    service_ = std::make_unique<Service>(deps);
  }

  static Job MakeJob(std::optional<std::string> session = std::nullopt) {
    Job job;
    job.caller = {"acme", "key1", "10.0.0.1"};
    job.profile = "default";
    job.session_id = std::move(session);
    job.code = "print(1)";
    return job;
  }

  store::AuditRow Row(const std::string& id) {
    auto rows = store_->Query({});
    EXPECT_TRUE(rows.ok());
    for (const auto& r : *rows) {
      if (r.id == id) return r;
    }
    ADD_FAILURE() << "no audit row " << id;
    return {};
  }

  size_t Rows() {
    auto rows = store_->Query({});
    return rows.ok() ? rows->size() : 0;
  }

  TempDir tmp_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<admission::AdmissionController> admission_;
  metrics::Metrics metrics_;
  std::unique_ptr<Service> service_;
};

TEST_F(ServiceTest, AnExecutionIsAuditedFromBeginToItsResultAndCounted) {
  FakeRunner runner([this](const spawner::CancelToken&) -> kiln::Result<spawner::ExecResponse> {
    // While it runs: its row says "running" (written beside the run's
    // start, so it may take a moment), and it holds a sandbox slot.
    bool running = false;
    for (int i = 0; i < 500 && !running; ++i) {
      auto rows = store_->Query({});
      running = rows.ok() && rows->size() == 1 && (*rows)[0].status == "running";
      if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(running);
    EXPECT_TRUE(HasLine(metrics_.Render(), "kiln_active_sandboxes 1"));
    EXPECT_EQ(service_->running(), 1u);
    return Answer({{"status", "error"},
                   {"exit_code", 3},
                   {"signal", nullptr},
                   {"stdout", "abc"},
                   {"stderr", ""},
                   {"duration_ms", 250.0},
                   {"cpu_ms", 12.0},
                   {"peak_memory_bytes", 4096},
                   {"reason", "exited 3"}});
  });
  Outcome out = service_->Run(MakeJob("sess1"), runner);
  ASSERT_TRUE(out.response.has_value());
  EXPECT_TRUE(out.ran);
  EXPECT_FALSE(out.error.has_value());
  EXPECT_FALSE(out.rejection.has_value());
  EXPECT_EQ(runner.calls, 1);
  EXPECT_EQ(runner.seen_id, out.id);
  EXPECT_EQ(out.id.size(), 32u);

  const store::AuditRow row = Row(out.id);
  EXPECT_EQ(row.status, "error");
  EXPECT_EQ(row.tenant, "acme");
  EXPECT_EQ(row.key_id, "key1");
  EXPECT_EQ(row.client_addr, "10.0.0.1");
  EXPECT_EQ(row.session_id, std::optional<std::string>("sess1"));
  EXPECT_EQ(row.exit_code, std::optional<int>(3));
  EXPECT_EQ(row.stdout_bytes, std::optional<uint64_t>(3));
  EXPECT_EQ(row.reason, std::optional<std::string>("exited 3"));
  EXPECT_TRUE(row.ended_ms.has_value());

  const std::string text = metrics_.Render();
  SCOPED_TRACE(text);
  EXPECT_TRUE(HasLine(text, "kiln_executions_total{profile=\"default\",status=\"error\"} 1"));
  EXPECT_TRUE(HasLine(text, "kiln_execution_duration_seconds_sum{profile=\"default\"} 0.25"));
  EXPECT_TRUE(HasLine(text, "kiln_active_sandboxes 0"));
  EXPECT_EQ(admission_->active(), 0);  // the permit went back
  EXPECT_EQ(service_->running(), 0u);
}

TEST_F(ServiceTest, ARejectionIsAuditedAndCountedAndNothingRuns) {
  admission_->BeginShutdown();
  FakeRunner runner(Returns({{"status", "ok"}}));
  Outcome out = service_->Run(MakeJob(), runner);
  ASSERT_TRUE(out.rejection.has_value());
  EXPECT_EQ(out.rejection->reason, "shutting_down");
  EXPECT_FALSE(out.rejection->tenant_quota);
  EXPECT_FALSE(out.ran);
  EXPECT_FALSE(out.response.has_value());
  EXPECT_EQ(runner.calls, 0);

  const store::AuditRow row = Row(out.id);
  EXPECT_EQ(row.status, "rejected");
  EXPECT_EQ(row.reason, std::optional<std::string>("shutting_down"));
  const std::string text = metrics_.Render();
  EXPECT_TRUE(HasLine(text, "kiln_rejections_total{reason=\"shutting_down\"} 1")) << text;
  EXPECT_FALSE(text.find("kiln_executions_total{") != std::string::npos) << text;
}

TEST_F(ServiceTest, ATenantOverItsRateIsTurnedAwayAsItsQuota) {
  admission::AdmissionConfig config;
  config.default_tenant = {4, /*rate_per_s=*/0.001, /*burst=*/1};
  MakeAdmission(config);
  FakeRunner runner(Returns({{"status", "ok"}}));
  Outcome first = service_->Run(MakeJob(), runner);
  EXPECT_TRUE(first.response.has_value());
  Outcome second = service_->Run(MakeJob(), runner);
  ASSERT_TRUE(second.rejection.has_value());
  EXPECT_EQ(second.rejection->reason, "rate");
  EXPECT_TRUE(second.rejection->tenant_quota);
  EXPECT_EQ(runner.calls, 1);
  EXPECT_EQ(Row(first.id).status, "ok");
  EXPECT_EQ(Row(second.id).status, "rejected");
  EXPECT_EQ(Rows(), 2u);
  EXPECT_TRUE(HasLine(metrics_.Render(), "kiln_rejections_total{reason=\"rate\"} 1"));
}

// The "running" row is written beside the run's start; when the store
// refuses it, the run is cancelled and the answer is the store's error,
// never the program's result.
TEST_F(ServiceTest, ARunningRowTheStoreRefusesCancelsTheRunAndFailsIt) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((tmp_.path() + "/kiln.db").c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    const int rc = sqlite3_exec(db,
                                "CREATE TRIGGER refuse_running BEFORE INSERT ON executions "
                                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
                                nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  std::atomic<bool> cancelled{false};
  FakeRunner runner([&](const spawner::CancelToken& cancel) -> kiln::Result<spawner::ExecResponse> {
    pollfd pfd{cancel.fd(), POLLIN, 0};
    if (::poll(&pfd, 1, 10000) != 1) return Answer({{"status", "ok"}, {"stdout", "ran"}});
    cancelled = true;
    return Answer({{"status", "cancelled"}, {"reason", "cancelled"}});
  });
  Outcome out = service_->Run(MakeJob(), runner);
  EXPECT_EQ(runner.calls, 1);
  EXPECT_TRUE(cancelled);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->code, Code::kInternal);
  EXPECT_NE(out.error->message.find("audit log"), std::string::npos) << out.error->message;
  EXPECT_NE(out.error->message.find("refused by the test"), std::string::npos)
      << out.error->message;
  EXPECT_FALSE(out.response.has_value());
  EXPECT_EQ(Rows(), 0u);
  EXPECT_EQ(admission_->active(), 0);
  EXPECT_EQ(service_->running(), 0u);
  EXPECT_EQ(metrics_.Render().find("kiln_executions_total{"), std::string::npos);
}

TEST_F(ServiceTest, ARunnerErrorIsAnInternalErrorRow) {
  FakeRunner runner([](const spawner::CancelToken&) -> kiln::Result<spawner::ExecResponse> {
    return MakeError(Code::kUnavailable, "the supervisor died");
  });
  Outcome out = service_->Run(MakeJob(), runner);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_TRUE(out.ran);
  EXPECT_EQ(out.error->code, Code::kUnavailable);
  EXPECT_FALSE(out.response.has_value());
  const store::AuditRow row = Row(out.id);
  EXPECT_EQ(row.status, "internal_error");
  EXPECT_EQ(row.reason, std::optional<std::string>("the supervisor died"));
  EXPECT_EQ(admission_->active(), 0);
  // Not an execution's result: not counted as one.
  EXPECT_EQ(metrics_.Render().find("kiln_executions_total{"), std::string::npos);
}

TEST_F(ServiceTest, ARequestTheRunnerRefusesIsARejectedRow) {
  FakeRunner runner([](const spawner::CancelToken&) -> kiln::Result<spawner::ExecResponse> {
    return InvalidField("files", "file: the input files do not fit the workspace");
  });
  Outcome out = service_->Run(MakeJob(), runner);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->field, "files");  // the field travels with the error
  EXPECT_EQ(Row(out.id).status, "rejected");
}

TEST_F(ServiceTest, DrainCancelsWhatStillRunsAfterTheGrace) {
  FakeRunner a(UntilCancelled);
  FakeRunner b(UntilCancelled);
  spawner::CancelToken session_token;  // a session's cell brings its own
  auto one = std::async(std::launch::async, [&] { return service_->Run(MakeJob(), a); });
  auto two = std::async(std::launch::async,
                        [&] { return service_->Run(MakeJob("s"), b, &session_token); });
  for (int i = 0; i < 500 && service_->running() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(service_->running(), 2u);
  EXPECT_FALSE(service_->Drain(std::chrono::milliseconds(50)));
  Outcome o1 = one.get();
  Outcome o2 = two.get();
  EXPECT_EQ(b.seen_cancel, &session_token);
  ASSERT_TRUE(o1.response && o2.response);
  EXPECT_EQ(Shown(o1)["status"], "cancelled");
  EXPECT_EQ(Row(o1.id).status, "cancelled");
  EXPECT_EQ(Row(o2.id).status, "cancelled");
  EXPECT_TRUE(service_->WaitIdle(std::chrono::milliseconds(0)));
  // After the drain, admission turns everything away.
  FakeRunner c(Returns({{"status", "ok"}}));
  EXPECT_TRUE(service_->Run(MakeJob(), c).rejection.has_value());
  EXPECT_EQ(c.calls, 0);
}

TEST_F(ServiceTest, DrainWaitsForExecutionsThatEndWithinTheGrace) {
  std::promise<void> go;
  auto released = go.get_future().share();
  FakeRunner runner([released](const spawner::CancelToken&) -> kiln::Result<spawner::ExecResponse> {
    released.wait();
    return Answer({{"status", "ok"}});
  });
  auto run = std::async(std::launch::async, [&] { return service_->Run(MakeJob(), runner); });
  for (int i = 0; i < 500 && service_->running() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::thread release([&go] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    go.set_value();
  });
  EXPECT_TRUE(service_->Drain(std::chrono::seconds(10)));
  release.join();
  EXPECT_EQ(Row(run.get().id).status, "ok");
}

TEST_F(ServiceTest, WithoutStoreAdmissionOrMetricsItOnlyRuns) {
  Service bare(Deps{});
  FakeRunner runner(Returns({{"status", "ok"}}));
  Outcome out = bare.Run(MakeJob(), runner);
  ASSERT_TRUE(out.response.has_value());
  EXPECT_EQ(runner.calls, 1);
  EXPECT_EQ(Rows(), 0u);
}

TEST_F(ServiceTest, AOneShotOverItsProfileIsRefusedBeforeAQueueSlot) {
  auto config = config::LoadConfigOrBuiltin("");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  Deps deps;
  deps.store = store_.get();
  deps.admission = admission_.get();
  deps.metrics = &metrics_;
  deps.config = &*config;
  deps.spawner = nullptr;  // never reached: every case below is refused before it runs
  Service service(deps);
  spawner::ExecRequest exec;
  exec.profile = "nope";
  exec.code = "1";
  Outcome out = service.RunOneShot(exec, {"acme", "k", "p"}, -1, {}, "req");
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->code, Code::kInvalidArgument);
  EXPECT_EQ(out.error->field, "profile");

  exec.profile = "default";
  exec.limits.memory_bytes = uint64_t{1} << 50;
  out = service.RunOneShot(exec, {"acme", "k", "p"}, -1, {}, "req");
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->field, "memory");
  EXPECT_EQ(out.error->message.rfind("memory: ", 0), 0u) << out.error->message;

  exec.limits = {};
  exec.limits.disk_bytes = uint64_t{1} << 20;
  exec.files = {{"big.bin", std::string(2u << 20, 'x')}};
  out = service.RunOneShot(exec, {"acme", "k", "p"}, -1, {}, "req");
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->field, "files");
  EXPECT_FALSE(out.ran);
  EXPECT_EQ(Rows(), 0u);  // refused requests take no slot and write no row
  EXPECT_EQ(admission_->active(), 0);
}

// --- Output audit (docs/adr/0015) ----------------------------------------------

const std::string kKey = "kiln_00112233aabb_" + std::string(43, 'Z');

constexpr const char* kAuditToml = R"(
[profiles.default]
[profiles.flagged.output_audit]
action = "flag"
[profiles.blocking.output_audit]
action = "block"
[profiles.off.output_audit]
enabled = false
)";

class OutputAuditTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    auto parsed = config::ParseConfig(kAuditToml, "test.toml");
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    config_ = std::move(*parsed);
    Deps deps;
    deps.store = store_.get();
    deps.admission = admission_.get();
    deps.metrics = &metrics_;
    deps.config = &config_;
    service_ = std::make_unique<Service>(deps);
  }

  static Job JobFor(const std::string& profile, spawner::EventFn on_event = {}) {
    Job job = MakeJob();
    job.profile = profile;
    job.on_event = std::move(on_event);
    return job;
  }

  std::vector<store::OutputHitRow> Hits() {
    auto hits = store_->QueryOutputHits({});
    EXPECT_TRUE(hits.ok());
    return hits.ok() ? *hits : std::vector<store::OutputHitRow>{};
  }

  config::Config config_;
};

TEST_F(OutputAuditTest, AResultIsRedactedAndItsHitsRecordedWithoutTheSecret) {
  FakeRunner runner(Returns({{"status", "ok"}, {"stdout", "key " + kKey + "\n"}, {"stderr", ""}}));
  Outcome out = service_->Run(JobFor("default"), runner);
  ASSERT_TRUE(out.response.has_value());
  EXPECT_EQ(Shown(out)["stdout"], "key [REDACTED:kiln_api_key]\n");
  EXPECT_EQ(Shown(out)["output_audit"]["hits"][0]["detector"], "kiln_api_key");
  const auto hits = Hits();
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].execution_id, out.id);
  EXPECT_EQ(hits[0].tenant, "acme");
  EXPECT_EQ(hits[0].detector, "kiln_api_key");
  EXPECT_EQ(hits[0].location, "stdout");
  EXPECT_EQ(hits[0].action, "redact");
  EXPECT_TRUE(
      HasLine(metrics_.Render(),
              "kiln_output_audit_hits_total{action=\"redact\",detector=\"kiln_api_key\"} 1"))
      << metrics_.Render();
  // The audit row says what was sent: the redacted text's size.
  EXPECT_EQ(Row(out.id).stdout_bytes, std::string("key [REDACTED:kiln_api_key]\n").size());
}

TEST_F(OutputAuditTest, StreamedChunksNeverCarryASecretSplitBetweenThem) {
  std::vector<std::pair<std::string, nlohmann::json>> seen;
  auto on_event = [&seen](std::string_view event, const nlohmann::json& data) {
    seen.emplace_back(std::string(event), data);
  };
  const std::string text = "token=" + kKey + "\nbye\n";
  FakeRunner runner(Returns({{"status", "ok"}, {"stdout", text}, {"stderr", ""}}));
  runner.emit = {
      {"stdout", {{"text", text.substr(0, 20)}}},
      {"stdout", {{"text", text.substr(20, 30)}}},
      {"stderr", {{"text", "warn\n"}}},
      {"stdout", {{"text", text.substr(50)}}},
      {"display", {{"output_type", "display_data"}, {"data", {{"text/plain", "x" + kKey}}}}}};
  Outcome out = service_->Run(JobFor("default", on_event), runner);
  ASSERT_TRUE(out.response.has_value());
  std::string streamed;
  for (const auto& [event, data] : seen) {
    EXPECT_EQ(data.dump().find("ZZZZ"), std::string::npos) << event << ": " << data.dump();
    if (event == "stdout") streamed += data["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, "token=[REDACTED:kiln_api_key]\nbye\n");
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().first, "display");
  EXPECT_EQ(seen.back().second["data"]["text/plain"], "x[REDACTED:kiln_api_key]");
  EXPECT_EQ(Shown(out)["stdout"], streamed);
}

TEST_F(OutputAuditTest, FlagKeepsTheTextAndRecordsTheHit) {
  FakeRunner runner(Returns({{"status", "ok"}, {"stdout", kKey}, {"stderr", ""}}));
  Outcome out = service_->Run(JobFor("flagged"), runner);
  ASSERT_TRUE(out.response.has_value());
  EXPECT_EQ(Shown(out)["stdout"], kKey);
  EXPECT_FALSE(Shown(out).contains("output_audit"));
  const auto hits = Hits();
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].action, "flag");
}

TEST_F(OutputAuditTest, BlockWithholdsTheStreamAndTheResult) {
  std::vector<std::string> texts;
  auto on_event = [&texts](std::string_view, const nlohmann::json& data) {
    texts.push_back(data.value("text", ""));
  };
  FakeRunner runner(
      Returns({{"status", "ok"}, {"exit_code", 0}, {"stdout", "a\n" + kKey}, {"stderr", ""}}));
  runner.emit = {{"stdout", {{"text", "a\n"}}},
                 {"stdout", {{"text", kKey.substr(0, 40)}}},
                 {"stdout", {{"text", kKey.substr(40)}}},
                 {"stdout", {{"text", "more\n"}}}};
  Outcome out = service_->Run(JobFor("blocking", on_event), runner);
  ASSERT_TRUE(out.response.has_value());
  EXPECT_EQ(texts, std::vector<std::string>{"a\n"});  // nothing after the hit
  EXPECT_EQ(Shown(out)["status"], "ok");
  EXPECT_EQ(Shown(out)["stdout"], "");
  EXPECT_EQ(Shown(out)["output_audit"]["blocked"], true);
}

TEST_F(OutputAuditTest, AnOffProfileSendsEverythingAsItIs) {
  FakeRunner runner(Returns({{"status", "ok"}, {"stdout", kKey}, {"stderr", ""}}));
  Outcome out = service_->Run(JobFor("off"), runner);
  ASSERT_TRUE(out.response.has_value());
  EXPECT_EQ(Shown(out)["stdout"], kKey);
  EXPECT_TRUE(Hits().empty());
}

TEST_F(ServiceTest, ALockdownRefusesAuditsAndCountsUntilLifted) {
  FakeRunner runner(Returns({{"status", "ok"}}));
  service_->SetLockdown("incident 7");
  Outcome out = service_->Run(MakeJob(), runner);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->api_code, "lockdown");
  EXPECT_NE(out.error->message.find("incident 7"), std::string::npos);
  EXPECT_EQ(runner.calls, 0);
  EXPECT_EQ(Row(out.id).status, "rejected");
  EXPECT_TRUE(HasLine(metrics_.Render(), "kiln_rejections_total{reason=\"lockdown\"} 1"));
  service_->SetLockdown(std::nullopt);
  EXPECT_TRUE(service_->Run(MakeJob(), runner).response.has_value());
  EXPECT_EQ(runner.calls, 1);
}

TEST_F(OutputAuditTest, DownloadedFilesPassTheFilterToo) {
  auto got =
      service_->FilterDownload({"acme", "k", "p"}, "default", "sess9", "d/creds.txt", "k=" + kKey);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "k=[REDACTED:kiln_api_key]");
  auto blocked = service_->FilterDownload({"acme", "k", "p"}, "blocking", "sess9", "id", kKey);
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.error().code, Code::kPermissionDenied);
  EXPECT_EQ(blocked.error().api_code, "output_blocked");
  const auto hits = Hits();
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_FALSE(hits[0].execution_id.has_value());
  EXPECT_EQ(hits[0].session_id, "sess9");
  EXPECT_EQ(hits[1].location, "files/d/creds.txt");
}

}  // namespace
}  // namespace kiln::executions
