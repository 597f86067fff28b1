#include "admission/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace kiln::admission {
namespace {

using std::chrono::milliseconds;
using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

// A clock the test moves by hand (drives the token buckets only).
struct FakeClock {
  std::atomic<SteadyClock::rep> ticks{SteadyClock::now().time_since_epoch().count()};
  SteadyClock::time_point Now() const {
    return SteadyClock::time_point(SteadyClock::duration(ticks.load()));
  }
  void Advance(SteadyClock::duration d) { ticks += d.count(); }
  ClockFn Fn() {
    return [this] { return Now(); };
  }
};

// Polls `pred` for up to 5 s; the tests below wait on other threads reaching a state.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto deadline = SteadyClock::now() + 5s;
  while (SteadyClock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

AdmissionConfig NoRateLimit(int global, int queue_depth) {
  AdmissionConfig c;
  c.global_concurrency = global;
  c.queue_depth = queue_depth;
  c.max_queue_wait = 5s;  // bounds every test even when an assertion fails mid-way
  c.default_tenant.max_concurrent = 1000;
  c.default_tenant.rate_per_s = 0;
  return c;
}

std::unique_ptr<AdmissionController> MustCreate(AdmissionConfig c, ClockFn clock = nullptr) {
  auto r = AdmissionController::Create(std::move(c), std::move(clock));
  EXPECT_TRUE(r.ok()) << r.error().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(TokenBucket, RefillMathWithAFakeClock) {
  const SteadyClock::time_point t0{};
  TokenBucket b(/*rate_per_s=*/2, /*burst=*/3, t0);
  EXPECT_DOUBLE_EQ(b.Available(t0), 3);
  EXPECT_TRUE(b.TryTake(t0));
  EXPECT_TRUE(b.TryTake(t0));
  EXPECT_TRUE(b.TryTake(t0));
  EXPECT_FALSE(b.TryTake(t0));
  EXPECT_DOUBLE_EQ(b.SecondsUntilNext(t0), 0.5);
  EXPECT_DOUBLE_EQ(b.SecondsUntilNext(t0 + 250ms), 0.25);
  EXPECT_FALSE(b.TryTake(t0 + 250ms));
  EXPECT_TRUE(b.TryTake(t0 + 500ms));  // exactly one token's worth of time
  EXPECT_FALSE(b.TryTake(t0 + 500ms));
  // Refill is capped at the burst.
  EXPECT_DOUBLE_EQ(b.Available(t0 + 10s), 3);
  EXPECT_EQ(b.SecondsUntilNext(t0 + 10s), 0);
  // A clock stepping back neither refills nor drains.
  EXPECT_DOUBLE_EQ(b.Available(t0 + 1s), 3);
}

TEST(TokenBucket, FractionalRateAccumulates) {
  const SteadyClock::time_point t0{};
  TokenBucket b(0.25, 1, t0);
  EXPECT_TRUE(b.TryTake(t0));
  EXPECT_DOUBLE_EQ(b.SecondsUntilNext(t0), 4);
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(b.TryTake(t0 + std::chrono::seconds(i))) << i;
  EXPECT_TRUE(b.TryTake(t0 + 4s));
}

TEST(Admission, ValidateNamesTheField) {
  struct Case {
    AdmissionConfig config;
    const char* field;
  };
  std::vector<Case> cases;
  cases.push_back({AdmissionConfig{}, "global_concurrency"});
  cases.back().config.global_concurrency = -1;
  cases.push_back({AdmissionConfig{}, "queue_depth"});
  cases.back().config.queue_depth = -1;
  cases.push_back({AdmissionConfig{}, "max_queue_wait"});
  cases.back().config.max_queue_wait = 0ms;
  cases.push_back({AdmissionConfig{}, "default_tenant.max_concurrent"});
  cases.back().config.default_tenant.max_concurrent = 0;
  cases.push_back({AdmissionConfig{}, "tenants.alice.burst"});
  cases.back().config.tenants["alice"] =
      TenantLimits{.max_concurrent = 1, .rate_per_s = 1, .burst = 0.5};
  cases.push_back({AdmissionConfig{}, "tenants.bob.rate_per_s"});
  cases.back().config.tenants["bob"] = TenantLimits{.rate_per_s = std::nan("")};
  for (const Case& c : cases) {
    Status s = Validate(c.config);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.error().code, Code::kInvalidArgument);
    EXPECT_NE(s.error().message.find(c.field), std::string::npos) << s.error().message;
    EXPECT_FALSE(AdmissionController::Create(c.config).ok()) << c.field;
  }
  EXPECT_TRUE(Validate(AdmissionConfig{}).ok());
  // rate 0 disables the rate limit, so any burst is fine.
  AdmissionConfig no_rate;
  no_rate.default_tenant = {.max_concurrent = 1, .rate_per_s = 0, .burst = 0};
  EXPECT_TRUE(Validate(no_rate).ok());
}

TEST(Admission, ZeroGlobalConcurrencyMeansCores) {
  auto c = MustCreate(AdmissionConfig{});
  ASSERT_NE(c, nullptr);
  EXPECT_GE(c->limit(), 1);
  EXPECT_LE(c->limit(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  auto three = MustCreate(NoRateLimit(3, 0));
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(three->limit(), 3);
}

TEST(Admission, PermitReleasesOnDestructionResetAndMove) {
  auto c = MustCreate(NoRateLimit(4, 0));
  ASSERT_NE(c, nullptr);
  {
    auto p = c->Acquire("t");
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->held());
    EXPECT_EQ(c->active(), 1);
    EXPECT_EQ(c->tenant_active("t"), 1);
  }
  EXPECT_EQ(c->active(), 0);
  EXPECT_EQ(c->tenant_active("t"), 0);

  auto a = c->Acquire("t");
  auto b = c->Acquire("t");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(c->active(), 2);
  Permit moved = std::move(*a);
  EXPECT_FALSE(a->held());
  EXPECT_EQ(c->active(), 2);  // moving does not release
  a->Reset();                 // nor does resetting the moved-from shell
  EXPECT_EQ(c->active(), 2);
  moved = std::move(*b);  // move-assignment releases what `moved` held
  EXPECT_EQ(c->active(), 1);
  moved.Reset();
  EXPECT_FALSE(moved.held());
  EXPECT_EQ(c->active(), 0);
  EXPECT_EQ(c->tenant_active("t"), 0);
}

TEST(Admission, GlobalLimitQueuesInFifoOrder) {
  auto c = MustCreate(NoRateLimit(1, 8));
  ASSERT_NE(c, nullptr);
  auto holder = c->Acquire("t");
  ASSERT_TRUE(holder.ok());

  constexpr int kWaiters = 5;
  std::mutex order_mu;
  std::vector<int> order;
  std::atomic<int> failed{0};
  std::vector<std::jthread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      auto p = c->Acquire("t");
      if (!p.ok()) {
        ++failed;
        return;
      }
      std::lock_guard lock(order_mu);
      order.push_back(i);
      // Permit released here, after recording: the next waiter cannot overtake.
    });
    // Start the next thread only once this one is queued, so arrival order is known.
    ASSERT_TRUE(Eventually([&] { return c->queued() == i + 1; })) << i;
  }
  EXPECT_EQ(c->active(), 1);
  holder->Reset();
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(c->active(), 0);
  EXPECT_EQ(c->queued(), 0);
}

