// BuildMountPlan's copy of kiln's runtime directory (CopyTreeRo): the plan
// must copy it into a tmpfs of its own from fds, never bind it, so that no
// mount of the sandbox has a host path as its root (docs/adr/0012).
#include "isolation/mount_ns.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kiln::isolation {
namespace {

namespace fs = std::filesystem;

class MountPlanCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-mount-plan-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& rel, const std::string& text, mode_t mode) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel) << text;
    ASSERT_EQ(::chmod((dir_ + "/" + rel).c_str(), mode), 0);
  }
  static std::string Target(const std::string& sandbox_path) { return "/tmp" + sandbox_path; }
  static const MountOp* Find(const MountPlan& plan, MountOpKind kind, const std::string& target) {
    for (const auto& op : plan.ops()) {
      if (op.kind == kind && op.target != nullptr && target == op.target) return &op;
    }
    return nullptr;
  }

  std::string dir_;
};

TEST_F(MountPlanCopyTest, RuntimeIsCopiedIntoItsOwnTmpfsNotBound) {
  Write("kiln_runtime/launch.py", "print(1)\n", 0644);
  Write("kiln_runtime/__pycache__/launch.cpython-311.pyc", "pyc", 0644);
  Write("bin/tool", "#!/bin/sh\n", 0755);
  ASSERT_EQ(::symlink("kiln_runtime/launch.py", (dir_ + "/link").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  struct stat py {};
  ASSERT_EQ(::stat((dir_ + "/kiln_runtime/launch.py").c_str(), &py), 0);

  MountLayout layout;
  layout.runtime_dir = dir_;
  layout.zygote_lib_dir = dir_;  // copied whole, where the runtime is only its package
  auto plan = BuildMountPlan(layout);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();

  // Nothing is bound or detached from the host directory.
  for (const auto& op : plan->ops()) {
    if (op.source != nullptr) {
      EXPECT_EQ(std::string(op.source).find(dir_), std::string::npos)
          << "an op takes the host's runtime directory as its source: " << op.source;
    }
  }
  const std::string root = Target(kRuntimeMountPath);
  const MountOp* tmpfs = Find(*plan, MountOpKind::kTmpfs, root);
  ASSERT_NE(tmpfs, nullptr);
  EXPECT_EQ(tmpfs->flags & (MS_NOSUID | MS_NODEV), MS_NOSUID | MS_NODEV);

  const MountOp* launch = Find(*plan, MountOpKind::kCopyFd, root + "/kiln_runtime/launch.py");
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ(launch->mode, 0444u);  // no write bits
  EXPECT_EQ(launch->mtime_ns,
            static_cast<int64_t>(py.st_mtim.tv_sec) * 1000000000 + py.st_mtim.tv_nsec);
  struct stat fd_st {};
  ASSERT_EQ(::fstat(launch->fd, &fd_st), 0);  // the plan holds the fd open
  EXPECT_EQ(fd_st.st_ino, py.st_ino);

  // Of the runtime directory, only kiln_runtime/ (not its tests, README, ...).
  EXPECT_EQ(Find(*plan, MountOpKind::kCopyFd, root + "/bin/tool"), nullptr);
  EXPECT_EQ(Find(*plan, MountOpKind::kSymlink, root + "/link"), nullptr);
  EXPECT_NE(Find(*plan, MountOpKind::kMkdir, root + "/kiln_runtime"), nullptr);

  // A directory copied whole: executables keep x, symlinks stay links,
  // fifos are left out.
  const std::string lib = Target(kZygoteLibPath);
  const MountOp* tool = Find(*plan, MountOpKind::kCopyFd, lib + "/bin/tool");
  ASSERT_NE(tool, nullptr);
  EXPECT_EQ(tool->mode, 0555u);
  EXPECT_NE(Find(*plan, MountOpKind::kMkdir, root + "/kiln_runtime/__pycache__"), nullptr);
  EXPECT_NE(
      Find(*plan, MountOpKind::kCopyFd, root + "/kiln_runtime/__pycache__/launch.cpython-311.pyc"),
      nullptr);
  const MountOp* link = Find(*plan, MountOpKind::kSymlink, lib + "/link");
  ASSERT_NE(link, nullptr);
  EXPECT_STREQ(link->source, "kiln_runtime/launch.py");
  EXPECT_EQ(Find(*plan, MountOpKind::kCopyFd, lib + "/fifo"), nullptr);

  // Mounted before the copies, read-only after them.
  size_t at_tmpfs = 0, at_last_copy = 0, at_ro = 0;
  for (size_t i = 0; i < plan->ops().size(); ++i) {
    const auto& op = plan->ops()[i];
    if (op.target == nullptr || std::string(op.target).rfind(root, 0) != 0) continue;
    if (op.kind == MountOpKind::kTmpfs) at_tmpfs = i;
    if (op.kind == MountOpKind::kCopyFd) at_last_copy = i;
    if (op.kind == MountOpKind::kRemountRo) at_ro = i;
  }
  EXPECT_LT(at_tmpfs, at_last_copy);
  EXPECT_LT(at_last_copy, at_ro);

  const int fd = launch->fd;
  plan->CloseFds();
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // closed
}

TEST_F(MountPlanCopyTest, ADirectoryTooLargeToCopyIsAnError) {
  for (size_t i = 0; i <= kMaxCopiedFiles; ++i) {
    Write("kiln_runtime/f" + std::to_string(i), "", 0644);
  }
  MountLayout layout;
  layout.runtime_dir = dir_;
  auto plan = BuildMountPlan(layout);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().code, Code::kInvalidArgument);
  EXPECT_NE(plan.error().message.find("entries to copy"), std::string::npos)
      << plan.error().ToString();
}

TEST_F(MountPlanCopyTest, AMissingRuntimeDirectoryIsAnError) {
  MountLayout layout;
  layout.runtime_dir = dir_ + "/missing";
  auto plan = BuildMountPlan(layout);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().ToString().find("missing"), std::string::npos);
}

