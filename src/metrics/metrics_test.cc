#include "metrics/metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

namespace kiln::metrics {
namespace {

// True if `text` has a line that is exactly `line`.
bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

int CountLinesStartingWith(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  int n = 0;
  for (std::string l; std::getline(in, l);) n += l.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

TEST(Metrics, RendersEverySeriesWithItsValues) {
  Metrics m;
  m.RecordExecution("ok", "default", 0.002);
  m.RecordExecution("ok", "default", 1.5);
  m.RecordExecution("timeout", "strict", 30);
  m.SetActive(3);
  m.SetQueued(7);
  m.RecordRejection("rate");
  m.RecordRejection("rate");
  m.RecordRejection("queue_full");
  m.RecordHttp("/v1/execute", 200);
  m.RecordHttp("/v1/execute", 429);
  m.RecordHttp("/v1/execute", 429);
  const std::string text = m.Render();
  SCOPED_TRACE(text);

  EXPECT_TRUE(HasLine(text, "# TYPE kiln_executions_total counter"));
  EXPECT_TRUE(HasLine(text, "kiln_executions_total{profile=\"default\",status=\"ok\"} 2"));
  EXPECT_TRUE(HasLine(text, "kiln_executions_total{profile=\"strict\",status=\"timeout\"} 1"));

  EXPECT_TRUE(HasLine(text, "# TYPE kiln_execution_duration_seconds histogram"));
  EXPECT_TRUE(HasLine(text, "kiln_execution_duration_seconds_count{profile=\"default\"} 2"));
  EXPECT_TRUE(HasLine(text, "kiln_execution_duration_seconds_sum{profile=\"default\"} 1.502"));
  // Buckets are cumulative: 0.002 s lands in le=0.0025 and above; 1.5 s from le=2.5 on.
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"default\",le=\"0.001\"} 0"));
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"default\",le=\"0.0025\"} 1"));
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"default\",le=\"1\"} 1"));
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"default\",le=\"2.5\"} 2"));
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"default\",le=\"300\"} 2"));
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"default\",le=\"+Inf\"} 2"));
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"strict\",le=\"10\"} 0"));
  EXPECT_TRUE(
      HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"strict\",le=\"30\"} 1"));

  EXPECT_TRUE(HasLine(text, "# TYPE kiln_active_sandboxes gauge"));
  EXPECT_TRUE(HasLine(text, "kiln_active_sandboxes 3"));
  EXPECT_TRUE(HasLine(text, "kiln_queue_depth 7"));
  EXPECT_TRUE(HasLine(text, "kiln_rejections_total{reason=\"rate\"} 2"));
  EXPECT_TRUE(HasLine(text, "kiln_rejections_total{reason=\"queue_full\"} 1"));
  EXPECT_TRUE(HasLine(text, "kiln_http_requests_total{code=\"200\",route=\"/v1/execute\"} 1"));
  EXPECT_TRUE(HasLine(text, "kiln_http_requests_total{code=\"429\",route=\"/v1/execute\"} 2"));

  m.SetActive(0);
  EXPECT_TRUE(HasLine(m.Render(), "kiln_active_sandboxes 0"));
}

// The pool's gauges are set as reported; its counters only grow: the
// spawner's absolute counts become increments, and a count lower than the
// last (the spawner or the pool process restarted) is added whole.
TEST(Metrics, PoolSeriesFollowTheSpawnersCountsAcrossRestarts) {
  Metrics m;
  Metrics::PoolProfile p;
  p.profile = "default";
  p.ready = 2;
  p.refilling = 1;
  p.in_use = 3;
  p.target = 4;
  p.hits = 10;
  p.cold_fallbacks = 2;
  p.refills = 12;
  p.refill_seconds_total = 1.5;
  p.zygote_starts = 1;
  m.SetPool({p});
  std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "# TYPE kiln_pool_sandboxes gauge")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_sandboxes{profile=\"default\",state=\"ready\"} 2")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_sandboxes{profile=\"default\",state=\"refilling\"} 1"))
      << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_sandboxes{profile=\"default\",state=\"in_use\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_target{profile=\"default\"} 4")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE kiln_pool_takes_total counter")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_takes_total{profile=\"default\",result=\"hit\"} 10"))
      << text;
  EXPECT_TRUE(
      HasLine(text, "kiln_pool_takes_total{profile=\"default\",result=\"cold_fallback\"} 2"))
      << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_refills_total{profile=\"default\"} 12")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_refill_seconds_total{profile=\"default\"} 1.5")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_zygote_starts_total{profile=\"default\"} 1")) << text;
  // Later: 5 more hits; then a restarted spawner reports 3 from zero.
  p.hits = 15;
  p.ready = 0;
  m.SetPool({p});
  p.hits = 3;
  m.SetPool({p});
  text = m.Render();
  EXPECT_TRUE(HasLine(text, "kiln_pool_takes_total{profile=\"default\",result=\"hit\"} 18"))
      << text;
  EXPECT_TRUE(HasLine(text, "kiln_pool_sandboxes{profile=\"default\",state=\"ready\"} 0")) << text;
  EXPECT_TRUE(
      HasLine(text, "kiln_pool_takes_total{profile=\"default\",result=\"cold_fallback\"} 2"))
      << text;
}

