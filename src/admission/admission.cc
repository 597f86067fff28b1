#include "admission/admission.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

namespace kiln::admission {

namespace internal {
struct TenantState {
  TenantLimits limits;                // this node's share of the configured limits
  std::optional<TokenBucket> bucket;  // empty when rate_per_s == 0
  int running = 0;
  int queued = 0;
};
}  // namespace internal

namespace {

// Refills add rate * elapsed; tolerate the last ulp so that "exactly one token's worth of time"
// really yields a token.
constexpr double kTokenEpsilon = 1e-9;
// How often a queued request polls its CancelCheck.
constexpr auto kCancelPoll = std::chrono::milliseconds(100);
// Retry-After while shutting down: long enough for a restart or a load balancer to notice.
constexpr int kShutdownRetryAfterS = 5;
// A tenant at its concurrency limit frees a slot when an execution ends; we cannot know when.
constexpr int kTenantConcurrencyRetryAfterS = 1;
constexpr int kMaxEstimateS = 60;
// Weight of the newest permit's hold time in the moving average.
constexpr double kHoldAlpha = 0.2;

int OnlineCores() {
  // The affinity mask, not the machine: respects taskset and cgroup cpusets.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Status CheckTenant(const TenantLimits& t, const std::string& where) {
  if (t.max_concurrent < 1) {
    return InvalidArgument(where + ".max_concurrent must be >= 1, got " +
                           std::to_string(t.max_concurrent));
  }
  // Written as !(x >= 0) so NaN fails too.
  if (!(t.rate_per_s >= 0) || !std::isfinite(t.rate_per_s)) {
    return InvalidArgument(where + ".rate_per_s must be a finite number >= 0 (0: no rate limit)");
  }
  if (t.rate_per_s > 0 && (!(t.burst >= 1) || !std::isfinite(t.burst))) {
    return InvalidArgument(where + ".burst must be a finite number >= 1 when rate_per_s > 0");
  }
  return OkStatus();
}

Rejection MakeRejection(std::string_view reason, int retry_after_s, std::string message) {
  Rejection r;
  r.reason = std::string(reason);
  r.retry_after_s = retry_after_s;
  r.tenant_quota = reason == kReasonRate || reason == kReasonTenantConcurrency;
  Code code = r.tenant_quota ? Code::kResourceExhausted : Code::kUnavailable;
  if (reason == kReasonCancelled) {
    code = Code::kCancelled;
    r.retry_after_s = 0;
  }
  r.error = MakeError(code, std::move(message));
  return r;
}

}  // namespace

TenantLimits ShareOf(const TenantLimits& limits, int nodes) {
  if (nodes <= 1) return limits;
  TenantLimits share = limits;
  share.max_concurrent = (limits.max_concurrent + nodes - 1) / nodes;
  share.rate_per_s = limits.rate_per_s / nodes;
  // Without a rate the burst means nothing (and may be 0): left as it is.
  if (limits.rate_per_s > 0) share.burst = std::max(1.0, std::ceil(limits.burst / nodes));
  return share;
}

Status Validate(const AdmissionConfig& config) {
  if (config.global_concurrency < 0) {
    return InvalidArgument("global_concurrency must be >= 0 (0: the number of cores)");
  }
  if (config.queue_depth < 0) return InvalidArgument("queue_depth must be >= 0");
  if (config.max_queue_wait.count() <= 0) return InvalidArgument("max_queue_wait must be > 0");
  KILN_TRY(CheckTenant(config.default_tenant, "default_tenant"));
  for (const auto& [name, limits] : config.tenants) {
    if (name.empty()) return InvalidArgument("tenants: empty tenant name");
    KILN_TRY(CheckTenant(limits, "tenants." + name));
  }
  return OkStatus();
}

// ---- TokenBucket ----

TokenBucket::TokenBucket(double rate_per_s, double burst, SteadyClock::time_point now)
    : rate_per_s_(rate_per_s), burst_(burst), tokens_(burst), last_(now) {}

void TokenBucket::Refill(SteadyClock::time_point now) {
  if (now <= last_) return;  // a clock that steps back gives nothing and takes nothing
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * rate_per_s_);
  last_ = now;
}

bool TokenBucket::TryTake(SteadyClock::time_point now) {
  Refill(now);
  if (tokens_ + kTokenEpsilon < 1) return false;
  tokens_ = std::max(0.0, tokens_ - 1);
  return true;
}

double TokenBucket::SecondsUntilNext(SteadyClock::time_point now) {
  Refill(now);
  if (tokens_ + kTokenEpsilon >= 1) return 0;
  return (1 - tokens_) / rate_per_s_;
}

double TokenBucket::Available(SteadyClock::time_point now) {
  Refill(now);
  return tokens_;
}

void TokenBucket::Reconfigure(double rate_per_s, double burst, SteadyClock::time_point now) {
  Refill(now);
  rate_per_s_ = rate_per_s;
  burst_ = burst;
  tokens_ = std::min(tokens_, burst_);
}

