#include "ipc/frame.h"

#include <gtest/gtest.h>

namespace kiln::ipc {
namespace {

TEST(Frame, RoundTrip) {
  FrameReader r;
  const std::string wire = EncodeMessage(nlohmann::json{{"type", "hello"}, {"protocol", 1}}) +
                           EncodeFrame(std::string_view("{\"type\":\"x\"}"));
  r.Feed(wire.data(), wire.size());
  auto a = r.Next();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->has_value());
  auto j = ParseFrame(**a);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["type"], "hello");
  auto b = r.Next();
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(**b, "{\"type\":\"x\"}");
  auto c = r.Next();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
  EXPECT_EQ(r.pending(), 0u);
}

TEST(Frame, ByteAtATime) {
  FrameReader r;
  const std::string wire = EncodeFrame(std::string_view("{\"type\":\"a\"}"));
  for (size_t i = 0; i + 1 < wire.size(); ++i) {
    r.Feed(&wire[i], 1);
    auto n = r.Next();
    ASSERT_TRUE(n.ok());
    EXPECT_FALSE(n->has_value()) << i;
  }
  r.Feed(&wire.back(), 1);
  auto n = r.Next();
  ASSERT_TRUE(n.ok() && n->has_value());
}

TEST(Frame, OversizedLengthIsRefusedBeforeBuffering) {
  FrameReader r(1024);
  const char header[4] = {0, 0, 4, 1};  // 1025
  r.Feed(header, 4);
  auto n = r.Next();
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().code, Code::kResourceExhausted);
  const char huge[4] = {'\xff', '\xff', '\xff', '\xff'};
  FrameReader r2;
  r2.Feed(huge, 4);
  EXPECT_FALSE(r2.Next().ok());
}

TEST(Frame, TruncatedFrameStaysPending) {
  FrameReader r;
  std::string wire = EncodeFrame(std::string_view("{\"type\":\"a\"}"));
  wire.pop_back();
  r.Feed(wire.data(), wire.size());
  auto n = r.Next();
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->has_value());
  EXPECT_GT(r.pending(), 0u);
}

TEST(Frame, ParseRejectsGarbage) {
  EXPECT_FALSE(ParseFrame("not json").ok());
  EXPECT_FALSE(ParseFrame("[1,2]").ok());
  EXPECT_FALSE(ParseFrame("{\"type\": 3}").ok());
  EXPECT_FALSE(ParseFrame("{}").ok());
  EXPECT_FALSE(ParseFrame(std::string("{\"type\":\"a\"\0}", 13)).ok());
  EXPECT_TRUE(ParseFrame("{\"type\":\"a\",\"extra\":[1]}").ok());
  // nlohmann stops at a NUL: the rest of the frame would go unread.
  EXPECT_FALSE(ParseFrame(std::string("{\"type\":\"a\"}\0{\"type\":\"b\"}", 25)).ok());
}

// nlohmann stops reading at a NUL byte: "{...}\0junk" parsed as "{...}"
// (found by fuzz/frame_fuzzer.cc). A raw NUL is not JSON: the frame is refused.
TEST(Frame, NulByteIsNotJson) {
  EXPECT_FALSE(ParseFrame(std::string("{\"type\":\"a\"}") + '\0' + "{\"type\":\"b\"").ok());
  EXPECT_FALSE(ParseFrame(std::string("{\"type\":\"a\"}") + '\0').ok());
  EXPECT_TRUE(ParseFrame("{\"type\":\"a\",\"s\":\"\\u0000\"}").ok());  // an escaped NUL is fine
}

// A display_data frame whose metadata nests 60,000 deep used to crash the
// supervisor (copying it recursed once per level): refused, unparsed.
TEST(Frame, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = "{\"type\":\"display_data\",\"metadata\":" + std::string(60000, '[') +
                           std::string(60000, ']') + "}";
  auto r = ParseFrame(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("deeper than 64"), std::string::npos) << r.error().message;
  const std::string ok =
      "{\"type\":\"a\",\"m\":" + std::string(63, '[') + std::string(63, ']') + "}";
  EXPECT_TRUE(ParseFrame(ok).ok());
}

TEST(Frame, TypedGetters) {
  auto j = nlohmann::json::parse(R"({"s":"x","i":3,"f":1.5,"m":{"a":"b"},"bad":{"a":1}})");
  EXPECT_EQ(*GetString(j, "s"), "x");
  EXPECT_FALSE(GetString(j, "i").ok());
  EXPECT_EQ(*GetInt(j, "i"), 3);
  EXPECT_FALSE(GetInt(j, "f").ok());
  EXPECT_FALSE(GetInt(j, "missing").ok());
  EXPECT_TRUE(GetStringMap(j, "m").ok());
  auto bad = GetStringMap(j, "bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("\"a\""), std::string::npos);
}

}  // namespace
}  // namespace kiln::ipc
