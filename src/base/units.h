// Parsing of the human units kiln's flags and config take: sizes ("512m", "1G",
// "64KiB", "1048576") and durations ("30", "1.5s", "250ms", "2m").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace kiln {

// Binary multiples: k/K/KiB = 1024, m/M/MiB = 1024^2, g/G/GiB = 1024^3, t/T = 1024^4;
// an optional "b"/"B"/"iB" suffix. Errors name the input; overflow is an error.
Result<uint64_t> ParseSize(std::string_view text);
// Seconds by default; "ms", "s", "m" suffixes. Must be > 0 and finite.
Result<double> ParseSeconds(std::string_view text);
// "1.5 MiB" style, for messages.
std::string FormatSize(uint64_t bytes);

}  // namespace kiln