TEST(Metrics, GaugesArePresentBeforeAnythingHappens) {
  Metrics m;
  const std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "kiln_active_sandboxes 0")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_queue_depth 0")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_sessions_live 0")) << text;
  m.SetSessions(5);
  EXPECT_TRUE(HasLine(m.Render(), "kiln_sessions_live 5"));
}

TEST(Metrics, BucketsCoverOneMillisecondToFiveMinutes) {
  const auto& b = Metrics::DurationBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_DOUBLE_EQ(b.front(), 0.001);
  EXPECT_DOUBLE_EQ(b.back(), 300);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

TEST(Metrics, BadDurationsAndHostileLabelValues) {
  Metrics m;
  m.RecordExecution("ok", "p", -5);
  m.RecordExecution("ok", "p", std::nan(""));
  m.RecordHttp("a\"b\\c\nd", 400);  // escaped by the serializer, not a broken exposition
  const std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "kiln_execution_duration_seconds_sum{profile=\"p\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_execution_duration_seconds_bucket{profile=\"p\",le=\"0.001\"} 2"))
      << text;
  EXPECT_TRUE(HasLine(text, "kiln_http_requests_total{code=\"400\",route=\"a\\\"b\\\\c\\nd\"} 1"))
      << text;
}

TEST(Metrics, LabelCardinalityIsCapped) {
  Metrics m;
  for (size_t i = 0; i < kMaxValuesPerLabel + 50; ++i)
    m.RecordHttp("/raw/" + std::to_string(i), 404);
  const std::string text = m.Render();
  EXPECT_EQ(CountLinesStartingWith(text, "kiln_http_requests_total{"),
            static_cast<int>(kMaxValuesPerLabel) + 1);
  EXPECT_TRUE(HasLine(text, "kiln_http_requests_total{code=\"404\",route=\"other\"} 50")) << text;
  // Values seen before the cap keep their own series.
  m.RecordHttp("/raw/0", 404);
  EXPECT_TRUE(HasLine(m.Render(), "kiln_http_requests_total{code=\"404\",route=\"/raw/0\"} 2"));
}

TEST(Metrics, ConcurrentRecordingLosesNothing) {
  Metrics m;
  constexpr int kThreads = 8;
  constexpr int kEach = 1000;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          m.RecordExecution("ok", t % 2 == 0 ? "even" : "odd", 0.01);
          m.RecordRejection("rate");
          if (i % 100 == 0) (void)m.Render();
        }
      });
    }
  }
  const std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "kiln_executions_total{profile=\"even\",status=\"ok\"} 4000")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_executions_total{profile=\"odd\",status=\"ok\"} 4000")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_execution_duration_seconds_count{profile=\"odd\"} 4000")) << text;
  EXPECT_TRUE(HasLine(text, "kiln_rejections_total{reason=\"rate\"} 8000")) << text;
}

// GET /v1/stats: totals by status (all profiles) and by reason, and the
// recent wall times in the order they ended.
TEST(Metrics, SnapshotHasTotalsAndRecentDurations) {
  Metrics m;
  Metrics::Snapshot empty = m.Snap(std::chrono::seconds(60));
  EXPECT_TRUE(empty.executions.empty());
  EXPECT_TRUE(empty.recent_seconds.empty());
  m.RecordExecution("ok", "default", 0.5);
  m.RecordExecution("ok", "strict", 0.25);
  m.RecordExecution("error", "default", 2);
  m.RecordRejection("queue_full");
  m.RecordRejection("queue_full");
  Metrics::Snapshot s = m.Snap(std::chrono::seconds(60));
  EXPECT_EQ(s.executions, (std::map<std::string, uint64_t>{{"error", 1}, {"ok", 2}}));
  EXPECT_EQ(s.rejections, (std::map<std::string, uint64_t>{{"queue_full", 2}}));
  EXPECT_EQ(s.recent_seconds, (std::vector<double>{0.5, 0.25, 2}));
  // A zero window keeps the totals and drops the durations.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Metrics::Snapshot later = m.Snap(std::chrono::seconds(0));
  EXPECT_EQ(later.executions.at("ok"), 2u);
  EXPECT_TRUE(later.recent_seconds.empty());
}

TEST(Metrics, RecentDurationsAreCapped) {
  Metrics m;
  for (size_t i = 0; i < Metrics::kRecentCap + 10; ++i) m.RecordExecution("ok", "default", 1);
  EXPECT_EQ(m.Snap(std::chrono::seconds(60)).recent_seconds.size(), Metrics::kRecentCap);
}

TEST(Metrics, QuantileIsTheNearestRank) {
  EXPECT_EQ(Metrics::Quantile({}, 0.5), 0);
  EXPECT_EQ(Metrics::Quantile({7}, 0.99), 7);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100, unsorted
  EXPECT_EQ(Metrics::Quantile(v, 0.5), 50);
  EXPECT_EQ(Metrics::Quantile(v, 0.9), 90);
  EXPECT_EQ(Metrics::Quantile(v, 0.99), 99);
  EXPECT_EQ(Metrics::Quantile(v, 1.0), 100);
  EXPECT_EQ(Metrics::Quantile({1, 2, 3}, 0.5), 2);
}

}  // namespace
}  // namespace kiln::metrics
