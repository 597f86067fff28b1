// kiln::admission: who may start an execution now, who waits, and who is turned away.
//
// Runs in the server (supervisor side, multithreaded); nothing here runs in the child.
//
// Three limits, checked in this order by AdmissionController::Acquire():
//   1. per tenant, concurrent executions (running + queued)       -> 429 "tenant_concurrency"
//   2. per tenant, a token-bucket request rate                     -> 429 "rate"
//   3. global concurrency with a bounded FIFO queue and a max wait -> 503 "queue_full",
//                                                                     503 "queue_timeout"
// plus shutdown                                                    -> 503 "shutting_down".
//
// HTTP mapping (the server owns it; this is the contract):
//   Rejection::tenant_quota == true   -> 429 Too Many Requests (error.code kResourceExhausted)
//   Rejection::tenant_quota == false  -> 503 Service Unavailable (error.code kUnavailable)
//   reason "cancelled" (the CancelCheck fired; error.code kCancelled) -> the client is gone;
//     nothing needs to be sent (log it as 499 if a status is wanted).
//   Every 429/503 carries `Retry-After: <Rejection::retry_after_s>` (whole seconds, >= 1), and
//   Rejection::reason is the `reason` label of kiln_rejections_total.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/result.h"

namespace kiln::admission {

using SteadyClock = std::chrono::steady_clock;

namespace internal {
struct TenantState;  // admission.cc: one tenant's limits, bucket and counts
}  // namespace internal

// Limits for one tenant. Tenants not named in AdmissionConfig::tenants get `default_tenant`.
struct TenantLimits {
  // Executions the tenant may have running or queued at once; must be >= 1.
  int max_concurrent = 4;
  // Sustained requests per second (the bucket's refill rate). 0 disables the rate limit;
  // negative is invalid.
  double rate_per_s = 10;
  // Bucket size: requests the tenant may make at once after being idle. Must be >= 1 when
  // rate_per_s > 0 (otherwise no request could ever pass).
  double burst = 20;
};

struct AdmissionConfig {
  // Executions running at once across all tenants. 0: the number of online cores
  // (std::thread::hardware_concurrency(), at least 1). Negative is invalid.
  int global_concurrency = 0;
  // Requests that may wait for a global slot; 0 means no queue (full -> 503 at once).
  int queue_depth = 64;
  // How long a queued request waits before "queue_timeout"; must be > 0.
  std::chrono::milliseconds max_queue_wait{30000};
  TenantLimits default_tenant;
  std::map<std::string, TenantLimits> tenants;  // by tenant name
};

// A tenant's limits on one of `nodes` nodes that enforce them together (a fleet sharing one
// store, docs/adr/0020): each node admits its share on its own, so no request costs a store
// round trip. Rounding up, so a tenant is never starved (every node admits at least one):
//   max_concurrent  ceil(max_concurrent / nodes): the fleet runs at most
//                   nodes * ceil(max_concurrent / nodes) <= max_concurrent + nodes - 1 at once;
//   rate_per_s      rate_per_s / nodes: the fleet's sustained rate is at most rate_per_s;
//   burst           ceil(burst / nodes): after idling, at most burst + nodes - 1 at once.
// These bounds hold while every node counts the same nodes. nodes < 1 counts as 1 (the limits
// unchanged).
TenantLimits ShareOf(const TenantLimits& limits, int nodes);

// kInvalidArgument naming the first bad field (e.g. "tenants.alice.burst must be >= 1 ...").
// AdmissionController::Create() calls it; a config loader may call it earlier.
Status Validate(const AdmissionConfig& config);

// The reasons a request is turned away. Stable strings: they are metric label values and may
// appear in API responses.
inline constexpr std::string_view kReasonRate = "rate";
inline constexpr std::string_view kReasonTenantConcurrency = "tenant_concurrency";
inline constexpr std::string_view kReasonQueueFull = "queue_full";
inline constexpr std::string_view kReasonQueueTimeout = "queue_timeout";
inline constexpr std::string_view kReasonShuttingDown = "shutting_down";
inline constexpr std::string_view kReasonCancelled = "cancelled";

// A classic token bucket: starts full (`burst` tokens), refills at `rate_per_s` up to `burst`,
// and each request takes one whole token. Time is passed in by the caller so tests can drive it;
// a `now` earlier than a previous one is treated as no time passing.
// Not thread-safe: AdmissionController guards its buckets with its own mutex.
// Precondition: rate_per_s > 0 and burst >= 1 (see Validate()).
class TokenBucket final {
 public:
  TokenBucket(double rate_per_s, double burst, SteadyClock::time_point now);

  // Takes one token if there is one; false (and nothing taken) otherwise.
  bool TryTake(SteadyClock::time_point now);
  // Seconds until TryTake() would succeed: 0 when a token is available now.
  double SecondsUntilNext(SteadyClock::time_point now);
  // Tokens available at `now` (fractional); for tests and idle-tenant clean-up.
  double Available(SteadyClock::time_point now);
  // New rate and size from `now` on (time until `now` refills at the old rate); the tokens
  // held are cut to the new size. Same precondition as the constructor.
  void Reconfigure(double rate_per_s, double burst, SteadyClock::time_point now);

 private:
  void Refill(SteadyClock::time_point now);