TEST(Admission, NewcomerDoesNotBargePastTheQueue) {
  auto c = MustCreate(NoRateLimit(1, 8));
  ASSERT_NE(c, nullptr);
  auto holder = c->Acquire("t");
  ASSERT_TRUE(holder.ok());
  std::atomic<bool> waiter_got_it{false};
  std::atomic<bool> waiter_releasing{false};
  std::jthread waiter([&] {
    auto p = c->Acquire("t");
    waiter_got_it = p.ok();
    std::this_thread::sleep_for(200ms);  // hold the slot a while
    waiter_releasing = true;             // then release it (p's destructor)
  });
  ASSERT_TRUE(Eventually([&] { return c->queued() == 1; }));
  holder->Reset();
  // The slot went to the waiter, so a newcomer has to queue behind it: it is
  // admitted only once the waiter lets go (an order, not a duration, so a
  // slow host cannot make it pass or fail).
  ASSERT_TRUE(Eventually([&] { return waiter_got_it.load(); }));
  EXPECT_EQ(c->active(), 1);
  auto late = c->Acquire("t");
  EXPECT_TRUE(late.ok());
  EXPECT_TRUE(waiter_releasing.load())
      << "the newcomer was admitted while the waiter held the slot";
}

TEST(Admission, QueueFullIsA503WithRetryAfter) {
  auto c = MustCreate(NoRateLimit(1, 1));
  ASSERT_NE(c, nullptr);
  auto holder = c->Acquire("a");
  ASSERT_TRUE(holder.ok());
  std::atomic<bool> queued_ok{false};
  std::jthread queued([&] { queued_ok = c->Acquire("b").ok(); });
  ASSERT_TRUE(Eventually([&] { return c->queued() == 1; }));

  auto r = c->Acquire("c");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, kReasonQueueFull);
  EXPECT_FALSE(r.error().tenant_quota);
  EXPECT_EQ(r.error().error.code, Code::kUnavailable);
  EXPECT_GE(r.error().retry_after_s, 1);
  EXPECT_EQ(c->queued(), 1);  // the rejected request left no trace

  holder->Reset();
  queued.join();
  EXPECT_TRUE(queued_ok.load());
}

