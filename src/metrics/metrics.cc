#include "metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "base/log.h"

namespace kiln::metrics {

namespace {

// Caps one label's distinct values (see metrics.h).
class BoundedLabel {
 public:
  std::string Value(std::string_view v) {
    std::string s(v);
    if (seen_.count(s) != 0) return s;
    if (seen_.size() >= kMaxValuesPerLabel) return std::string(kOverflowLabelValue);
    seen_.insert(s);
    return s;
  }

 private:
  std::set<std::string> seen_;
};

// Runs `f`, turning a prometheus-cpp exception into a log line: metrics never fail a request.
template <typename F>
void Guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    KILN_LOG_WARN("metrics: {} failed: {}", what, e.what());
  }
}

}  // namespace

const std::vector<double>& Metrics::DurationBuckets() {
  // Roughly 1-2.5-5 per decade from 1 ms to 10 s, then the long tail up to the 300 s ceiling of
  // the shipped profiles' default timeout maxima.
  static const std::vector<double> kBuckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return kBuckets;
}

struct Metrics::Impl {
  Impl()
      : registry(std::make_shared<prometheus::Registry>()),
        executions(prometheus::BuildCounter()
                       .Name("kiln_executions_total")
                       .Help("Finished executions by outcome status and profile.")
                       .Register(*registry)),
        duration(prometheus::BuildHistogram()
                     .Name("kiln_execution_duration_seconds")
                     .Help("Wall time of finished executions, by profile.")
                     .Register(*registry)),
        active(prometheus::BuildGauge()
                   .Name("kiln_active_sandboxes")
                   .Help("Executions holding an admission slot.")
                   .Register(*registry)
                   .Add({})),
        queued(prometheus::BuildGauge()
                   .Name("kiln_queue_depth")
                   .Help("Requests waiting for an admission slot.")
                   .Register(*registry)
                   .Add({})),
        sessions(prometheus::BuildGauge()
                     .Name("kiln_sessions_live")
                     .Help("Live sessions (each holds a sandbox while idle).")
                     .Register(*registry)
                     .Add({})),
        rejections(prometheus::BuildCounter()
                       .Name("kiln_rejections_total")
                       .Help("Requests turned away by admission control, by reason.")
                       .Register(*registry)),
        http(prometheus::BuildCounter()
                 .Name("kiln_http_requests_total")
                 .Help("HTTP requests by route template and status code.")
                 .Register(*registry)),
        pool_sandboxes(
            prometheus::BuildGauge()
                .Name("kiln_pool_sandboxes")
                .Help("Warm pool sandboxes by profile and state (ready, refilling, in_use).")
                .Register(*registry)),
        pool_target(prometheus::BuildGauge()
                        .Name("kiln_pool_target")
                        .Help("Ready plus refilling sandboxes the warm pool sizes itself to.")
                        .Register(*registry)),
        pool_takes(prometheus::BuildCounter()
                       .Name("kiln_pool_takes_total")
                       .Help("Eligible executions and sessions that took a pooled sandbox (hit) or "
                             "found none ready and started cold (cold_fallback).")
                       .Register(*registry)),
        pool_refills(prometheus::BuildCounter()
                         .Name("kiln_pool_refills_total")
                         .Help("Pooled sandboxes made ready and handed over.")
                         .Register(*registry)),
        pool_refill_seconds(prometheus::BuildCounter()
                                .Name("kiln_pool_refill_seconds_total")
                                .Help("Time from fork request to ready of the refills, summed.")
                                .Register(*registry)),
        pool_failures(prometheus::BuildCounter()
                          .Name("kiln_pool_failures_total")
                          .Help("Pooled sandboxes killed during setup or the outside check.")
                          .Register(*registry)),
        pool_zygote_starts(prometheus::BuildCounter()
                               .Name("kiln_pool_zygote_starts_total")
                               .Help("Zygote (fork server) starts.")
                               .Register(*registry)),
        output_hits(prometheus::BuildCounter()
                        .Name("kiln_output_audit_hits_total")
                        .Help("Output audit matches in what sandboxes sent back, by detector and "
                              "action (flag, redact, block).")
                        .Register(*registry)),
        security_events(prometheus::BuildCounter()
                            .Name("kiln_security_events_total")
                            .Help("Security events (docs/api.md, \"Security events\"), by kind.")
                            .Register(*registry)) {}

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>& executions;
  prometheus::Family<prometheus::Histogram>& duration;
  prometheus::Gauge& active;
  prometheus::Gauge& queued;
  prometheus::Gauge& sessions;
  prometheus::Family<prometheus::Counter>& rejections;
  prometheus::Family<prometheus::Counter>& http;
  prometheus::Family<prometheus::Gauge>& pool_sandboxes;
  prometheus::Family<prometheus::Gauge>& pool_target;
  prometheus::Family<prometheus::Counter>& pool_takes;
  prometheus::Family<prometheus::Counter>& pool_refills;
  prometheus::Family<prometheus::Counter>& pool_refill_seconds;
  prometheus::Family<prometheus::Counter>& pool_failures;
  prometheus::Family<prometheus::Counter>& pool_zygote_starts;
  prometheus::Family<prometheus::Counter>& output_hits;
  prometheus::Family<prometheus::Counter>& security_events;
  // The spawner's last absolute counts, per (series, profile): SetPool adds
  // the difference (or the whole count after a restart).
  std::map<std::pair<std::string, std::string>, double> pool_seen;

