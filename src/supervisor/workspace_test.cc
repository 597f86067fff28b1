// Collecting a workspace: whatever the sandbox left there, the supervisor's
// record of it stays bounded (the outside review's probe: 20,000 symlinks
// grew the root supervisor to 325 MB and its JSON to 80 MB).
#include "supervisor/workspace.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace kiln::supervisor {
namespace {

namespace fs = std::filesystem;

class Workspace : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kiln-collect-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    fs::create_directory(root_ / "ws");
    fd_ = UniqueFd(::open((root_ / "ws").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Symlinks(int n) {
    for (int i = 0; i < n; ++i)
      fs::create_symlink("/etc/passwd", root_ / "ws" / ("link-" + std::to_string(i)));
  }
  void File(const std::string& name, const std::string& content) {
    std::ofstream(root_ / "ws" / name) << content;
  }

  fs::path root_;
  UniqueFd fd_;
};

TEST_F(Workspace, SkippedRecordsAreCappedThenCounted) {
  Symlinks(2000);
  File("kept.txt", "kept");
  CollectLimits limits;
  std::vector<FileContent> files;
  auto report = CollectWorkspaceToMemory(fd_.get(), limits, {}, &files);
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].content, "kept");
  ASSERT_EQ(report->skipped.size(), limits.max_skipped + 1);
  EXPECT_EQ(report->skipped.back(), std::to_string(2000 - limits.max_skipped) + " more skipped");
  uint64_t bytes = 0;
  for (const auto& s : report->skipped) bytes += s.size();
  EXPECT_LE(bytes, limits.max_skipped_bytes + 64);
}

TEST_F(Workspace, SkippedRecordsAreCappedInBytesToo) {
  // Long names: the byte cap binds before the count.
  for (int i = 0; i < 300; ++i) {
    fs::create_symlink("/", root_ / "ws" / (std::string(200, 'n') + std::to_string(i)));
  }
  CollectLimits limits;
  std::vector<FileContent> files;
  auto report = CollectWorkspaceToMemory(fd_.get(), limits, {}, &files);
  ASSERT_TRUE(report.ok());
  uint64_t bytes = 0;
  for (const auto& s : report->skipped) bytes += s.size();
  EXPECT_LE(bytes, limits.max_skipped_bytes + 64);
  EXPECT_LT(report->skipped.size(), 100u);
  EXPECT_NE(report->skipped.back().find("more skipped"), std::string::npos);
}

TEST_F(Workspace, EntriesVisitedAreCapped) {
  Symlinks(500);
  CollectLimits limits;
  limits.max_entries = 100;
  const fs::path out = root_ / "out";
  auto report = CollectWorkspace(fd_.get(), out.string(), limits);
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  // 100 entries looked at (each a symlink, each recorded), then the cap's line.
  ASSERT_EQ(report->skipped.size(), 101u);
  EXPECT_NE(report->skipped.back().find("more than 100 entries"), std::string::npos)
      << report->skipped.back();
}

}  // namespace
}  // namespace kiln::supervisor
