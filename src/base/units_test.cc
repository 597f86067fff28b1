#include "base/units.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(ParseSize, AcceptsBinaryUnits) {
  EXPECT_EQ(*ParseSize("1048576"), 1048576u);
  EXPECT_EQ(*ParseSize("512m"), 512ULL << 20);
  EXPECT_EQ(*ParseSize("1G"), 1ULL << 30);
  EXPECT_EQ(*ParseSize("64KiB"), 64ULL << 10);
  EXPECT_EQ(*ParseSize("1.5g"), 3ULL << 29);
  EXPECT_EQ(*ParseSize(" 2 MB "), 2ULL << 20);
  EXPECT_EQ(*ParseSize("10b"), 10u);
}

TEST(ParseSize, RejectsMalformed) {
  for (const char* bad : {"", "m", "abc", "12x", "1.5", "-1m", "1e400", "99999999999t", "1.2.3m"}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, Code::kInvalidArgument) << bad;
    }
  }
}

TEST(ParseSize, ErrorNamesTheInput) {
  auto r = ParseSize("12parsecs");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("12parsecs"), std::string::npos);
}

TEST(ParseSeconds, Units) {
  EXPECT_DOUBLE_EQ(*ParseSeconds("30"), 30.0);
  EXPECT_DOUBLE_EQ(*ParseSeconds("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseSeconds("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseSeconds("2m"), 120.0);
  for (const char* bad : {"", "0", "-3", "abc", "5h", "nan", "inf", "1e308m", "4e-324ms"}) {
    EXPECT_FALSE(ParseSeconds(bad).ok()) << bad;
  }
}

TEST(FormatSize, Readable) {
  EXPECT_EQ(FormatSize(512), "512 B");
  EXPECT_EQ(FormatSize(1ULL << 20), "1 MiB");
  EXPECT_EQ(FormatSize(3ULL << 29), "1.5 GiB");
}

TEST(Result, CarriesErrnoAndStep) {
  Error e = ErrnoError("mount /proc", EPERM, SetupStep::kMountProc);
  EXPECT_EQ(e.code, Code::kPermissionDenied);
  EXPECT_EQ(e.ToString(), "mount /proc: Operation not permitted (step mount_proc)");
  Result<int> r = e;
  EXPECT_FALSE(r.ok());
  Result<int> v = 7;
  EXPECT_EQ(*v, 7);
}

TEST(SetupStep, EveryStepHasAName) {
  for (int i = 0; i < static_cast<int>(SetupStep::kCount); ++i) {
    EXPECT_NE(ToString(static_cast<SetupStep>(i)), "unknown") << i;
  }
}

}  // namespace
}  // namespace kiln

#include "base/base64.h"

namespace kiln {
namespace {

TEST(Base64, Decodes) {
  EXPECT_EQ(*Base64Decode(""), "");
  EXPECT_EQ(*Base64Decode("Zg=="), "f");
  EXPECT_EQ(*Base64Decode("Zm8="), "fo");
  EXPECT_EQ(*Base64Decode("Zm9v"), "foo");
  EXPECT_EQ(*Base64Decode("Zm9v\nYmFy"), "foobar");
  EXPECT_EQ(*Base64Decode("iVBORw0KGgo="), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST(Base64, EncodeRoundTrips) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(*Base64Decode(Base64Encode(all)), all);
}

TEST(Base64, RejectsGarbage) {
  for (const char* bad : {"Zm9", "Zm9v!", "Z===", "Zg==Zg==", "====", "Zm$v"}) {
    EXPECT_FALSE(Base64Decode(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace kiln