// ---- Permit ----

Permit::Permit(Permit&& other) noexcept
    : controller_(std::exchange(other.controller_, nullptr)),
      tenant_(std::exchange(other.tenant_, nullptr)),
      since_(other.since_) {}

Permit& Permit::operator=(Permit&& other) noexcept {
  if (this != &other) {
    Reset();
    controller_ = std::exchange(other.controller_, nullptr);
    tenant_ = std::exchange(other.tenant_, nullptr);
    since_ = other.since_;
  }
  return *this;
}

void Permit::Reset() {
  if (controller_ == nullptr) return;
  AdmissionController* c = std::exchange(controller_, nullptr);
  c->Release(std::exchange(tenant_, nullptr), since_);
}

// ---- AdmissionController ----

struct AdmissionController::Waiter {
  explicit Waiter(TenantState* t) : tenant(t) {}
  TenantState* tenant;
  std::condition_variable cv;
  bool granted = false;  // Release() handed this waiter its slot (and moved queued -> running)
};

Result<std::unique_ptr<AdmissionController>> AdmissionController::Create(AdmissionConfig config,
                                                                         ClockFn clock) {
  KILN_TRY(Validate(config));
  const int limit = config.global_concurrency > 0 ? config.global_concurrency : OnlineCores();
  if (!clock) clock = [] { return SteadyClock::now(); };
  return std::unique_ptr<AdmissionController>(
      new AdmissionController(std::move(config), limit, std::move(clock)));
}

AdmissionController::AdmissionController(AdmissionConfig config, int limit, ClockFn clock)
    : config_(std::move(config)), limit_(limit), clock_(std::move(clock)) {}

AdmissionController::~AdmissionController() = default;

AdmissionController::TenantState& AdmissionController::StateFor(const std::string& tenant,
                                                                SteadyClock::time_point now) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return *it->second;
  if (tenants_.size() >= forget_at_) MaybeForgetIdleTenants(now);
  auto state = std::make_unique<TenantState>();
  state->limits = ShareOf(Configured(tenant), nodes_);
  if (state->limits.rate_per_s > 0) {
    state->bucket.emplace(state->limits.rate_per_s, state->limits.burst, now);
  }
  return *tenants_.emplace(tenant, std::move(state)).first->second;
}

const TenantLimits& AdmissionController::Configured(const std::string& tenant) const {
  auto named = config_.tenants.find(tenant);
  return named != config_.tenants.end() ? named->second : config_.default_tenant;
}

void AdmissionController::SetNodes(int nodes) {
  nodes = std::max(1, nodes);
  std::lock_guard lock(mu_);
  if (nodes == nodes_) return;
  nodes_ = nodes;
  const SteadyClock::time_point now = clock_();
  for (auto& [name, t] : tenants_) {
    t->limits = ShareOf(Configured(name), nodes_);
    // rate_per_s > 0 stays > 0 in a share, and 0 stays 0: the bucket exists or not as before.
    if (t->bucket) t->bucket->Reconfigure(t->limits.rate_per_s, t->limits.burst, now);
  }
}

int AdmissionController::nodes() const {
  std::lock_guard lock(mu_);
  return nodes_;
}

void AdmissionController::MaybeForgetIdleTenants(SteadyClock::time_point now) {
  // An idle tenant whose bucket has refilled is indistinguishable from a new one, so forgetting
  // it changes no decision. Busy or recently limited tenants stay.
  std::erase_if(tenants_, [&](const auto& entry) {
    TenantState& t = *entry.second;
    return t.running == 0 && t.queued == 0 &&
           (!t.bucket || t.bucket->Available(now) + kTokenEpsilon >= t.limits.burst);
  });
  // Doubling keeps the sweeps amortized O(1) per new tenant.
  forget_at_ = std::max<size_t>(1024, 2 * tenants_.size());
}

int AdmissionController::EstimateWaitSeconds() const {
  if (mean_hold_s_ <= 0) return 1;
  // Everyone queued plus this request, served `limit_` at a time.
  const double s = mean_hold_s_ * static_cast<double>(queue_.size() + 1) / limit_;
  return std::clamp(static_cast<int>(std::ceil(s)), 1, kMaxEstimateS);
}

