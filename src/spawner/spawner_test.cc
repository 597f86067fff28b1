#include "spawner/spawner.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "spawner/job_channel.h"
#include "supervisor/input_files.h"

namespace kiln::spawner {
namespace {

std::string ReadWhole(const policy::InputFile& f) {
  auto bytes = supervisor::ReadInput({f.fd->get(), f.name, f.size});
  return bytes.ok() ? *bytes : "<" + bytes.error().message + ">";
}

// A plan through a real job socket, as the server sends it and a supervisor
// reads it: the frame, then its fds in "fds" frames (SCM_RIGHTS).
template <typename Plan, typename Encode, typename Decode>
Result<Plan> OverASocket(const Plan& plan, Encode encode, Decode decode) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  UniqueFd server(sp[0]);
  FramedChannel supervisor(UniqueFd(sp[1]), kMaxRequestBytes);
  SharedFds fds;
  KILN_ASSIGN_OR_RETURN(nlohmann::json frame, encode(plan, &fds));
  KILN_TRY(WriteFrameWithFds(server.get(), frame, fds));
  fds.clear();  // the server's copies go; the supervisor's are its own
  server.Reset();
  KILN_ASSIGN_OR_RETURN(nlohmann::json got, supervisor.Read());
  KILN_ASSIGN_OR_RETURN(SharedFds came, ReadFdsBeside(supervisor, got));
  return decode(got, std::move(came));
}

Result<ExecPlan> ExecOverASocket(const ExecPlan& p) {
  return OverASocket(p, EncodePlan, DecodePlan);
}

const config::Config& Builtin() { return config::BuiltinConfig(); }

TEST(JobPlan, AnExecutionIsDecidedOnceAndTravelsAsIs) {
  ExecRequest r;
  r.id = "abc";
  r.profile = "default";
  r.limits.timeout_s = 2.5;
  r.limits.memory_bytes = 64ULL << 20;
  r.limits.pids = 32;
  r.code = "print(1)";
  r.return_files = std::vector<std::string>{"*.png"};
  r.env = {{"FOO", "bar"}};
  // More files than one "fds" frame carries.
  for (int i = 0; i < 20; ++i) {
    r.files.emplace_back("data/f" + std::to_string(i) + ".bin",
                         std::string("\0\x01\xff", 3) + std::to_string(i));
  }
  auto plan = PlanExecution(Builtin(), PoolKeysOf(Builtin()), r);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(r.files.empty());  // moved into the memfds
  EXPECT_FALSE(plan->pooled);    // its limits are not the pool's, and it has env
  auto back = ExecOverASocket(*plan);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->id, "abc");
  EXPECT_EQ(back->profile, "default");
  EXPECT_EQ(back->code, "print(1)");
  EXPECT_EQ(back->filename, "<cell>");
  ASSERT_TRUE(back->return_files.has_value());
  EXPECT_EQ((*back->return_files)[0], "*.png");
  EXPECT_EQ(back->env, plan->env);
  const policy::Limits& l = back->policy->limits();
  EXPECT_DOUBLE_EQ(l.wall_timeout_s, 2.5);
  EXPECT_EQ(l.memory_bytes, 64ULL << 20);
  EXPECT_EQ(l.pids, 32u);
  ASSERT_EQ(back->policy->input_files().size(), 20u);
  for (int i = 0; i < 20; ++i) {
    const auto& f = back->policy->input_files()[static_cast<size_t>(i)];
    EXPECT_EQ(f.name, "data/f" + std::to_string(i) + ".bin");
    EXPECT_EQ(ReadWhole(f), std::string("\0\x01\xff", 3) + std::to_string(i));
  }
}

