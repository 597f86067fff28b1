#include "server/connect.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace kiln::server::connect {
namespace {

TEST(Connect, EncodeIsFlagsThenBigEndianLength) {
  const std::string e = Encode(0, "{}");
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e, std::string("\x00\x00\x00\x00\x02{}", 7));
  const std::string big(0x010203, 'x');
  const std::string b = Encode(kEndStream, big);
  EXPECT_EQ(b.substr(0, 5), std::string("\x02\x00\x01\x02\x03", 5));
}

TEST(Connect, EndStreamCarriesTheError) {
  EXPECT_EQ(EndStream(), std::string("\x02\x00\x00\x00\x02{}", 7));
  auto parsed = Parse(EndStream("not_found", "no \"such\" pid"), 1 << 20);
  ASSERT_TRUE(parsed.ok());
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].flags, kEndStream);
  const auto j = nlohmann::json::parse((*parsed)[0].message);
  EXPECT_EQ(j["error"]["code"], "not_found");
  EXPECT_EQ(j["error"]["message"], "no \"such\" pid");
}

TEST(Connect, ParseRoundTripsSeveralEnvelopes) {
  auto parsed = Parse(Encode(0, R"({"a":1})") + Encode(0, "") + EndStream(), 64);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].message, R"({"a":1})");
  EXPECT_EQ((*parsed)[1].message, "");
  EXPECT_EQ((*parsed)[2].flags, kEndStream);
  auto empty = Parse("", 64);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(Connect, ParseRefusesWhatIsNotAnEnvelope) {
  const std::string ok = Encode(0, "{}");
  struct Case {
    const char* name;
    std::string body;
    const char* why;
  };
  const Case cases[] = {
      {"prefix cut", ok.substr(0, 3), "5-byte prefix"},
      {"message cut", ok.substr(0, 6), "cut short: 1 of its 2 bytes"},
      {"after a whole one", ok + ok.substr(0, 4), "5-byte prefix"},
      {"compressed", Encode(kCompressed, "{}"), "compressed"},
      {"unknown flag", Encode(0x80, "{}"), "unknown flags"},
      {"over the bound", Encode(0, std::string(65, 'x')), "at most 64"},
      // A length of 4 GiB - 1 with nothing after it: refused by the bound,
      // never allocated.
      {"huge length", std::string("\x00\xff\xff\xff\xff", 5), "at most 64"},
  };
  for (const auto& c : cases) {
    auto parsed = Parse(c.body, 64);
    ASSERT_FALSE(parsed.ok()) << c.name;
    EXPECT_EQ(parsed.error().code, Code::kInvalidArgument) << c.name;
    EXPECT_NE(parsed.error().message.find(c.why), std::string::npos)
        << c.name << ": " << parsed.error().message;
  }
}

}  // namespace
}  // namespace kiln::server::connect