TEST(Admission, NoQueueMeansFullIsImmediate) {
  auto c = MustCreate(NoRateLimit(1, 0));
  ASSERT_NE(c, nullptr);
  auto holder = c->Acquire("a");
  ASSERT_TRUE(holder.ok());
  auto r = c->Acquire("b");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, kReasonQueueFull);
}

TEST(Admission, QueueWaitTimesOut) {
  AdmissionConfig cfg = NoRateLimit(1, 4);
  cfg.max_queue_wait = 150ms;
  auto c = MustCreate(cfg);
  ASSERT_NE(c, nullptr);
  auto holder = c->Acquire("a");
  ASSERT_TRUE(holder.ok());
  const auto start = SteadyClock::now();
  auto r = c->Acquire("b");
  const auto waited = SteadyClock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, kReasonQueueTimeout);
  EXPECT_FALSE(r.error().tenant_quota);
  EXPECT_EQ(r.error().error.code, Code::kUnavailable);
  EXPECT_GE(r.error().retry_after_s, 1);
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 3s);
  EXPECT_EQ(c->queued(), 0);
  EXPECT_EQ(c->tenant_queued("b"), 0);
  EXPECT_EQ(c->active(), 1);
}

TEST(Admission, TenantConcurrencyIsA429WhileOthersGetIn) {
  AdmissionConfig cfg = NoRateLimit(8, 8);
  cfg.tenants["a"] = TenantLimits{.max_concurrent = 2, .rate_per_s = 0, .burst = 0};
  auto c = MustCreate(cfg);
  ASSERT_NE(c, nullptr);
  auto a1 = c->Acquire("a");
  auto a2 = c->Acquire("a");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = c->Acquire("a");
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.error().reason, kReasonTenantConcurrency);
  EXPECT_TRUE(a3.error().tenant_quota);
  EXPECT_EQ(a3.error().error.code, Code::kResourceExhausted);
  EXPECT_EQ(a3.error().retry_after_s, 1);
  EXPECT_NE(a3.error().error.message.find("max_concurrent 2"), std::string::npos);
  auto b = c->Acquire("b");  // default tenant limits: unaffected
  EXPECT_TRUE(b.ok());
  EXPECT_EQ(c->tenant_active("a"), 2);
  a1->Reset();
  EXPECT_TRUE(c->Acquire("a").ok());
}

TEST(Admission, QueuedRequestsCountTowardsTheTenantLimit) {
  AdmissionConfig cfg = NoRateLimit(1, 8);
  cfg.default_tenant.max_concurrent = 2;
  auto c = MustCreate(cfg);
  ASSERT_NE(c, nullptr);
  auto running = c->Acquire("a");
  ASSERT_TRUE(running.ok());
  std::jthread queued([&] { (void)c->Acquire("a").ok(); });
  ASSERT_TRUE(Eventually([&] { return c->tenant_queued("a") == 1; }));
  auto third = c->Acquire("a");  // would queue, but the tenant already has 2 in flight
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().reason, kReasonTenantConcurrency);
  EXPECT_EQ(c->queued(), 1);
  running->Reset();
}