TEST(JobPlan, ThePoolDecisionIsMadeOnceFromThePoolKeys) {
  const PoolKeys keys = PoolKeysOf(Builtin());
  ASSERT_TRUE(keys.count("default")) << "the built-in default profile has a pool";
  ExecRequest fits;
  fits.profile = "default";
  fits.limits.timeout_s = 5;  // per execution: still fits
  auto a = PlanExecution(Builtin(), keys, fits);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->pooled);
  ExecRequest bigger = fits;
  bigger.limits.memory_bytes = 256ULL << 20;  // fixed when the zygote forked
  auto b = PlanExecution(Builtin(), keys, bigger);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->pooled);
  ExecRequest env = fits;
  env.env = {{"A", "1"}};
  auto c = PlanExecution(Builtin(), keys, env);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->pooled);
  auto none = PlanExecution(Builtin(), {}, fits);  // a server without a pool
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->pooled);
  auto back = ExecOverASocket(*a);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->pooled);
}

TEST(JobPlan, BadRequestsAreRefusedNamingTheField) {
  ExecRequest unknown;
  unknown.profile = "nope";
  auto a = PlanExecution(Builtin(), {}, unknown);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().field, "profile");
  ExecRequest many;
  for (size_t i = 0; i <= kMaxInputFiles; ++i) many.files.emplace_back(std::to_string(i), "x");
  auto b = PlanExecution(Builtin(), {}, many);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().field, "files");
  ExecRequest big;
  big.limits.disk_bytes = 1 << 20;
  big.files.emplace_back("a", std::string((1 << 20) + 1, 'x'));
  auto c = PlanExecution(Builtin(), {}, big);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().field, "files");
  ExecRequest unsafe;
  unsafe.files.emplace_back("../a", "x");
  auto d = PlanExecution(Builtin(), {}, unsafe);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().field, "files");
  ExecRequest over;
  over.limits.memory_bytes = 1ULL << 50;
  auto e = PlanExecution(Builtin(), {}, over);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().field, "memory");
}

TEST(JobPlan, MalformedPlansAreErrors) {
  ExecRequest r;
  r.files.emplace_back("a.txt", "hello");
  auto plan = PlanExecution(Builtin(), {}, r);
  ASSERT_TRUE(plan.ok());
  SharedFds fds;
  auto j = EncodePlan(*plan, &fds);
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(DecodePlan(*j, fds).ok());
  EXPECT_FALSE(DecodePlan(nlohmann::json::object(), {}).ok());
  EXPECT_FALSE(DecodePlan(*j, {}).ok());  // its file did not come
  auto no_policy = *j;
  no_policy.erase("policy");
  EXPECT_FALSE(DecodePlan(no_policy, fds).ok());
  // A member of another type is an error, not a type_error thrown (found by
  // fuzz/job_request_fuzzer.cc).
  for (auto bad : {nlohmann::json(1), nlohmann::json("yes")}) {
    auto k = *j;
    k["stream"] = bad;
    EXPECT_FALSE(DecodePlan(k, fds).ok());
    k = *j;
    k["pooled"] = bad;
    EXPECT_FALSE(DecodePlan(k, fds).ok());
  }
  auto k = *j;
  k["fds"] = kMaxInputFiles + 1;
  EXPECT_FALSE(FdsOf(k).ok());
  k["fds"] = -1;
  EXPECT_FALSE(FdsOf(k).ok());
}

