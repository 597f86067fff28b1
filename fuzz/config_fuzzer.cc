// kiln.toml (src/config/config.h): ParseConfig reads an operator's file with
// toml++ and validates every key; what it accepts, `kiln serve`, `kiln run`
// and the pool use as is (durations become std::chrono durations and
// milliseconds, profiles become policies).
//
// Input: the file's text. Checked: a refusal is kInvalidArgument naming the
// file; an accepted config has a profile, a default profile among them and a
// default tenant, every profile builds into a policy, and every number is in
// the range its consumers rely on: durations finite, positive and within what
// a nanosecond clock holds, counts and rates within their caps, the pool's
// sizes ordered.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/config.h"
#include "fuzz_util.h"

namespace {

// Finite, positive, and (config::kMaxSeconds) within what std::chrono's int64
// nanoseconds hold with room to add to now().
bool Duration(double s) { return std::isfinite(s) && s > 0 && s <= kiln::config::kMaxSeconds; }

bool OptionalDuration(const std::optional<double>& s) { return !s || Duration(*s); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  auto c = kiln::config::ParseConfig(input.text(), "fuzz.toml");
  if (!c.ok()) {
    FUZZ_CHECK(c.error().code == kiln::Code::kInvalidArgument);
    FUZZ_CHECK(c.error().message.rfind("fuzz.toml", 0) == 0);
    return 0;
  }
  FUZZ_CHECK(!c->profiles.empty());
  FUZZ_CHECK(c->profiles.count(c->server.default_profile) == 1);
  FUZZ_CHECK(c->tenants.count("default") == 1);
  FUZZ_CHECK(c->Find(c->server.default_profile).ok());

  const auto& s = c->server;
  FUZZ_CHECK(Duration(s.queue_timeout_s) && Duration(s.client_timeout_s) &&
             Duration(s.shutdown_grace_s) && Duration(s.session_idle_ttl_s) &&
             Duration(s.session_max_lifetime_s) && Duration(s.interrupt_grace_s));
  for (int n : {s.concurrency, s.queue, s.retention_days, s.max_connections, s.max_sessions}) {
    FUZZ_CHECK(n >= 0 && n <= 100000);
  }
  FUZZ_CHECK(s.max_bodies_in_flight_bytes >= s.max_body_bytes &&
             s.max_bodies_in_flight_bytes >= s.max_file_bytes);
  FUZZ_CHECK(!s.listen.empty() && !s.default_profile.empty());

  const auto& p = c->pool;
  FUZZ_CHECK(p.min >= 0 && p.max >= 1 && p.min <= p.max && p.max <= 512);
  FUZZ_CHECK(p.target_wait > 0 && p.target_wait < 1);

  for (const auto& [name, t] : c->tenants) {
    FUZZ_CHECK(t.max_concurrent >= 1 && t.max_concurrent <= 10000);
    FUZZ_CHECK(t.max_sessions >= 1 && t.max_sessions <= 10000);
    FUZZ_CHECK(std::isfinite(t.rate_per_s) && t.rate_per_s > 0 && t.rate_per_s <= 1e6);
    FUZZ_CHECK(std::isfinite(t.burst) && t.burst > 0 && t.burst <= 1e6);
  }

  for (const auto& [name, profile] : c->profiles) {
    FUZZ_CHECK(name == profile.name);
    for (const auto* l : {&profile.defaults, &profile.max}) {
      FUZZ_CHECK(OptionalDuration(l->timeout_s) && OptionalDuration(l->cpu_time_s));
    }
    // Validated as a whole when parsed: the profile with no request builds.
    auto builder = kiln::config::PolicyFor(profile, {});
    FUZZ_CHECK(builder.ok());
    FUZZ_CHECK(builder->Build().ok());
    // A request at the profile's own maximum is within it (it may still be
    // refused by the builder, never by the cap).
    auto at_max = kiln::config::PolicyFor(profile, profile.max);
    FUZZ_CHECK(at_max.ok());
  }
  return 0;
}
