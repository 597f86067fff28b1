#include "policy/policy.h"

#include <gtest/gtest.h>

namespace kiln::policy {
namespace {

TEST(PolicyBuilder, DefaultsAreStrict) {
  auto p = PolicyBuilder().Build();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->interpreter(), "/usr/bin/python3");
  EXPECT_DOUBLE_EQ(p->limits().wall_timeout_s, 30);
  EXPECT_DOUBLE_EQ(p->limits().cpu_time_s, 30);
  EXPECT_EQ(p->limits().output_bytes, 1u << 20);
  EXPECT_EQ(p->cgroup(), Requirement::kRequired);
  EXPECT_EQ(p->landlock(), Requirement::kRequired);
}

TEST(PolicyBuilder, IoLimitsDefaultGenerousAndValidated) {
  auto p = PolicyBuilder().Build();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->limits().io.read_bps, 256u << 20);
  EXPECT_EQ(p->limits().io.write_bps, 128u << 20);
  EXPECT_EQ(p->limits().io.read_iops, 8000u);
  EXPECT_EQ(p->limits().io.write_iops, 4000u);
  // 0 is "max": no limit.
  auto q = PolicyBuilder().IoReadBps(0).IoWriteBps(1u << 20).IoReadIops(16).IoWriteIops(0).Build();
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->limits().io.read_bps, 0u);
  EXPECT_EQ(q->limits().io.write_bps, 1u << 20);
  EXPECT_EQ(q->limits().io.read_iops, 16u);
  struct Case {
    PolicyBuilder b;
    const char* field;
  } cases[] = {
      {PolicyBuilder().IoReadBps((1u << 20) - 1), "io.read_bps: "},
      {PolicyBuilder().IoWriteBps(4096), "io.write_bps: "},
      {PolicyBuilder().IoReadIops(15), "io.read_iops: "},
      {PolicyBuilder().IoWriteIops(1), "io.write_iops: "},
  };
  for (auto& c : cases) {
    auto r = c.b.Build();
    ASSERT_FALSE(r.ok()) << c.field;
    EXPECT_EQ(r.error().message.rfind(c.field, 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find("\"max\""), std::string::npos) << r.error().message;
  }
}

TEST(PolicyBuilder, CpuTimeFollowsTimeoutUnlessSet) {
  auto p = PolicyBuilder().WallTimeout(5).Build();
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->limits().cpu_time_s, 5);
  auto q = PolicyBuilder().WallTimeout(5).CpuTime(2).Build();
  ASSERT_TRUE(q.ok());
  EXPECT_DOUBLE_EQ(q->limits().cpu_time_s, 2);
}

// A wall clock alone is the limit a busy loop must be reported against: the
// implicit cpu-time bound is never enforced below what the wall clock allows.
TEST(PolicyBuilder, OnlyAnExplicitCpuTimeIsALimitOfItsOwn) {
  auto p = PolicyBuilder().WallTimeout(2).Build();
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->limits().cpu_time_explicit);
  EXPECT_DOUBLE_EQ(CpuBackstopSeconds(p->limits(), 2, true), 3);    // 2 s of 1 CPU, + 1 s
  EXPECT_GT(CpuBackstopSeconds(p->limits(), 2, false), 2);          // every online CPU, + 1 s
  EXPECT_DOUBLE_EQ(CpuBackstopSeconds(p->limits(), 60, true), 61);  // a session's longer cell
  auto two = PolicyBuilder().WallTimeout(2).Cpus(2).Build();
  ASSERT_TRUE(two.ok());
  EXPECT_DOUBLE_EQ(CpuBackstopSeconds(two->limits(), 2, true), 5);  // two CPUs' worth
  auto q = PolicyBuilder().WallTimeout(2).CpuTime(1.5).Build();
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->limits().cpu_time_explicit);
  EXPECT_DOUBLE_EQ(CpuBackstopSeconds(q->limits(), 2, true), 1.5);
  EXPECT_DOUBLE_EQ(CpuBackstopSeconds(q->limits(), 2, false), 1.5);
}

TEST(PolicyBuilder, StickyFirstErrorNamesTheField) {
  auto p = PolicyBuilder().Memory(1024).Pids(1).Build();
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, Code::kInvalidArgument);
  EXPECT_EQ(p.error().message.rfind("memory:", 0), 0u) << p.error().message;
}

TEST(PolicyBuilder, RejectsOutOfRange) {
  EXPECT_FALSE(PolicyBuilder().WallTimeout(0).Build().ok());
  EXPECT_FALSE(PolicyBuilder().WallTimeout(-1).Build().ok());
  EXPECT_FALSE(PolicyBuilder().Cpus(0).Build().ok());
  EXPECT_FALSE(PolicyBuilder().Cpus(10000).Build().ok());
  EXPECT_FALSE(PolicyBuilder().Pids(2).Build().ok());
  EXPECT_FALSE(PolicyBuilder().OutputLimit(0).Build().ok());
  EXPECT_FALSE(PolicyBuilder().Disk(1000).Build().ok());
  EXPECT_TRUE(PolicyBuilder().Cpus(0.5).Pids(64).Disk(1 << 20).Build().ok());
}

TEST(PolicyBuilder, InterpreterMustBeAbsoluteAndExecutable) {
  auto rel = PolicyBuilder().Interpreter("python3").Build();
  ASSERT_FALSE(rel.ok());
  EXPECT_NE(rel.error().message.find("absolute"), std::string::npos);
  EXPECT_FALSE(PolicyBuilder().Interpreter("/nonexistent/python3").Build().ok());
}