TEST(JobPlan, MoreFdsThanThePlanNamesAreRefused) {
  int sp[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  UniqueFd server(sp[0]);
  FramedChannel supervisor(UniqueFd(sp[1]), kMaxRequestBytes);
  auto fd = std::make_shared<const UniqueFd>(::dup(0));
  ASSERT_TRUE(WriteFrameWithFds(server.get(), {{"type", "execute"}, {"fds", 1}}, {fd, fd}).ok());
  auto got = supervisor.Read();
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(ReadFdsBeside(supervisor, *got).ok());
}

TEST(JobPlan, ASessionIsDecidedOnceAndTravelsAsIs) {
  SessionRequest r;
  r.id = "s1";
  r.profile = "default";
  r.limits.memory_bytes = 128ULL << 20;
  r.limits.timeout_s = 10;
  r.env = {{"FOO", "bar"}};
  r.max_lifetime_s = 120;
  r.interrupt_grace_s = 0.5;
  r.max_file_bytes = 1234;
  auto plan = PlanSession(Builtin(), PoolKeysOf(Builtin()), r);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto back = OverASocket(*plan, EncodeSessionPlan, DecodeSessionPlan);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->id, "s1");
  EXPECT_EQ(back->profile, "default");
  EXPECT_FALSE(back->pooled);
  EXPECT_EQ(back->policy->limits().memory_bytes, 128ULL << 20);
  EXPECT_DOUBLE_EQ(back->policy->limits().wall_timeout_s, 10);
  ASSERT_EQ(back->env.size(), 1u);
  EXPECT_EQ(back->env[0].second, "bar");
  EXPECT_DOUBLE_EQ(back->max_lifetime_s, 120);
  EXPECT_DOUBLE_EQ(back->interrupt_grace_s, 0.5);
  EXPECT_EQ(back->max_file_bytes, 1234u);
  SharedFds none;
  auto j = EncodeSessionPlan(*plan, &none);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["type"], "session_start");
  EXPECT_FALSE(DecodeSessionPlan(nlohmann::json::object(), {}).ok());
  (*j)["max_file_bytes"] = "big";
  EXPECT_FALSE(DecodeSessionPlan(*j, {}).ok());
}

// A result through a real job socket, as a supervisor sends it and the
// server reads it.
Result<ExecResponse> ResultOverASocket(const supervisor::ExecutionResult& r,
                                       nlohmann::json* sent = nullptr) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return ErrnoError("socketpair");
  UniqueFd supervisor(sp[0]);
  FramedChannel server(UniqueFd(sp[1]), kMaxResponseBytes);
  SharedFds fds;
  KILN_ASSIGN_OR_RETURN(nlohmann::json frame, EncodeResult(r, &fds));
  if (sent != nullptr) *sent = frame;
  KILN_TRY(WriteFrameWithFds(supervisor.get(), frame, fds));
  fds.clear();
  supervisor.Reset();
  KILN_ASSIGN_OR_RETURN(nlohmann::json got, server.Read());
  KILN_ASSIGN_OR_RETURN(SharedFds came, ReadFdsBeside(server, got));
  return DecodeResult(got, came);
}

TEST(JobResult, AResultComesBackTypedWithItsFilesInOneSealedMemfd) {
  supervisor::ExecutionResult r;
  r.outcome = supervisor::Outcome::kError;
  r.exit_code = 3;
  r.stdout_data = "out\n";
  r.reason = "exited with 3";
  r.error = supervisor::CellError{"ValueError", "x", {"tb"}};
  r.returned_files = {{"empty.txt", ""},
                      {"bin/data.bin", std::string("\0\x01\xff\0", 4)},
                      {"big.csv", std::string(1u << 20, 'c')}};
  nlohmann::json sent;
  auto back = ResultOverASocket(r, &sent);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(supervisor::ToJson(back->result, true), supervisor::ToJson(r, true));
  ASSERT_EQ(back->result.returned_files.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->result.returned_files[i].path, r.returned_files[i].path);
    EXPECT_EQ(back->result.returned_files[i].content, r.returned_files[i].content);
  }
  EXPECT_TRUE(back->output_audit.is_null());
  // No file byte in the frame: one memfd beside it.
  EXPECT_EQ(sent["fds"], 1);
  EXPECT_LT(sent.dump().size(), 4096u);
  EXPECT_EQ(sent.dump().find("content"), std::string::npos);

  // Without files: no fd at all.
  r.returned_files.clear();
  auto plain = ResultOverASocket(r, &sent);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_FALSE(sent.contains("fds"));
  EXPECT_TRUE(plain->result.returned_files.empty());
}

