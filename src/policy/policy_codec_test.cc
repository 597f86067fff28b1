#include "policy/policy_codec.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace kiln::policy {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  off_t at = 0;
  while ((n = ::pread(fd, buf, sizeof buf, at)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

SandboxPolicy Rich() {
  PolicyBuilder b;
  b.WallTimeout(7).CpuTime(3).Memory(300u << 20).Cpus(0.5).Pids(40).OutputLimit(4096);
  b.Disk(32u << 20).IoReadBps(0).IoWriteIops(64);
  b.CgroupRequirement(Requirement::kBestEffort).JailBackend(Backend::kGvisor);
  b.Imports({ImportPolicy::Mode::kDenylist, {"socket", "os.path"}});
  b.Preload({"json", "numpy"}).MaxImages(3).MaxImageBytes(1000);
  b.AddReadOnlyMount("/var");  // exists on every host, not one kiln builds
  b.AddFileContent("data/a.csv", "x,y\n1,2\n");
  auto fd = SealedMemfd("t", "hello");
  EXPECT_TRUE(fd.ok());
  b.AddFileFd("b.txt", std::make_shared<const UniqueFd>(std::move(*fd)), 5);
  auto p = b.Build();
  EXPECT_TRUE(p.ok()) << p.error().message;
  return std::move(*p);
}

TEST(PolicyCodec, ABuiltPolicyTravelsAsIs) {
  const SandboxPolicy p = Rich();
  std::vector<std::shared_ptr<const UniqueFd>> fds;
  auto j = EncodePolicy(p, &fds);
  ASSERT_TRUE(j.ok()) << j.error().message;
  ASSERT_EQ(fds.size(), 2u);  // the content became a memfd too
  // Through text, as on the job channel.
  auto back = DecodePolicy(nlohmann::json::parse(j->dump()), fds);
  ASSERT_TRUE(back.ok()) << back.error().message;
  const Limits& a = p.limits();
  const Limits& b = back->limits();
  EXPECT_EQ(a.wall_timeout_s, b.wall_timeout_s);
  EXPECT_EQ(a.cpu_time_s, b.cpu_time_s);
  EXPECT_TRUE(b.cpu_time_explicit);
  EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  EXPECT_EQ(a.cpus, b.cpus);
  EXPECT_EQ(a.pids, b.pids);
  EXPECT_EQ(a.output_bytes, b.output_bytes);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
  EXPECT_EQ(a.tmp_bytes, b.tmp_bytes);
  EXPECT_EQ(a.shm_bytes, b.shm_bytes);
  EXPECT_EQ(a.open_files, b.open_files);
  EXPECT_EQ(b.io.read_bps, 0u);
  EXPECT_EQ(b.io.write_iops, 64u);
  EXPECT_EQ(a.io.write_bps, b.io.write_bps);
  EXPECT_EQ(a.io.read_iops, b.io.read_iops);
  EXPECT_EQ(back->interpreter(), p.interpreter());
  EXPECT_EQ(back->cgroup(), Requirement::kBestEffort);
  EXPECT_EQ(back->landlock(), p.landlock());
  EXPECT_EQ(back->hostname(), p.hostname());
  EXPECT_EQ(back->backend(), Backend::kGvisor);
  EXPECT_EQ(back->import_policy().mode, ImportPolicy::Mode::kDenylist);
  EXPECT_EQ(back->import_policy().modules, p.import_policy().modules);
  EXPECT_EQ(back->preload(), p.preload());
  EXPECT_EQ(back->display_limits().max_images, 3u);
  EXPECT_EQ(back->display_limits().max_image_bytes, 1000u);
  EXPECT_EQ(back->extra_ro_mounts(), p.extra_ro_mounts());
  ASSERT_EQ(back->input_files().size(), 2u);
  EXPECT_EQ(back->input_files()[0].name, "data/a.csv");
  EXPECT_EQ(back->input_files()[0].size, 8u);
  EXPECT_EQ(ReadAll(back->input_files()[0].fd->get()), "x,y\n1,2\n");
  EXPECT_FALSE(back->input_files()[0].content.has_value());
  EXPECT_EQ(back->input_files()[1].name, "b.txt");
  EXPECT_EQ(ReadAll(back->input_files()[1].fd->get()), "hello");
}

TEST(PolicyCodec, InputMemfdsAreSealedAndNotExecutable) {
  auto fd = SealedMemfd("t", "abc");
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(::write(fd->get(), "x", 1), -1);  // F_SEAL_WRITE
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fd->get(), 0), 0);  // F_SEAL_SHRINK
  const int seals = ::fcntl(fd->get(), F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SEAL);
  EXPECT_TRUE(seals & F_SEAL_GROW);
}

TEST(PolicyCodec, MalformedPoliciesAreErrorsNotDefaults) {
  const SandboxPolicy p = Rich();
  std::vector<std::shared_ptr<const UniqueFd>> fds;
  auto good = EncodePolicy(p, &fds);
  ASSERT_TRUE(good.ok());
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    bool drop_fds = false;
  } cases[] = {
      {"not an object", [](nlohmann::json& j) { j = nlohmann::json::array(); }},
      {"no limits", [](nlohmann::json& j) { j.erase("limits"); }},
      {"a limit of another type", [](nlohmann::json& j) { j["limits"]["memory_bytes"] = "1"; }},
      {"a negative count", [](nlohmann::json& j) { j["limits"]["pids"] = -1; }},
      {"a zero timeout", [](nlohmann::json& j) { j["limits"]["wall_timeout_s"] = 0; }},
      {"a missing limit", [](nlohmann::json& j) { j["limits"].erase("open_files"); }},
      {"a relative interpreter", [](nlohmann::json& j) { j["interpreter"] = "python3"; }},
      {"an unknown backend", [](nlohmann::json& j) { j["backend"] = "docker"; }},
      {"an unknown requirement", [](nlohmann::json& j) { j["landlock"] = "maybe"; }},
      {"an unknown import mode", [](nlohmann::json& j) { j["imports"]["mode"] = "x"; }},
      {"a preload that is no module", [](nlohmann::json& j) { j["preload"] = {"a b"}; }},
      {"a relative mount", [](nlohmann::json& j) { j["ro_mounts"] = {"usr"}; }},
      {"an unsafe input path", [](nlohmann::json& j) { j["input_files"][0]["name"] = "../x"; }},
      {"an fd index out of range", [](nlohmann::json& j) { j["input_files"][0]["fd"] = 9; }},
      {"one fd for two files", [](nlohmann::json& j) { j["input_files"][1]["fd"] = 0; }},
      {"a size that is not the file's", [](nlohmann::json& j) { j["input_files"][1]["size"] = 6; }},
      {"no fds with the frame", [](nlohmann::json&) {}, true},
  };
  for (const auto& c : cases) {
    nlohmann::json j = *good;
    c.edit(j);
    auto r = DecodePolicy(j, c.drop_fds ? std::vector<std::shared_ptr<const UniqueFd>>{} : fds);
    EXPECT_FALSE(r.ok()) << c.what;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, Code::kInvalidArgument) << c.what;
    }
  }
}

}  // namespace
}  // namespace kiln::policy
