#include "store/time_format.h"

#include <gtest/gtest.h>

namespace kiln::store {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;

TEST(TimeFormat, ParsesIso8601) {
  const std::pair<const char*, int64_t> cases[] = {
      {"2026-11-30T08:00:00Z", 1796025600000},      {"2026-11-30t08:00:00z", 1796025600000},
      {"2026-11-30T08:00Z", 1796025600000},         {"2026-11-30 08:00:00Z", 1796025600000},
      {"2026-11-30T09:00:00+01:00", 1796025600000}, {"2026-11-30T07:30:00-0030", 1796025600000},
      {"2026-11-30T08:00:00.250Z", 1796025600250},  {"2026-11-30", 1795996800000},
      {"2024-02-29T23:59:59Z", 1709251199000},
  };
  for (const auto& [text, ms] : cases) {
    auto r = ParseTimeSpec(text, kNow);
    ASSERT_TRUE(r.ok()) << text << ": " << r.error().message;
    EXPECT_EQ(*r, ms) << text;
  }
}

TEST(TimeFormat, ParsesDurationsBackFromNow) {
  const std::pair<const char*, int64_t> cases[] = {
      {"30s", 30'000},          {"30m", 1'800'000},        {"1h", 3'600'000},
      {"7d", 7 * 86'400'000LL}, {"2w", 14 * 86'400'000LL}, {"1.5h", 5'400'000},
  };
  for (const auto& [text, back] : cases) {
    auto r = ParseTimeSpec(text, kNow);
    ASSERT_TRUE(r.ok()) << text << ": " << r.error().message;
    EXPECT_EQ(*r, kNow - back) << text;
  }
}

TEST(TimeFormat, RefusesWhatItCannotReadUnambiguously) {
  for (const char* text :
       {"", "yesterday", "h", "1x", "-1h", "1..5h", ".5h", "1h ", "2026-13-01", "2026-02-30",
        "2025-02-29", "2026-11-30T24:00:00Z", "2026-11-30T08:00:00", "2026-11-30T08:00:00+1",
        "2026-11-30T08Z", "2026-11-30T08:00:00ZZ", "2026/11/30"}) {
    auto r = ParseTimeSpec(text, kNow);
    EXPECT_FALSE(r.ok()) << "'" << text << "' parsed as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, Code::kInvalidArgument);
    }
  }
  auto no_zone = ParseTimeSpec("2026-11-30T08:00:00", kNow);
  ASSERT_FALSE(no_zone.ok());
  EXPECT_NE(no_zone.error().message.find("time zone"), std::string::npos);
}

TEST(TimeFormat, FormatsUtc) {
  EXPECT_EQ(FormatTimeMs(1796025600000), "2026-11-30T08:00:00Z");
  EXPECT_EQ(FormatTimeMs(1796025600250, true), "2026-11-30T08:00:00.250Z");
  EXPECT_EQ(FormatTimeMs(0), "1970-01-01T00:00:00Z");
  auto back = ParseTimeSpec(FormatTimeMs(1709251199123, true), kNow);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, 1709251199123);
  const int64_t now = NowMs();
  EXPECT_GT(now, 1'700'000'000'000);
}

}  // namespace
}  // namespace kiln::store