  // Guards the label bounds and the caches below. Family::Add() is thread-safe on its own, but
  // it builds a new object (for a histogram, its buckets) on every call; caching the pointer
  // makes the hot path a map lookup plus an atomic add.
  std::mutex mu;
  BoundedLabel status_values, profile_values, reason_values, route_values, code_values,
      detector_values, action_values, kind_values;
  std::map<std::pair<std::string, std::string>, prometheus::Counter*> execution_counters;
  std::map<std::string, prometheus::Histogram*> histograms;
  std::map<std::string, prometheus::Counter*> rejection_counters;
  std::map<std::pair<std::string, std::string>, prometheus::Counter*> http_counters;
  // For Snap(): totals by status and by reason, and the recent wall times.
  std::map<std::string, uint64_t> status_totals;
  std::map<std::string, uint64_t> rejection_totals;
  std::deque<std::pair<std::chrono::steady_clock::time_point, double>> recent;
};

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {}
Metrics::~Metrics() = default;

void Metrics::RecordExecution(std::string_view status, std::string_view profile, double seconds) {
  Guarded("RecordExecution", [&] {
    if (!(seconds >= 0)) seconds = 0;  // also catches NaN
    prometheus::Counter* counter;
    prometheus::Histogram* histogram;
    {
      std::lock_guard lock(impl_->mu);
      std::string s = impl_->status_values.Value(status);
      std::string p = impl_->profile_values.Value(profile);
      auto key = std::make_pair(s, p);
      auto it = impl_->execution_counters.find(key);
      if (it == impl_->execution_counters.end()) {
        it = impl_->execution_counters
                 .emplace(key, &impl_->executions.Add({{"status", s}, {"profile", p}}))
                 .first;
      }
      counter = it->second;
      auto h = impl_->histograms.find(p);
      if (h == impl_->histograms.end()) {
        h = impl_->histograms.emplace(p, &impl_->duration.Add({{"profile", p}}, DurationBuckets()))
                .first;
      }
      histogram = h->second;
      ++impl_->status_totals[s];
      impl_->recent.emplace_back(std::chrono::steady_clock::now(), seconds);
      while (impl_->recent.size() > kRecentCap) impl_->recent.pop_front();
    }
    counter->Increment();
    histogram->Observe(seconds);
  });
}

Metrics::Snapshot Metrics::Snap(std::chrono::seconds window) const {
  Snapshot out;
  const auto since = std::chrono::steady_clock::now() - window;
  std::lock_guard lock(impl_->mu);
  while (!impl_->recent.empty() && impl_->recent.front().first < since) impl_->recent.pop_front();
  out.executions = impl_->status_totals;
  out.rejections = impl_->rejection_totals;
  out.recent_seconds.reserve(impl_->recent.size());
  for (const auto& [at, seconds] : impl_->recent) out.recent_seconds.push_back(seconds);
  return out;
}

double Metrics::Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest value with at least q of the values at or below it.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   values.end());
  return values[rank - 1];
}

void Metrics::SetActive(int64_t n) { impl_->active.Set(static_cast<double>(n)); }

void Metrics::SetQueued(int64_t n) { impl_->queued.Set(static_cast<double>(n)); }
void Metrics::SetSessions(int64_t n) { impl_->sessions.Set(static_cast<double>(n)); }

