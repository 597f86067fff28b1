// How many pooled sandboxes a profile keeps: the Erlang C (M/M/c) model.
//
// A pool slot is busy from the moment its sandbox is handed out until its
// replacement is ready: the refill time is the service time, requests are the
// arrivals, and a request that finds every slot busy waits for a refill (or
// takes the cold path). With offered load A = lambda * S (Erlangs), the
// smallest c with P(wait) = ErlangC(c, A) <= target is the pool's size,
// clamped to [min, max] (docs/adr/0011-zygote.md).
#pragma once

#include <chrono>
#include <cstddef>

namespace kiln::zygote {

// Erlang B: probability that a request finds all `servers` busy in an M/M/c/c
// system with offered load `load` (Erlangs). B(0) = 1, B(k) = A B(k-1) / (k + A B(k-1)).
double ErlangB(size_t servers, double load);
// Erlang C: probability that a request waits in an M/M/c queue. 1 when the
// queue is unstable (servers <= load); 0 for load 0.
double ErlangC(size_t servers, double load);
// Smallest c in [min_servers, max_servers] with ErlangC(c, load) <=
// target_wait; max_servers if none is.
size_t ServersFor(double load, double target_wait, size_t min_servers, size_t max_servers);

// Arrival rate and service time, each an exponentially weighted moving
// average (weight `alpha` for the newest sample). The rate decays while no
// request comes: it is 1 / max(mean gap, time since the last arrival).
class RateEstimator final {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateEstimator(double alpha = 0.2) : alpha_(alpha) {}
  void Arrival(Clock::time_point now);
  void Service(double seconds);
  double arrivals_per_second(Clock::time_point now) const;
  double service_seconds() const { return service_s_; }
  // lambda * S.
  double load(Clock::time_point now) const { return arrivals_per_second(now) * service_s_; }

 private:
  double alpha_;
  bool have_arrival_ = false;
  Clock::time_point last_{};
  double gap_s_ = 0;         // 0: fewer than two arrivals seen
  double service_s_ = 0.01;  // until measured: 10 ms
  bool have_service_ = false;
};

}  // namespace kiln::zygote