TEST(Admission, RateLimitGivesRetryAfterInWholeSeconds) {
  FakeClock clock;
  AdmissionConfig cfg = NoRateLimit(8, 8);
  cfg.tenants["slow"] = TenantLimits{.max_concurrent = 8, .rate_per_s = 0.25, .burst = 2};
  cfg.tenants["fast"] = TenantLimits{.max_concurrent = 8, .rate_per_s = 4, .burst = 1};
  auto c = MustCreate(cfg, clock.Fn());
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Acquire("slow").ok());  // permits released at once: only the rate matters
  EXPECT_TRUE(c->Acquire("slow").ok());
  auto r = c->Acquire("slow");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, kReasonRate);
  EXPECT_TRUE(r.error().tenant_quota);
  EXPECT_EQ(r.error().error.code, Code::kResourceExhausted);
  EXPECT_EQ(r.error().retry_after_s, 4);  // 1 token at 0.25/s
  clock.Advance(1500ms);
  auto r2 = c->Acquire("slow");
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().retry_after_s, 3);  // 2.5 s left, rounded up
  clock.Advance(2500ms);
  EXPECT_TRUE(c->Acquire("slow").ok());

  // A sub-second wait still says 1, never 0.
  EXPECT_TRUE(c->Acquire("fast").ok());
  auto f = c->Acquire("fast");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().retry_after_s, 1);
  // Other tenants have their own buckets (the default here has no rate limit).
  EXPECT_TRUE(c->Acquire("other").ok());
}

TEST(Admission, RateLimitedTenantIsNotForgottenByTheIdleSweep) {
  FakeClock clock;
  AdmissionConfig cfg = NoRateLimit(4, 0);  // other tenants: no bucket, so forgettable when idle
  cfg.tenants["x"] = TenantLimits{.max_concurrent = 4, .rate_per_s = 0.01, .burst = 1};
  auto c = MustCreate(cfg, clock.Fn());
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Acquire("x").ok());
  EXPECT_FALSE(c->Acquire("x").ok());
  // Enough other tenants to trigger several sweeps of the tenant table.
  for (int i = 0; i < 5000; ++i) (void)c->Acquire("t" + std::to_string(i)).ok();
  auto again = c->Acquire("x");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().reason, kReasonRate);
}

TEST(FleetShare, LimitsAreSplitRoundingUp) {
  const TenantLimits fleet{.max_concurrent = 4, .rate_per_s = 9, .burst = 20};
  for (int n : {-1, 0, 1}) {  // one node (or nonsense): the limits as configured
    const TenantLimits one = ShareOf(fleet, n);
    EXPECT_EQ(one.max_concurrent, 4);
    EXPECT_EQ(one.rate_per_s, 9);
    EXPECT_EQ(one.burst, 20);
  }
  const TenantLimits three = ShareOf(fleet, 3);
  EXPECT_EQ(three.max_concurrent, 2);  // ceil(4/3): 6 across the fleet, 4 + 3 - 1
  EXPECT_DOUBLE_EQ(three.rate_per_s, 3);
  EXPECT_EQ(three.burst, 7);  // ceil(20/3): 21 across the fleet
  const TenantLimits two = ShareOf(fleet, 2);
  EXPECT_EQ(two.max_concurrent, 2);  // exact: 4 across the fleet
  EXPECT_EQ(two.burst, 10);
  // More nodes than the limit: every node still admits one (never starved).
  const TenantLimits many =
      ShareOf(TenantLimits{.max_concurrent = 1, .rate_per_s = 0.5, .burst = 1}, 8);
  EXPECT_EQ(many.max_concurrent, 1);
  EXPECT_DOUBLE_EQ(many.rate_per_s, 0.0625);
  EXPECT_EQ(many.burst, 1);
  // No rate limit stays none, and its burst is left alone.
  const TenantLimits unlimited =
      ShareOf(TenantLimits{.max_concurrent = 10, .rate_per_s = 0, .burst = 0}, 3);
  EXPECT_EQ(unlimited.rate_per_s, 0);
  EXPECT_EQ(unlimited.burst, 0);
  EXPECT_EQ(unlimited.max_concurrent, 4);
  // The documented bounds, over a range of limits and fleet sizes.
  for (int limit = 1; limit <= 50; ++limit) {
    for (int n = 1; n <= 12; ++n) {
      const TenantLimits s = ShareOf(
          TenantLimits{
              .max_concurrent = limit, .rate_per_s = 7, .burst = static_cast<double>(limit)},
          n);
      EXPECT_GE(s.max_concurrent, 1);
      EXPECT_GE(n * s.max_concurrent, limit) << limit << " on " << n;
      EXPECT_LE(n * s.max_concurrent, limit + n - 1) << limit << " on " << n;
      EXPECT_LE(n * s.burst, limit + n - 1) << limit << " on " << n;
      EXPECT_NEAR(n * s.rate_per_s, 7, 1e-9);
      AdmissionConfig c;
      c.default_tenant = s;
      EXPECT_TRUE(Validate(c).ok());
    }
  }
}

