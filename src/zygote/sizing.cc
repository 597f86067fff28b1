#include "zygote/sizing.h"

#include <algorithm>

namespace kiln::zygote {

double ErlangB(size_t servers, double load) {
  double b = 1.0;
  for (size_t k = 1; k <= servers; ++k) {
    b = load * b / (static_cast<double>(k) + load * b);
  }
  return b;
}

double ErlangC(size_t servers, double load) {
  if (load <= 0) return 0.0;
  const auto c = static_cast<double>(servers);
  if (c <= load) return 1.0;
  const double b = ErlangB(servers, load);
  return c * b / (c - load * (1.0 - b));
}

size_t ServersFor(double load, double target_wait, size_t min_servers, size_t max_servers) {
  max_servers = std::max(max_servers, min_servers);
  for (size_t c = min_servers; c <= max_servers; ++c) {
    if (c > 0 && ErlangC(c, load) <= target_wait) return c;
    if (c == 0 && load <= 0) return 0;
  }
  return max_servers;
}

void RateEstimator::Arrival(Clock::time_point now) {
  if (have_arrival_) {
    const double gap = std::chrono::duration<double>(now - last_).count();
    gap_s_ = gap_s_ == 0 ? gap : alpha_ * gap + (1 - alpha_) * gap_s_;
  }
  have_arrival_ = true;
  last_ = now;
}

void RateEstimator::Service(double seconds) {
  service_s_ = have_service_ ? alpha_ * seconds + (1 - alpha_) * service_s_ : seconds;
  have_service_ = true;
}

double RateEstimator::arrivals_per_second(Clock::time_point now) const {
  if (!have_arrival_ || gap_s_ <= 0) return 0;
  const double idle = std::chrono::duration<double>(now - last_).count();
  return 1.0 / std::max(gap_s_, idle);
}

}  // namespace kiln::zygote
