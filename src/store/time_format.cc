#include "store/time_format.h"

#include <time.h>

#include <cmath>
#include <cstdio>

namespace kiln::store {
namespace {

Error BadTime(std::string_view text) {
  return InvalidArgument("'" + std::string(text) +
                         "' is not a time: use ISO 8601 (2026-11-30T08:00:00Z, 2026-11-30) "
                         "or a duration back from now (30m, 1h, 7d)");
}

// Reads exactly `n` digits at `pos`.
bool Digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

int DaysInMonth(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[month - 1];
}

Result<int64_t> ParseRelative(std::string_view text, int64_t now_ms) {
  const char unit = text.back();
  int64_t unit_ms = 0;
  switch (unit) {
    case 's': unit_ms = 1000; break;
    case 'm': unit_ms = 60'000; break;
    case 'h': unit_ms = 3'600'000; break;
    case 'd': unit_ms = 86'400'000; break;
    case 'w': unit_ms = 7 * 86'400'000LL; break;
    default: return BadTime(text);
  }
  const std::string_view number = text.substr(0, text.size() - 1);
  if (number.empty() || number.front() == '.' || number.back() == '.') return BadTime(text);
  int dots = 0;
  for (char c : number) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return BadTime(text);
    }
  }
  if (dots > 1 || number.size() > 12) return BadTime(text);
  const double n = std::strtod(std::string(number).c_str(), nullptr);
  return now_ms - static_cast<int64_t>(std::llround(n * static_cast<double>(unit_ms)));
}

}  // namespace

int64_t NowMs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

Result<int64_t> ParseTimeSpec(std::string_view text, int64_t now_ms) {
  if (text.empty()) return BadTime(text);
  if (text.size() < 10 || text[4] != '-') return ParseRelative(text, now_ms);

  struct tm tm = {};
  int year, month, day;
  if (!Digits(text, 0, 4, &year) || !Digits(text, 5, 2, &month) || text[7] != '-' ||
      !Digits(text, 8, 2, &day) || month < 1 || month > 12 || day < 1 ||
      day > DaysInMonth(year, month)) {
    return BadTime(text);
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  int64_t frac_ms = 0, offset_s = 0;
  size_t pos = 10;
  if (pos < text.size()) {
    if (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ') return BadTime(text);
    int hh, mm, ss = 0;
    if (!Digits(text, pos + 1, 2, &hh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !Digits(text, pos + 4, 2, &mm) || hh > 23 || mm > 59) {
      return BadTime(text);
    }
    pos += 6;
    if (pos < text.size() && text[pos] == ':') {
      if (!Digits(text, pos + 1, 2, &ss) || ss > 59) return BadTime(text);
      pos += 3;
      if (pos < text.size() && (text[pos] == '.' || text[pos] == ',')) {
        ++pos;
        int64_t scale = 100;
        const size_t start = pos;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
          frac_ms += (text[pos] - '0') * scale;
          scale /= 10;
          ++pos;
        }
        if (pos == start) return BadTime(text);
      }
    }
    tm.tm_hour = hh;
    tm.tm_min = mm;
    tm.tm_sec = ss;
    if (pos >= text.size()) {
      return InvalidArgument("'" + std::string(text) +
                             "' has no time zone: end it with Z (UTC) or an offset like +02:00");
    }
    if (text[pos] == 'Z' || text[pos] == 'z') {
      ++pos;
    } else if (text[pos] == '+' || text[pos] == '-') {
      const int sign = text[pos] == '-' ? -1 : 1;
      int oh, om;
      if (!Digits(text, pos + 1, 2, &oh) || oh > 23) return BadTime(text);
      pos += 3;
      if (pos < text.size() && text[pos] == ':') ++pos;
      if (!Digits(text, pos, 2, &om) || om > 59) return BadTime(text);
      pos += 2;
      offset_s = sign * (oh * 3600 + om * 60);
    } else {
      return BadTime(text);
    }
    if (pos != text.size()) return BadTime(text);
  }
  const time_t t = ::timegm(&tm);
  return (static_cast<int64_t>(t) - offset_s) * 1000 + frac_ms;
}

std::string FormatTimeMs(int64_t ms, bool millis) {
  int64_t secs = ms / 1000, rem = ms % 1000;
  if (rem < 0) {
    rem += 1000;
    --secs;
  }
  const time_t t = static_cast<time_t>(secs);
  struct tm tm;
  if (::gmtime_r(&t, &tm) == nullptr) return std::to_string(ms) + "ms";
  char buf[64];
  if (millis) {
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(rem));
  } else {
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  return buf;
}

}  // namespace kiln::store