TEST(TokenBucket, ReconfigureKeepsTimeAndCutsTokens) {
  FakeClock clock;
  TokenBucket b(1, 10, clock.Now());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(b.TryTake(clock.Now()));
  clock.Advance(1s);  // 3 tokens at the old rate
  b.Reconfigure(0.5, 4, clock.Now());
  EXPECT_NEAR(b.Available(clock.Now()), 3, 1e-9);
  clock.Advance(4s);  // 0.5/s, capped at the new size
  EXPECT_NEAR(b.Available(clock.Now()), 4, 1e-9);
  b.Reconfigure(1, 2, clock.Now());  // smaller than what is held: cut
  EXPECT_NEAR(b.Available(clock.Now()), 2, 1e-9);
}

TEST(Admission, SetNodesSplitsEveryTenantsLimits) {
  FakeClock clock;
  AdmissionConfig cfg = NoRateLimit(64, 0);
  cfg.default_tenant.max_concurrent = 4;
  cfg.tenants["r"] = TenantLimits{.max_concurrent = 64, .rate_per_s = 0.001, .burst = 3};
  auto c = MustCreate(cfg, clock.Fn());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->nodes(), 1);
  auto early = c->Acquire("a");  // a tenant known before the fleet grows
  ASSERT_TRUE(early.ok());
  c->SetNodes(3);
  EXPECT_EQ(c->nodes(), 3);
  // ceil(4/3) = 2 on this node, counting the one already running.
  auto second = c->Acquire("a");
  ASSERT_TRUE(second.ok());
  auto third = c->Acquire("a");
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().reason, kReasonTenantConcurrency);
  EXPECT_NE(
      third.error().error.message.find("max_concurrent 2: this node's share of 4 across 3 nodes"),
      std::string::npos)
      << third.error().error.message;
  // A tenant first seen now gets the share too.
  auto b1 = c->Acquire("b");
  auto b2 = c->Acquire("b");
  ASSERT_TRUE(b1.ok() && b2.ok());
  EXPECT_FALSE(c->Acquire("b").ok());
  // Rate: burst ceil(3/3) = 1 token on this node.
  EXPECT_TRUE(c->Acquire("r").ok());
  auto r = c->Acquire("r");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, kReasonRate);
  EXPECT_NE(r.error().error.message.find("across 3 nodes"), std::string::npos);
  // Running over a smaller share: refused until enough end, then the larger share is back.
  c->SetNodes(1);
  auto a3 = c->Acquire("a");
  auto a4 = c->Acquire("a");
  ASSERT_TRUE(a3.ok() && a4.ok());
  c->SetNodes(2);  // share 2, 4 running: nothing new until two end
  EXPECT_FALSE(c->Acquire("a").ok());
  early->Reset();
  second->Reset();
  EXPECT_FALSE(c->Acquire("a").ok());  // still 2 running = the share
  a3->Reset();
  EXPECT_TRUE(c->Acquire("a").ok());
  c->SetNodes(0);
  EXPECT_EQ(c->nodes(), 1);
}