TEST(PolicyBuilder, FileNames) {
  auto p = PolicyBuilder().AddFile("/etc/hostname", "").AddFile("/etc/hostname", "h2.txt").Build();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->input_files().size(), 2u);
  EXPECT_EQ(p->input_files()[0].name, "hostname");
  EXPECT_EQ(p->input_files()[1].name, "h2.txt");
  EXPECT_FALSE(PolicyBuilder().AddFile("/etc/hostname", "../x").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddFile("/etc/hostname", "a/b").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddFile("/etc/hostname", "..").Build().ok());
  auto dup = PolicyBuilder().AddFile("/etc/hostname", "x").AddFile("/etc/os-release", "x").Build();
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find("twice"), std::string::npos);
}

TEST(PolicyBuilder, BuildOnce) {
  PolicyBuilder b;
  EXPECT_TRUE(b.Build().ok());
  EXPECT_FALSE(b.Build().ok());
}

TEST(IsSafeFileName, Cases) {
  EXPECT_TRUE(IsSafeFileName("data.csv"));
  EXPECT_TRUE(IsSafeFileName(".hidden"));
  EXPECT_FALSE(IsSafeFileName(""));
  EXPECT_FALSE(IsSafeFileName("."));
  EXPECT_FALSE(IsSafeFileName(".."));
  EXPECT_FALSE(IsSafeFileName("a/b"));
  EXPECT_FALSE(IsSafeFileName(std::string("a\0b", 3)));
  EXPECT_FALSE(IsSafeFileName(std::string(256, 'x')));
}

}  // namespace
}  // namespace kiln::policy

namespace kiln::policy {
namespace {

TEST(PolicyBuilder, ImportPolicy) {
  auto p = PolicyBuilder().Imports({ImportPolicy::Mode::kDenylist, StrictDenylist()}).Build();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->import_policy().mode, ImportPolicy::Mode::kDenylist);
  EXPECT_EQ(p->import_policy().modules.size(), 8u);
  EXPECT_FALSE(PolicyBuilder().Imports({ImportPolicy::Mode::kDenylist, {"os;rm"}}).Build().ok());
  EXPECT_FALSE(PolicyBuilder().Imports({ImportPolicy::Mode::kOpen, {"os"}}).Build().ok());
}

TEST(PolicyBuilder, PreloadAndModuleNames) {
  EXPECT_TRUE(IsModuleName("numpy"));
  EXPECT_TRUE(IsModuleName("matplotlib.pyplot"));
  EXPECT_TRUE(IsModuleName("_x1"));
  EXPECT_FALSE(IsModuleName(""));
  EXPECT_FALSE(IsModuleName("1x"));
  EXPECT_FALSE(IsModuleName("a..b"));
  EXPECT_FALSE(IsModuleName(".a"));
  EXPECT_FALSE(IsModuleName("a."));
  EXPECT_FALSE(IsModuleName("a-b"));
  auto bad = PolicyBuilder().Preload({"numpy", "x y"}).Build();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("preload:", 0), 0u);
}

TEST(PolicyBuilder, ReadOnlyMounts) {
  EXPECT_TRUE(PolicyBuilder().AddReadOnlyMount("/var/lib").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddReadOnlyMount("relative").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddReadOnlyMount("/proc/sys").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddReadOnlyMount("/tmp").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddReadOnlyMount("/").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddReadOnlyMount("/var/../etc").Build().ok());
  EXPECT_FALSE(PolicyBuilder().AddReadOnlyMount("/nonexistent-dir-kiln").Build().ok());
}

TEST(PolicyBuilder, DisplayLimits) {
  auto p = PolicyBuilder().MaxImages(3).MaxImageBytes(1 << 20).Build();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->display_limits().max_images, 3u);
  EXPECT_FALSE(PolicyBuilder().MaxImageBytes(1ULL << 30).Build().ok());
}

}  // namespace
}  // namespace kiln::policy

namespace kiln::policy {
namespace {

TEST(PolicyBuilder, ContentFilesAndRelativePaths) {
  EXPECT_TRUE(IsSafeRelativePath("a.csv"));
  EXPECT_TRUE(IsSafeRelativePath("data/sub/a.csv"));
  EXPECT_FALSE(IsSafeRelativePath(""));
  EXPECT_FALSE(IsSafeRelativePath("/etc/passwd"));
  EXPECT_FALSE(IsSafeRelativePath("../x"));
  EXPECT_FALSE(IsSafeRelativePath("a/../../x"));
  EXPECT_FALSE(IsSafeRelativePath("a//b"));
  EXPECT_FALSE(IsSafeRelativePath("a/"));
  EXPECT_FALSE(IsSafeRelativePath("./a"));
  EXPECT_FALSE(IsSafeRelativePath(std::string("a\0b", 3)));
  EXPECT_FALSE(IsSafeRelativePath(std::string(4096, 'a')));
  EXPECT_FALSE(IsSafeRelativePath(std::string(256, 'a')));
  auto p = PolicyBuilder().AddFileContent("data/a.csv", "x,y\n").Build();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->input_files().size(), 1u);
  EXPECT_EQ(*p->input_files()[0].content, "x,y\n");
  auto bad = PolicyBuilder().AddFileContent("../a", "x").Build();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("files:", 0), 0u);
  EXPECT_FALSE(PolicyBuilder().AddFileContent("a", "x").AddFileContent("a/b", "y").Build().ok());
  EXPECT_FALSE(
      PolicyBuilder().Disk(1 << 20).AddFileContent("big", std::string(2 << 20, 'x')).Build().ok());
}

}  // namespace
}  // namespace kiln::policy