TEST_F(MountPlanCopyTest, WithoutAnOwnerTheChildMountsEachTmpfsWithTheInsideIds) {
  MountLayout layout;
  layout.workspace_bytes = layout.tmp_bytes = layout.shm_bytes = 1 << 20;
  auto plan = BuildMountPlan(layout);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  int tmpfs = 0;
  for (const auto& op : plan->ops()) {
    if (op.kind != MountOpKind::kTmpfs) continue;
    ++tmpfs;
    EXPECT_EQ(op.fd, -1) << op.target;
    ASSERT_NE(op.data, nullptr) << op.target;
    EXPECT_NE(std::string(op.data).find(",uid=1000,gid=1000"), std::string::npos) << op.data;
  }
  EXPECT_EQ(tmpfs, 5);  // the root, /dev, /dev/shm, /tmp, /workspace
}

TEST_F(MountPlanCopyTest, AsRootEachTmpfsIsMadeHereOwnedByTheSandboxsHostIds) {
  // What the sandbox's mountinfo would print of a tmpfs its child mounted:
  // `uid=`/`gid=` of its creator's host ids. A tmpfs made by the host's root
  // prints none, and its root belongs to the sandbox's host ids.
  if (::geteuid() != 0) GTEST_SKIP() << "fsopen of a tmpfs in the host's namespace needs root";
  MountLayout layout;
  layout.workspace_bytes = 3 << 20;
  layout.tmp_bytes = layout.shm_bytes = 1 << 20;
  layout.tmpfs_owner.emplace(54321, 54322);
  auto plan = BuildMountPlan(layout);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  int tmpfs = 0;
  for (const auto& op : plan->ops()) {
    if (op.kind != MountOpKind::kTmpfs) continue;
    ++tmpfs;
    EXPECT_EQ(op.data, nullptr) << op.target;
    ASSERT_GE(op.fd, 0) << op.target;
    struct stat st {};
    ASSERT_EQ(::fstat(op.fd, &st), 0) << op.target;
    EXPECT_EQ(st.st_uid, 54321u) << op.target;
    EXPECT_EQ(st.st_gid, 54322u) << op.target;
    if (Target(kWorkspacePath) == op.target) {
      EXPECT_EQ(st.st_mode & 07777, 0755u);
      struct statvfs sv {};
      ASSERT_EQ(::fstatvfs(op.fd, &sv), 0);
      EXPECT_EQ(sv.f_blocks * sv.f_frsize, 3u << 20);
      EXPECT_NE(sv.f_flag & ST_NOEXEC, 0u);
      EXPECT_NE(sv.f_flag & ST_NOSUID, 0u);
      EXPECT_NE(sv.f_flag & ST_NODEV, 0u);
    }
    if (Target(kTmpPath) == op.target) {
      EXPECT_EQ(st.st_mode & 07777, 01777u);
    }
  }
  EXPECT_EQ(tmpfs, 5);
  plan->CloseFds();
}

