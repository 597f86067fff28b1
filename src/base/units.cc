#include "base/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace kiln {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  std::string_view s = Trim(text);
  const std::string quoted = "'" + std::string(text) + "'";
  if (s.empty()) return InvalidArgument("empty size");
  size_t digits = 0;
  while (digits < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return InvalidArgument("size " + quoted + " does not start with a number");
  double number = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + digits, number);
  if (ec != std::errc() || ptr != s.data() + digits || !std::isfinite(number)) {
    return InvalidArgument("size " + quoted + " is not a number");
  }
  std::string unit(Trim(s.substr(digits)));
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    mult = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    mult = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return InvalidArgument("size " + quoted + " has an unknown unit (use k, m, g or t)");
  }
  const double bytes = number * mult;
  if (bytes >= static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("size " + quoted + " is too large");
  }
  if (mult == 1 && number != std::floor(number)) {
    return InvalidArgument("size " + quoted + " is a fraction of a byte");
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

Result<double> ParseSeconds(std::string_view text) {
  std::string_view s = Trim(text);
  const std::string quoted = "'" + std::string(text) + "'";
  if (s.empty()) return InvalidArgument("empty duration");
  double mult = 1;
  if (s.size() > 2 && s.substr(s.size() - 2) == "ms") {
    mult = 0.001;
    s.remove_suffix(2);
  } else if (s.back() == 's') {
    s.remove_suffix(1);
  } else if (s.back() == 'm') {
    mult = 60;
    s.remove_suffix(1);
  }
  double number = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(number)) {
    return InvalidArgument("duration " + quoted + " is not a number of seconds");
  }
  if (number <= 0) return InvalidArgument("duration " + quoted + " must be positive");
  // The unit can take a finite number past the doubles ("1e308m") or to 0.
  const double seconds = number * mult;
  if (!std::isfinite(seconds)) return InvalidArgument("duration " + quoted + " is too large");
  if (seconds <= 0) return InvalidArgument("duration " + quoted + " must be positive");
  return seconds;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.4g %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace kiln