  double rate_per_s_;
  double burst_;
  double tokens_;
  SteadyClock::time_point last_;
};

// Why Acquire() turned a request away. See the HTTP mapping at the top of this file.
struct Rejection {
  std::string reason;         // one of the kReason* strings
  int retry_after_s = 1;      // for the Retry-After header: whole seconds, >= 1 (0 for "cancelled")
  bool tenant_quota = false;  // true: 429 (the tenant's own limits); false: 503 (server side)
  Error error;                // kResourceExhausted / kUnavailable / kCancelled, with a message
                              // naming the tenant and the limit, for logs and the response body
};

class AdmissionController;

// One admitted execution. Move-only; releasing it (destruction or Reset()) frees the global slot
// (handing it straight to the oldest queued request, if any) and the tenant's slot.
// IMPORTANT: a Permit must not outlive the AdmissionController that issued it.
class [[nodiscard]] Permit final {
 public:
  Permit() = default;  // empty: holds nothing
  Permit(Permit&& other) noexcept;
  Permit& operator=(Permit&& other) noexcept;
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() { Reset(); }

  bool held() const { return controller_ != nullptr; }
  // Releases the slot now; a no-op on an empty Permit.
  void Reset();

 private:
  friend class AdmissionController;
  Permit(AdmissionController* controller, internal::TenantState* tenant,
         SteadyClock::time_point since)
      : controller_(controller), tenant_(tenant), since_(since) {}

  AdmissionController* controller_ = nullptr;
  internal::TenantState* tenant_ = nullptr;
  SteadyClock::time_point since_{};  // when the slot was granted
};

// Shaped like std::expected<Permit, Rejection> (as Result<T> is like std::expected<T, Error>).
class [[nodiscard]] AcquireResult final {
 public:
  AcquireResult(Permit permit) : v_(std::move(permit)) {}  // NOLINT(google-explicit-constructor)
  AcquireResult(Rejection rejection)
      : v_(std::move(rejection)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  Permit& value() & { return std::get<0>(v_); }
  Permit&& value() && { return std::get<0>(std::move(v_)); }
  Permit& operator*() & { return value(); }
  Permit* operator->() { return &value(); }
  const Rejection& error() const& { return std::get<1>(v_); }
  Rejection&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<Permit, Rejection> v_;
};

// Polled while a request waits in the queue (about every 100 ms, without the controller's lock
// held); returns true when the caller has given up (e.g. the client disconnected). Must be cheap
// and must not call back into the controller.
using CancelCheck = std::function<bool()>;

// Clock for the token buckets only (queue waits always use the real steady clock).
using ClockFn = std::function<SteadyClock::time_point()>;

// The server's admission gate. Thread-safe: every method may be called from any thread.
//
// Acquire() order: shutting down? -> tenant's running+queued < max_concurrent? -> take a rate
// token -> a free global slot with nobody queued ahead? -> otherwise wait in the FIFO queue (if it
// has room) until a Permit hands its slot over, max_queue_wait passes, shutdown begins, or the
// CancelCheck fires. A request rejected by the concurrency check spends no token; one that took a
// token and then finds the queue full has spent it (it still was a request).
// Queued requests count towards their tenant's max_concurrent, so one tenant cannot fill the
// global queue beyond its own limit.
//
// Tenants are created on first use and forgotten again once idle with a full bucket (checked in
// batches as the table grows), so unbounded tenant names cannot grow memory without bound.
class AdmissionController final {
 public:
  // kInvalidArgument from Validate(). `clock` defaults to SteadyClock::now.
  static Result<std::unique_ptr<AdmissionController>> Create(AdmissionConfig config,
                                                             ClockFn clock = nullptr);
  ~AdmissionController();
  AdmissionController(const AdmissionController&) = delete;
  AdmissionController& operator=(const AdmissionController&) = delete;

  // Blocks only while queued (at most max_queue_wait). Never throws.
  AcquireResult Acquire(const std::string& tenant, const CancelCheck& cancel = nullptr);

  // How many nodes share every tenant's limits (a fleet, docs/adr/0020; the node registry
  // sets it on each heartbeat). From the next Acquire() on, each tenant's limits are
  // ShareOf(configured, nodes); executions already running keep their permits, so a tenant
  // over its new share is refused until enough of them end. Default 1: a single node.
  void SetNodes(int nodes);
  int nodes() const;

  // Stop admitting: every later Acquire() fails with "shutting_down", and every queued request
  // is woken and fails the same way. Running executions keep their permits. Idempotent.
  void BeginShutdown();
  // Waits until no permit is held and nobody is queued, for at most `grace`. True if that
  // happened in time. Call after BeginShutdown(); on false, the caller kills what still runs
  // (and its Permits are released as those executions unwind).
  bool WaitIdle(std::chrono::milliseconds grace);

  // For metrics and /readyz; each is a consistent snapshot taken under the lock.
  int limit() const { return limit_; }                 // the resolved global concurrency
  int active() const;                                  // permits held
  int queued() const;                                  // requests waiting for a global slot
  int tenant_active(const std::string& tenant) const;  // that tenant's permits held
  int tenant_queued(const std::string& tenant) const;
  bool shutting_down() const;

 private:
  using TenantState = internal::TenantState;
  struct Waiter;
  friend class Permit;

  AdmissionController(AdmissionConfig config, int limit, ClockFn clock);
  TenantState& StateFor(const std::string& tenant, SteadyClock::time_point now);  // mu_ held
  const TenantLimits& Configured(const std::string& tenant) const;
  void MaybeForgetIdleTenants(SteadyClock::time_point now);  // mu_ held
  int EstimateWaitSeconds() const;                           // mu_ held
  void Release(TenantState* tenant, SteadyClock::time_point since);

  const AdmissionConfig config_;
  const int limit_;
  const ClockFn clock_;

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::map<std::string, std::unique_ptr<TenantState>> tenants_;
  size_t forget_at_ = 1024;
  std::deque<Waiter*> queue_;  // FIFO; each Waiter lives on its caller's stack
  int active_ = 0;
  int nodes_ = 1;
  bool shutting_down_ = false;
  double mean_hold_s_ = 0;  // moving average of how long permits are held; 0 = no data yet
};

}  // namespace kiln::admission
