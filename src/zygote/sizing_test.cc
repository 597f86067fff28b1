#include "zygote/sizing.h"

#include <gtest/gtest.h>

namespace kiln::zygote {
namespace {

TEST(ErlangTest, KnownValues) {
  // Erlang B table values (e.g. A = 2 Erlangs: B(2) = 0.4, B(5) = 0.0367).
  EXPECT_NEAR(ErlangB(1, 1.0), 0.5, 1e-12);
  EXPECT_NEAR(ErlangB(2, 2.0), 0.4, 1e-12);
  EXPECT_NEAR(ErlangB(5, 2.0), 0.036697, 1e-6);
  // Erlang C: A = 2, c = 3: 0.4444; c = 4: 0.1739 (textbook call-centre values).
  EXPECT_NEAR(ErlangC(3, 2.0), 4.0 / 9.0, 1e-9);
  EXPECT_NEAR(ErlangC(4, 2.0), 0.173913, 1e-6);
  // One server: P(wait) = utilisation.
  EXPECT_NEAR(ErlangC(1, 0.3), 0.3, 1e-12);
}

TEST(ErlangTest, Edges) {
  EXPECT_EQ(ErlangC(4, 0.0), 0.0);
  EXPECT_EQ(ErlangC(2, 2.0), 1.0);  // c <= A: the queue grows without bound
  EXPECT_EQ(ErlangC(2, 5.0), 1.0);
  EXPECT_EQ(ErlangB(0, 3.0), 1.0);
  // Decreasing in c.
  for (size_t c = 4; c < 20; ++c) EXPECT_LT(ErlangC(c + 1, 3.5), ErlangC(c, 3.5));
}

TEST(ErlangTest, ServersFor) {
  EXPECT_EQ(ServersFor(0.0, 0.05, 1, 16), 1u);  // idle: the minimum
  EXPECT_EQ(ServersFor(0.0, 0.05, 0, 16), 0u);
  EXPECT_EQ(ServersFor(2.0, 0.05, 1, 16), 6u);  // C(4, 2) = 0.17, C(5, 2) = 0.060, C(6, 2) = 0.018
  EXPECT_EQ(ServersFor(2.0, 0.2, 1, 16), 4u);
  EXPECT_EQ(ServersFor(100.0, 0.05, 1, 16), 16u);  // clamped to the maximum
  EXPECT_EQ(ServersFor(0.5, 0.05, 3, 16), 3u);     // never below the minimum
  EXPECT_LE(ErlangC(ServersFor(7.3, 0.01, 1, 64), 7.3), 0.01);
}

TEST(RateEstimatorTest, RateAndDecay) {
  using Clock = RateEstimator::Clock;
  RateEstimator r(0.5);
  const auto t0 = Clock::time_point{} + std::chrono::seconds(100);
  EXPECT_EQ(r.arrivals_per_second(t0), 0);
  for (int i = 0; i < 50; ++i) r.Arrival(t0 + std::chrono::milliseconds(10 * i));
  const auto last = t0 + std::chrono::milliseconds(490);
  EXPECT_NEAR(r.arrivals_per_second(last), 100.0, 1e-6);
  // One idle second later the estimate has decayed to 1/s.
  EXPECT_NEAR(r.arrivals_per_second(last + std::chrono::seconds(1)), 1.0, 1e-6);
  r.Service(0.010);
  r.Service(0.020);
  EXPECT_NEAR(r.service_seconds(), 0.015, 1e-12);
  EXPECT_NEAR(r.load(last), 1.5, 1e-6);
}

}  // namespace
}  // namespace kiln::zygote
