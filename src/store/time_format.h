// Wall-clock times as kiln's store keeps them (unix milliseconds, UTC) and as
// its CLI reads and prints them (ISO 8601, or "1h ago" style durations).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace kiln::store {

// Milliseconds since the epoch, from CLOCK_REALTIME.
int64_t NowMs();

// A point in time for `--since`, relative to `now_ms`:
//   ISO 8601 in UTC or with an offset: "2026-11-30T08:00:00Z",
//     "2026-11-30T08:00Z", "2026-11-30T09:00:00.5+01:00", or a date alone
//     ("2026-11-30", midnight UTC). A date-time without a zone is refused
//     rather than guessed.
//   a duration back from now: a number and a unit, s, m, h, d or w ("30m",
//     "1h", "7d", "1.5h").
// kInvalidArgument naming the accepted forms otherwise.
Result<int64_t> ParseTimeSpec(std::string_view text, int64_t now_ms);

// "2026-11-30T08:00:00Z", or with `millis` "2026-11-30T08:00:00.123Z".
std::string FormatTimeMs(int64_t ms, bool millis = false);

}  // namespace kiln::store