void Metrics::RecordRejection(std::string_view reason) {
  Guarded("RecordRejection", [&] {
    prometheus::Counter* counter;
    {
      std::lock_guard lock(impl_->mu);
      std::string r = impl_->reason_values.Value(reason);
      ++impl_->rejection_totals[r];
      auto it = impl_->rejection_counters.find(r);
      if (it == impl_->rejection_counters.end()) {
        it = impl_->rejection_counters.emplace(r, &impl_->rejections.Add({{"reason", r}})).first;
      }
      counter = it->second;
    }
    counter->Increment();
  });
}

void Metrics::RecordOutputHit(std::string_view detector, std::string_view action, uint64_t count) {
  Guarded("RecordOutputHit", [&] {
    std::lock_guard lock(impl_->mu);
    const std::string d = impl_->detector_values.Value(detector);
    const std::string a = impl_->action_values.Value(action);
    impl_->output_hits.Add({{"detector", d}, {"action", a}}).Increment(static_cast<double>(count));
  });
}

void Metrics::RecordSecurityEvent(std::string_view kind) {
  Guarded("RecordSecurityEvent", [&] {
    std::lock_guard lock(impl_->mu);
    impl_->security_events.Add({{"kind", impl_->kind_values.Value(kind)}}).Increment();
  });
}

void Metrics::RecordHttp(std::string_view route, int code) {
  Guarded("RecordHttp", [&] {
    prometheus::Counter* counter;
    {
      std::lock_guard lock(impl_->mu);
      std::string r = impl_->route_values.Value(route);
      std::string c = impl_->code_values.Value(std::to_string(code));
      auto key = std::make_pair(r, c);
      auto it = impl_->http_counters.find(key);
      if (it == impl_->http_counters.end()) {
        it = impl_->http_counters.emplace(key, &impl_->http.Add({{"route", r}, {"code", c}})).first;
      }
      counter = it->second;
    }
    counter->Increment();
  });
}

void Metrics::SetPool(const std::vector<PoolProfile>& profiles) {
  Guarded("SetPool", [&] {
    std::lock_guard lock(impl_->mu);
    auto grow = [this](prometheus::Family<prometheus::Counter>& family, const std::string& series,
                       const std::map<std::string, std::string>& labels, const std::string& profile,
                       double now) {
      if (!(now >= 0)) return;
      double& seen = impl_->pool_seen[{series, profile}];
      const double delta = now >= seen ? now - seen : now;  // lower: the spawner restarted
      seen = now;
      if (delta > 0) family.Add(labels).Increment(delta);
    };
    for (const PoolProfile& p : profiles) {
      const std::string profile = impl_->profile_values.Value(p.profile);
      impl_->pool_sandboxes.Add({{"profile", profile}, {"state", "ready"}})
          .Set(static_cast<double>(p.ready));
      impl_->pool_sandboxes.Add({{"profile", profile}, {"state", "refilling"}})
          .Set(static_cast<double>(p.refilling));
      impl_->pool_sandboxes.Add({{"profile", profile}, {"state", "in_use"}})
          .Set(static_cast<double>(p.in_use));
      impl_->pool_target.Add({{"profile", profile}}).Set(static_cast<double>(p.target));
      grow(impl_->pool_takes, "hit", {{"profile", profile}, {"result", "hit"}}, profile,
           static_cast<double>(p.hits));
      grow(impl_->pool_takes, "cold_fallback", {{"profile", profile}, {"result", "cold_fallback"}},
           profile, static_cast<double>(p.cold_fallbacks));
      grow(impl_->pool_refills, "refills", {{"profile", profile}}, profile,
           static_cast<double>(p.refills));
      grow(impl_->pool_refill_seconds, "refill_seconds", {{"profile", profile}}, profile,
           p.refill_seconds_total);
      grow(impl_->pool_failures, "failures", {{"profile", profile}}, profile,
           static_cast<double>(p.failures));
      grow(impl_->pool_zygote_starts, "zygote_starts", {{"profile", profile}}, profile,
           static_cast<double>(p.zygote_starts));
    }
  });
}

std::string Metrics::Render() const {
  std::string out;
  Guarded("Render",
          [&] { out = prometheus::TextSerializer().Serialize(impl_->registry->Collect()); });
  return out;
}

}  // namespace kiln::metrics
