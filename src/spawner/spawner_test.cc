#include "spawner/spawner.h"

#include <gtest/gtest.h>

namespace kiln::spawner {
namespace {

TEST(SpawnerProtocol, RequestRoundTrips) {
  ExecRequest r;
  r.id = "abc";
  r.profile = "strict";
  r.limits.timeout_s = 2.5;
  r.limits.memory_bytes = 64ULL << 20;
  r.limits.pids = 32;
  r.code = "print(1)";
  r.filename = "<cell>";
  r.files = {{"data/a.bin", std::string("\0\x01\xff", 3)}};
  r.return_files = std::vector<std::string>{"*.png"};
  auto back = DecodeRequest(EncodeRequest(r));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->id, "abc");
  EXPECT_EQ(back->profile, "strict");
  EXPECT_DOUBLE_EQ(*back->limits.timeout_s, 2.5);
  EXPECT_EQ(*back->limits.memory_bytes, 64ULL << 20);
  EXPECT_EQ(*back->limits.pids, 32u);
  EXPECT_FALSE(back->limits.cpus.has_value());
  ASSERT_EQ(back->files.size(), 1u);
  EXPECT_EQ(back->files[0].second, std::string("\0\x01\xff", 3));
  ASSERT_TRUE(back->return_files.has_value());
  EXPECT_EQ((*back->return_files)[0], "*.png");
}

TEST(SpawnerProtocol, MalformedRequestsAreErrors) {
  EXPECT_FALSE(DecodeRequest(nlohmann::json::object()).ok());
  auto j = EncodeRequest(ExecRequest{});
  j["files"] = nlohmann::json::array({{{"path", "a"}, {"content_base64", "!!"}}});
  EXPECT_FALSE(DecodeRequest(j).ok());
}

}  // namespace
}  // namespace kiln::spawner
