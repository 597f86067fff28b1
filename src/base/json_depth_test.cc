#include "base/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

std::string Nested(int n) { return std::string(n, '[') + std::string(n, ']'); }

TEST(JsonDepth, CountsArraysAndObjects) {
  EXPECT_EQ(JsonDepth("1"), 0);
  EXPECT_EQ(JsonDepth("{}"), 1);
  EXPECT_EQ(JsonDepth(R"({"a": [1, {"b": []}], "c": {}})"), 4);
  EXPECT_EQ(JsonDepth(Nested(64)), 64);
  EXPECT_TRUE(JsonDepthWithin(Nested(64)));
  EXPECT_FALSE(JsonDepthWithin(Nested(65)));
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  EXPECT_EQ(JsonDepth(R"(["[[[[", "\"[[[", "{{{\\"])"), 1);
  EXPECT_TRUE(JsonDepthWithin("\"" + std::string(1000, '[') + "\""));
}

TEST(JsonDepth, StopsScanningPastTheLimit) {
  // Millions of levels cost a scan up to the limit, not a recursion.
  const std::string deep = Nested(2'000'000);
  EXPECT_EQ(JsonDepth(deep, 64), 65);
  EXPECT_FALSE(JsonDepthWithin(deep));
}

TEST(JsonDepth, StrayClosersDoNotHideDepth) {
  // "]]]]" first must not let the following levels count from below zero.
  EXPECT_FALSE(JsonDepthWithin(std::string(100, ']') + Nested(65)));
}

}  // namespace
}  // namespace kiln