AcquireResult AdmissionController::Acquire(const std::string& tenant, const CancelCheck& cancel) {
  std::unique_lock lock(mu_);
  if (shutting_down_) {
    return MakeRejection(kReasonShuttingDown, kShutdownRetryAfterS, "the server is shutting down");
  }
  const SteadyClock::time_point now = clock_();
  TenantState& t = StateFor(tenant, now);
  // In a fleet, say that the limit is this node's share of the configured one.
  auto of_fleet = [&](const std::string& configured) {
    return nodes_ > 1 ? ": this node's share of " + configured + " across " +
                            std::to_string(nodes_) + " nodes"
                      : std::string();
  };
  if (t.running + t.queued >= t.limits.max_concurrent) {
    return MakeRejection(kReasonTenantConcurrency, kTenantConcurrencyRetryAfterS,
                         "tenant '" + tenant + "' already has " +
                             std::to_string(t.running + t.queued) +
                             " executions running or queued (max_concurrent " +
                             std::to_string(t.limits.max_concurrent) +
                             of_fleet(std::to_string(Configured(tenant).max_concurrent)) + ")");
  }
  if (t.bucket && !t.bucket->TryTake(now)) {
    const double wait = t.bucket->SecondsUntilNext(now);
    const int retry = std::max(1, static_cast<int>(std::ceil(wait)));
    return MakeRejection(kReasonRate, retry,
                         "tenant '" + tenant + "' is over its request rate (" +
                             std::to_string(t.limits.rate_per_s) + "/s, burst " +
                             std::to_string(t.limits.burst) +
                             of_fleet(std::to_string(Configured(tenant).rate_per_s) + "/s") + ")");
  }
  // A free slot goes to the head of the queue first (Release() hands it over directly), so a
  // newcomer may only take one when nobody is waiting: strict FIFO, no barging.
  if (active_ < limit_ && queue_.empty()) {
    ++active_;
    ++t.running;
    return Permit(this, &t, SteadyClock::now());
  }
  if (queue_.size() >= static_cast<size_t>(config_.queue_depth)) {
    return MakeRejection(kReasonQueueFull, EstimateWaitSeconds(),
                         "server busy: " + std::to_string(active_) + " executions running and " +
                             std::to_string(queue_.size()) + " queued (queue_depth " +
                             std::to_string(config_.queue_depth) + ")");
  }

  Waiter w(&t);
  queue_.push_back(&w);
  ++t.queued;
  const auto deadline = SteadyClock::now() + config_.max_queue_wait;
  // Leaves the queue without a slot; the caller returns a rejection.
  auto leave = [&] {
    std::erase(queue_, &w);
    --t.queued;
    if (active_ == 0 && queue_.empty()) idle_cv_.notify_all();
  };
  for (;;) {
    const auto wake = cancel ? std::min(deadline, SteadyClock::now() + kCancelPoll) : deadline;
    w.cv.wait_until(lock, wake, [&] { return w.granted || shutting_down_; });
    // Granted wins over shutdown: the slot was handed over before shutdown began (Release()
    // stops handing over once it has), so it is a running execution like any other.
    if (w.granted) return Permit(this, &t, SteadyClock::now());
    if (shutting_down_) {
      leave();
      return MakeRejection(kReasonShuttingDown, kShutdownRetryAfterS,
                           "the server is shutting down");
    }
    if (SteadyClock::now() >= deadline) {
      leave();
      return MakeRejection(kReasonQueueTimeout, EstimateWaitSeconds(),
                           "server busy: no execution slot within " +
                               std::to_string(config_.max_queue_wait.count()) + " ms");
    }
    if (cancel) {
      // The callback may be slow (it may poll a socket); never hold the lock across it.
      lock.unlock();
      const bool gone = cancel();
      lock.lock();
      if (gone) {
        if (w.granted) {
          // The slot arrived while we were asking; pass it on by releasing it outside the lock.
          lock.unlock();
          Permit(this, &t, SteadyClock::now()).Reset();
        } else {
          leave();
        }
        return MakeRejection(kReasonCancelled, 0, "the caller cancelled while queued");
      }
    }
  }
}

void AdmissionController::Release(TenantState* tenant, SteadyClock::time_point since) {
  const double held_s = std::chrono::duration<double>(SteadyClock::now() - since).count();
  std::lock_guard lock(mu_);
  --tenant->running;
  mean_hold_s_ = mean_hold_s_ <= 0 ? held_s : (1 - kHoldAlpha) * mean_hold_s_ + kHoldAlpha * held_s;
  if (!shutting_down_ && !queue_.empty()) {
    // Hand the slot straight to the oldest waiter; active_ stays the same.
    Waiter* next = queue_.front();
    queue_.pop_front();
    next->granted = true;
    --next->tenant->queued;
    ++next->tenant->running;
    next->cv.notify_one();
    return;
  }
  --active_;
  if (active_ == 0 && queue_.empty()) idle_cv_.notify_all();
}

void AdmissionController::BeginShutdown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  // Each waiter removes itself when it wakes.
  for (Waiter* w : queue_) w->cv.notify_one();
}

bool AdmissionController::WaitIdle(std::chrono::milliseconds grace) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, grace, [&] { return active_ == 0 && queue_.empty(); });
}

int AdmissionController::active() const {
  std::lock_guard lock(mu_);
  return active_;
}

int AdmissionController::queued() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(queue_.size());
}

int AdmissionController::tenant_active(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second->running;
}

int AdmissionController::tenant_queued(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second->queued;
}

bool AdmissionController::shutting_down() const {
  std::lock_guard lock(mu_);
  return shutting_down_;
}

}  // namespace kiln::admission