TEST(Admission, ShutdownWakesWaitersAndRefusesNewcomers) {
  auto c = MustCreate(NoRateLimit(1, 8));
  ASSERT_NE(c, nullptr);
  auto holder = c->Acquire("a");
  ASSERT_TRUE(holder.ok());
  std::vector<std::string> reasons(3);
  std::vector<std::jthread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      auto r = c->Acquire("w");
      reasons[i] = r.ok() ? "admitted" : r.error().reason;
    });
  }
  ASSERT_TRUE(Eventually([&] { return c->queued() == 3; }));
  const auto start = SteadyClock::now();
  c->BeginShutdown();
  for (auto& t : threads) t.join();
  EXPECT_LT(SteadyClock::now() - start, 2s);  // woken, not timed out (max wait is 5 s)
  for (const auto& r : reasons) EXPECT_EQ(r, kReasonShuttingDown);
  EXPECT_EQ(c->queued(), 0);
  EXPECT_TRUE(c->shutting_down());

  auto late = c->Acquire("b");
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().reason, kReasonShuttingDown);
  EXPECT_FALSE(late.error().tenant_quota);
  EXPECT_GE(late.error().retry_after_s, 1);

  // The running execution keeps its permit; WaitIdle reports whether it ended in time.
  EXPECT_EQ(c->active(), 1);
  EXPECT_FALSE(c->WaitIdle(50ms));
  std::jthread finisher([&] {
    std::this_thread::sleep_for(100ms);
    holder->Reset();
  });
  EXPECT_TRUE(c->WaitIdle(5000ms));
  EXPECT_EQ(c->active(), 0);
}

TEST(Admission, WaitIdleIsImmediateWhenIdle) {
  auto c = MustCreate(NoRateLimit(2, 2));
  ASSERT_NE(c, nullptr);
  const auto start = SteadyClock::now();
  EXPECT_TRUE(c->WaitIdle(5000ms));
  EXPECT_LT(SteadyClock::now() - start, 1s);
}

TEST(Admission, CancelCheckLetsAQueuedCallerLeave) {
  auto c = MustCreate(NoRateLimit(1, 4));
  ASSERT_NE(c, nullptr);
  auto holder = c->Acquire("a");
  ASSERT_TRUE(holder.ok());
  std::atomic<bool> gone{false};
  std::string reason;
  std::jthread waiter([&] {
    auto r = c->Acquire("b", [&] { return gone.load(); });
    reason = r.ok() ? "admitted" : r.error().reason;
  });
  ASSERT_TRUE(Eventually([&] { return c->queued() == 1; }));
  const auto start = SteadyClock::now();
  gone = true;
  waiter.join();
  EXPECT_LT(SteadyClock::now() - start, 2s);
  EXPECT_EQ(reason, kReasonCancelled);
  EXPECT_EQ(c->queued(), 0);
  EXPECT_EQ(c->tenant_queued("b"), 0);
  holder->Reset();
  EXPECT_EQ(c->active(), 0);
}

TEST(Admission, StressNeverExceedsTheGlobalLimit) {
  constexpr int kLimit = 3;
  constexpr int kThreads = 16;
  constexpr int kIterations = 200;
  AdmissionConfig cfg = NoRateLimit(kLimit, kThreads);  // queue never full
  cfg.max_queue_wait = 30s;
  cfg.default_tenant.max_concurrent = kThreads;
  auto c = MustCreate(cfg);
  ASSERT_NE(c, nullptr);
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<int> admitted{0};
  std::atomic<int> rejected{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const std::string tenant = "tenant" + std::to_string(t % 4);
        for (int i = 0; i < kIterations; ++i) {
          auto p = c->Acquire(tenant);
          if (!p.ok()) {
            ++rejected;
            continue;
          }
          ++admitted;
          const int now_inside = ++inside;
          int seen = max_inside.load();
          while (now_inside > seen && !max_inside.compare_exchange_weak(seen, now_inside)) {
          }
          if (i % 8 == 0) std::this_thread::yield();
          --inside;  // before the permit is released at the end of the iteration
        }
      });
    }
  }
  EXPECT_EQ(rejected.load(), 0);
  EXPECT_EQ(admitted.load(), kThreads * kIterations);
  EXPECT_LE(max_inside.load(), kLimit);
  EXPECT_GE(max_inside.load(), 1);
  EXPECT_EQ(c->active(), 0);
  EXPECT_EQ(c->queued(), 0);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(c->tenant_active("tenant" + std::to_string(t)), 0);
}

}  // namespace
}  // namespace kiln::admission