TEST_F(MountPlanCopyTest, MaskedProcDirectoriesAreBindsOfTheEmptyDirectory) {
  // An empty tmpfs of the child's own over each would print its host ids.
  MountLayout layout;
  layout.workspace_bytes = layout.tmp_bytes = layout.shm_bytes = 1 << 20;
  auto plan = BuildMountPlan(layout);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  const MountOp* empty = Find(*plan, MountOpKind::kMkdir, Target(kEmptyDirPath));
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->mode, 0555u);
  int masked = 0;
  for (const auto& op : plan->ops()) {
    if (op.kind != MountOpKind::kMaskDir) continue;
    ++masked;
    EXPECT_EQ(op.source, Target(kEmptyDirPath)) << op.target;
  }
  EXPECT_GT(masked, 5);
  // A pooled child's plan runs inside the jail, which has the directory.
  auto private_plan = BuildPrivateMountPlan(layout);
  ASSERT_TRUE(private_plan.ok());
  for (const auto& op : private_plan->ops()) {
    if (op.kind == MountOpKind::kMaskDir) {
      EXPECT_STREQ(op.source, kEmptyDirPath);
    }
  }
}

TEST_F(MountPlanCopyTest, APooledChildAttachesTheTmpfsThePoolMadeForIt) {
  MountLayout layout;
  layout.workspace_bytes = layout.tmp_bytes = layout.shm_bytes = 1 << 20;
  layout.private_tmpfs_fds[0] = 40;
  layout.private_tmpfs_fds[1] = 41;
  layout.private_tmpfs_fds[2] = 42;
  auto plan = BuildPrivateMountPlan(layout);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  const MountOp* shm = Find(*plan, MountOpKind::kTmpfs, "/dev/shm");
  const MountOp* tmp = Find(*plan, MountOpKind::kTmpfs, kTmpPath);
  const MountOp* ws = Find(*plan, MountOpKind::kTmpfs, kWorkspacePath);
  ASSERT_TRUE(shm != nullptr && tmp != nullptr && ws != nullptr);
  EXPECT_EQ(shm->fd, 40);
  EXPECT_EQ(tmp->fd, 41);
  EXPECT_EQ(ws->fd, 42);
  EXPECT_EQ(ws->data, nullptr);
  // The pooled child's workspace is at E2B's home directory too, after it is mounted.
  const MountOp* home = Find(*plan, MountOpKind::kRebind, kE2bHomePath);
  ASSERT_NE(home, nullptr);
  EXPECT_STREQ(home->source, kWorkspacePath);
  EXPECT_GT(home, ws);
}

// E2B's home directory is a second mount of the workspace (docs/e2b.md): its
// mount point is made in the root, the bind comes after the workspace's
// tmpfs, never executable; an extra mount may not cover it.
TEST_F(MountPlanCopyTest, TheWorkspaceIsBoundAgainAtE2bsHomeDirectory) {
  MountLayout layout;
  layout.workspace_bytes = layout.tmp_bytes = layout.shm_bytes = 1 << 20;
  auto plan = BuildMountPlan(layout);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_NE(Find(*plan, MountOpKind::kMkdir, Target(kE2bHomePath)), nullptr);
  const MountOp* ws = Find(*plan, MountOpKind::kTmpfs, Target(kWorkspacePath));
  const MountOp* home = Find(*plan, MountOpKind::kRebind, Target(kE2bHomePath));
  ASSERT_TRUE(ws != nullptr && home != nullptr);
  EXPECT_EQ(home->source, Target(kWorkspacePath));
  EXPECT_GT(home, ws);
  EXPECT_EQ(home->flags & MS_NOEXEC, static_cast<unsigned long>(MS_NOEXEC));
  for (const std::string& covering :
       {std::string("/home"), std::string(kE2bHomePath), std::string(kE2bHomePath) + "/data"}) {
    layout.extra_ro_paths = {covering};
    auto refused = BuildMountPlan(layout);
    ASSERT_FALSE(refused.ok()) << covering;
    EXPECT_NE(refused.error().message.find("where the sandbox shows its workspace"),
              std::string::npos)
        << refused.error().ToString();
  }
}

}  // namespace
}  // namespace kiln::isolation
