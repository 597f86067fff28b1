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
  // A member of another type is an error, not a type_error thrown (found by
  // fuzz/job_request_fuzzer.cc).
  auto k = EncodeRequest(ExecRequest{});
  k["stream"] = 1;
  EXPECT_FALSE(DecodeRequest(k).ok());
  k["stream"] = "yes";
  EXPECT_FALSE(DecodeRequest(k).ok());
}

TEST(SpawnerProtocol, SessionRequestRoundTrips) {
  SessionRequest r;
  r.id = "s1";
  r.profile = "datascience";
  r.limits.memory_bytes = 128ULL << 20;
  r.limits.timeout_s = 10;
  r.env = {{"FOO", "bar"}};
  r.max_lifetime_s = 120;
  r.interrupt_grace_s = 0.5;
  r.max_file_bytes = 1234;
  const auto j = EncodeSessionRequest(r);
  EXPECT_EQ(j["type"], "session_start");
  auto back = DecodeSessionRequest(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->id, "s1");
  EXPECT_EQ(back->profile, "datascience");
  EXPECT_EQ(*back->limits.memory_bytes, 128ULL << 20);
  EXPECT_DOUBLE_EQ(*back->limits.timeout_s, 10);
  ASSERT_EQ(back->env.size(), 1u);
  EXPECT_EQ(back->env[0].second, "bar");
  EXPECT_DOUBLE_EQ(back->max_lifetime_s, 120);
  EXPECT_DOUBLE_EQ(back->interrupt_grace_s, 0.5);
  EXPECT_EQ(back->max_file_bytes, 1234u);
  EXPECT_FALSE(DecodeSessionRequest(nlohmann::json::object()).ok());
}

TEST(SpawnerProtocol, StreamFlagRoundTrips) {
  ExecRequest r;
  r.stream = true;
  auto back = DecodeRequest(EncodeRequest(r));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->stream);
}

}  // namespace
}  // namespace kiln::spawner