TEST(JobResult, AMalformedResultOrAForgedMemfdIsRefused) {
  supervisor::ExecutionResult r;
  r.outcome = supervisor::Outcome::kOk;
  r.exit_code = 0;
  r.returned_files = {{"a.txt", "abc"}, {"b.txt", "defg"}};
  SharedFds fds;
  auto frame = EncodeResult(r, &fds);
  ASSERT_TRUE(frame.ok());
  ASSERT_EQ(fds.size(), 1u);
  ASSERT_TRUE(DecodeResult(*frame, fds).ok());
  auto refused = [](const nlohmann::json& j, const SharedFds& f, const std::string& why) {
    auto d = DecodeResult(j, f);
    ASSERT_FALSE(d.ok()) << why;
    EXPECT_NE(d.error().message.find(why), std::string::npos) << d.error().message;
  };
  nlohmann::json j = *frame;
  j["files"][1]["size"] = 5;  // sizes that do not add up
  refused(j, fds, "do not add up");
  j = *frame;
  j["files"][0]["size"] = "3";
  refused(j, fds, "not {path, size}");
  refused(*frame, {}, "exactly one memfd");
  refused(*frame, {fds[0], fds[0]}, "exactly one memfd");
  j = *frame;
  j.erase("files");
  refused(j, fds, "without files");
  j = *frame;
  j["result"]["status"] = "fine";
  refused(j, fds, "status");
  // A memfd the sender could still write is not taken.
  UniqueFd open_memfd(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_TRUE(open_memfd);
  ASSERT_EQ(::write(open_memfd.get(), "abcdefg", 7), 7);
  refused(*frame, {std::make_shared<const UniqueFd>(std::move(open_memfd))}, "not a sealed memfd");
}

// A session's file bytes beside a frame (file_put, file_get's answer): one
// sealed memfd; the frame read with its fds leaves nothing for the next one,
// even when recvmsg took the fds with the frame before them.
TEST(JobFiles, FileBytesTravelInASealedMemfdAndNoFdsFrameIsLeftBehind) {
  int sp[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  UniqueFd server(sp[0]);
  FramedChannel supervisor(UniqueFd(sp[1]), kMaxRequestBytes);
  const std::string bytes("one\0two\xff", 8);
  SharedFds fds;
  auto put = EncodeFileBytes({{"type", "file_put"}, {"path", "a/b.bin"}}, bytes, &fds);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ((*put)["size"], bytes.size());
  EXPECT_FALSE(put->contains("content_base64"));
  // Both requests are on the socket before the first is read.
  ASSERT_TRUE(WriteFrameWithFds(server.get(), *put, fds).ok());
  ASSERT_TRUE(WriteFrame(server.get(), {{"type", "file_list"}}).ok());
  auto got = supervisor.Read();
  ASSERT_TRUE(got.ok());
  auto came = ReadFdsBeside(supervisor, *got);
  ASSERT_TRUE(came.ok()) << came.error().message;
  auto file = FileBytesOf(*got, *came, 1024);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->second, bytes.size());
  auto read = ReadMemfd(file->first, 0, file->second);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, bytes);
  auto next = supervisor.Read();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ((*next)["type"], "file_list");  // not the "fds" frame

  // Refused: over the cap, no memfd, a size that is not the memfd's, no size.
  EXPECT_EQ(FileBytesOf(*got, *came, 7).error().code, Code::kResourceExhausted);
  EXPECT_FALSE(FileBytesOf(*got, {}, 1024).ok());
  nlohmann::json wrong = *got;
  wrong["size"] = 9;
  EXPECT_NE(FileBytesOf(wrong, *came, 1024).error().message.find("do not add up"),
            std::string::npos);
  wrong.erase("size");
  EXPECT_EQ(FileBytesOf(wrong, *came, 1024).error().field, "size");
  UniqueFd open_memfd(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_EQ(::write(open_memfd.get(), bytes.data(), bytes.size()), 8);
  EXPECT_NE(FileBytesOf(*got, {std::make_shared<const UniqueFd>(std::move(open_memfd))}, 1024)
                .error()
                .message.find("not a sealed memfd"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::spawner
