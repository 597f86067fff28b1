// kiln::metrics: the server's Prometheus metrics, rendered by kiln's own HTTP server at
// GET /metrics (prometheus-cpp's core library for the data model and the text format; its
// pull/exposer library is deliberately not used).
//
// Runs in the server (supervisor side). Thread-safe: every method may be called from any thread.
//
// Series:
//   kiln_executions_total{status,profile}            counter
//   kiln_execution_duration_seconds{profile}         histogram, buckets 1 ms .. 300 s
//   kiln_active_sandboxes                            gauge
//   kiln_queue_depth                                 gauge
//   kiln_rejections_total{reason}                    counter
//   kiln_http_requests_total{route,code}             counter
//   kiln_pool_sandboxes{profile,state}               gauge: state ready | refilling | in_use
//   kiln_pool_target{profile}                        gauge: the size the pool sizes itself to
//   kiln_pool_takes_total{profile,result}            counter: result hit | cold_fallback
//   kiln_pool_refills_total{profile}                 counter: sandboxes made ready
//   kiln_pool_refill_seconds_total{profile}          counter: their fork-to-ready times, summed
//   kiln_pool_failures_total{profile}                counter: sandboxes killed in setup or check
//   kiln_pool_zygote_starts_total{profile}           counter
//   kiln_output_audit_hits_total{detector,action}    counter: action flag | redact | block
//   kiln_security_events_total{kind}                 counter: executions::EventKind names
//
// IMPORTANT: label values must come from small closed sets: `status` from
// supervisor::ToString(Outcome), `profile` from the configured profile names, `reason` from the
// admission::kReason* strings, `route` from the router's route *templates* (e.g.
// "/v1/sessions/{id}/execute", or "unmatched" for 404s), never from raw request paths. As a
// backstop each label keeps at most kMaxValuesPerLabel distinct values; later new values are
// recorded as "other", so a bug cannot grow memory or the scrape without bound.
//
// Never fails and never throws: a metric must not fail an execution. prometheus-cpp exceptions
// are caught here (P7) and logged.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::metrics {

inline constexpr size_t kMaxValuesPerLabel = 100;
inline constexpr std::string_view kOverflowLabelValue = "other";

class Metrics final {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One finished execution: kiln_executions_total{status,profile} += 1 and one observation of
  // kiln_execution_duration_seconds{profile}. `seconds` is the execution's wall time; negative
  // or NaN values are recorded as 0.
  void RecordExecution(std::string_view status, std::string_view profile, double seconds);
  // Gauges; the server sets them from AdmissionController::active()/queued(), on every change or
  // just before Render().
  void SetActive(int64_t n);
  void SetQueued(int64_t n);
  // kiln_sessions_live: from SessionManager::live(), just before Render().
  void SetSessions(int64_t n);
  // kiln_rejections_total{reason} += 1 (reason: admission::Rejection::reason).
  void RecordRejection(std::string_view reason);
  // kiln_output_audit_hits_total{detector,action} += count (detector: a
  // configured detector's name; action: config::ToString(AuditAction)).
  void RecordOutputHit(std::string_view detector, std::string_view action, uint64_t count);
  // kiln_security_events_total{kind} += 1 (kind: executions::ToString(EventKind)).
  void RecordSecurityEvent(std::string_view kind);
  // kiln_http_requests_total{route,code} += 1 (route: the matched route template).
  void RecordHttp(std::string_view route, int code);

  // The warm pool as the spawner reports it (Spawner::PoolStatus), just
  // before Render(). The spawner's counts restart with it (or with the pool
  // process); the counters here only grow: a count lower than the last one
  // seen is taken as a restart and added whole.
  struct PoolProfile {
    std::string profile;
    int64_t ready = 0, refilling = 0, in_use = 0, target = 0;
    uint64_t hits = 0, cold_fallbacks = 0, refills = 0, failures = 0, zygote_starts = 0;
    double refill_seconds_total = 0;
  };
  void SetPool(const std::vector<PoolProfile>& profiles);

  // What GET /v1/stats shows (the operator console's charts): the executions
  // so far by status (all profiles), the rejections so far by reason, and the
  // wall times of the executions that ended within `window` (oldest first; at
  // most kRecentCap of them). Counts restart with the server.
  struct Snapshot {
    std::map<std::string, uint64_t> executions;
    std::map<std::string, uint64_t> rejections;
    std::vector<double> recent_seconds;
  };
  static constexpr size_t kRecentCap = 10000;
  Snapshot Snap(std::chrono::seconds window) const;
  // The nearest-rank q-quantile (0 < q <= 1) of `values`; 0 when empty.
  static double Quantile(std::vector<double> values, double q);

  // Prometheus text exposition format 0.0.4; serve with
  // "Content-Type: text/plain; version=0.0.4; charset=utf-8".
  std::string Render() const;

  // The histogram's upper bounds in seconds (+Inf is implicit).
  static const std::vector<double>& DurationBuckets();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::metrics
