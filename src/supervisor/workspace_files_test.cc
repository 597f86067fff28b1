#include "supervisor/workspace_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/unique_fd.h"
#include "testlib/temp_dir.h"

namespace kiln::supervisor {
namespace {

namespace fs = std::filesystem;

using kiln::testing::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void Spit(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

// Names the atomic write leaves behind if it fails to clean up.
std::vector<std::string> TempFilesIn(const std::string& root) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename().string().rfind(".kiln-put-", 0) == 0) found.push_back(e.path());
  }
  return found;
}

constexpr WorkspaceCaps kRoomy{64ULL << 20, 256ULL << 20};

class WorkspaceFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ws_fd_.Reset(::open(ws_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(ws_fd_.valid());
  }
  std::string Ws(const std::string& rel) const { return ws_.path() + "/" + rel; }
  Status Write(const std::string& path, std::string_view bytes,
               const WorkspaceCaps& caps = kRoomy) {
    return WriteFileBeneath(ws_fd_.get(), path, bytes, caps, ::getuid(), ::getgid());
  }
  Code CodeOf(const Status& s) { return s.ok() ? Code::kOk : s.error().code; }
  template <typename T>
  Code CodeOf(const Result<T>& r) {
    return r.ok() ? Code::kOk : r.error().code;
  }

  TempDir ws_;
  TempDir outside_;
  UniqueFd ws_fd_;
};

TEST(NormalizeWorkspacePath, AcceptsPlainRelativePaths) {
  const std::vector<std::string> goods = {
      "a",         "a/b/c.txt",           "data/2024-01.csv",          ".hidden",
      "a/..b/c..", std::string(255, 'x'), "a/" + std::string(255, 'y')};
  for (const std::string& good : goods) {
    auto r = NormalizeWorkspacePath(good);
    ASSERT_TRUE(r.ok()) << good << ": " << r.error().ToString();
    EXPECT_EQ(*r, good);
  }
  // 16 components is the deepest allowed.
  std::string deep = "d";
  for (int i = 1; i < 16; ++i) deep += "/d";
  EXPECT_TRUE(NormalizeWorkspacePath(deep).ok());
}

TEST(NormalizeWorkspacePath, RefusesEveryBadKindWithAReason) {
  std::string seventeen = "d";
  for (int i = 1; i < 17; ++i) seventeen += "/d";
  std::string long_total;
  while (long_total.size() < 4096) long_total += std::string(200, 'z') + "/";
  long_total.resize(4096);
  long_total.back() = 'z';
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {std::string("a\0b", 3), "NUL"},
      {"/etc/passwd", "absolute"},
      {"..", "'..'"},
      {"../x", "'..'"},
      {"a/../../x", "'..'"},
      {"a/..", "'..'"},
      {".", "'.'"},
      {"./a", "'.'"},
      {"a/./b", "'.'"},
      {"a//b", "empty component"},
      {"a/", "empty component"},
      {std::string(256, 'x'), "255"},
      {"a/" + std::string(256, 'x'), "255"},
      {long_total, "4095"},
      {seventeen, "16"},
  };
  for (const auto& [bad, why] : cases) {
    auto r = NormalizeWorkspacePath(bad);
    ASSERT_FALSE(r.ok()) << "accepted: " << bad;
    EXPECT_EQ(r.error().code, Code::kInvalidArgument) << bad;
    EXPECT_NE(r.error().message.find(why), std::string::npos)
        << bad.substr(0, 40) << " -> " << r.error().message;
  }
}

TEST_F(WorkspaceFilesTest, BadPathsAreRefusedBeforeAnySyscall) {
  // fd -1: any syscall would fail with EBADF, which is not kInvalidArgument.
  for (const std::string bad : {"..", "../x", "/etc/passwd", "a/../../b", ""}) {
    EXPECT_EQ(CodeOf(WriteFileBeneath(-1, bad, "x", kRoomy, ::getuid(), ::getgid())),
              Code::kInvalidArgument)
        << bad;
    EXPECT_EQ(CodeOf(ReadFileBeneath(-1, bad, 100)), Code::kInvalidArgument) << bad;
    EXPECT_EQ(CodeOf(DeleteBeneath(-1, bad)), Code::kInvalidArgument) << bad;
  }
  // And nothing appeared next to the workspace.
  EXPECT_EQ(CodeOf(Write("../escaped.txt", "x")), Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(fs::path(ws_.path()).parent_path() / "escaped.txt"));
  // The per-file cap is also checked before any syscall.
  EXPECT_EQ(CodeOf(WriteFileBeneath(-1, "a.txt", "12345", {4, 100}, ::getuid(), ::getgid())),
            Code::kResourceExhausted);
}

TEST_F(WorkspaceFilesTest, WritesAndReadsFiveMebibytesOfRandomBytes) {
  std::string bytes(5 << 20, '\0');
  std::mt19937_64 rng(20240601);
  for (char& c : bytes) c = static_cast<char>(rng());
  bytes[0] = '\0';  // binary-safe, NULs included
  // The mode is 0644 whatever the supervisor's umask.
  const mode_t saved_umask = ::umask(077);
  auto written = Write("blob.bin", bytes);
  ::umask(saved_umask);
  ASSERT_TRUE(written.ok()) << written.error().ToString();
  EXPECT_EQ(Slurp(Ws("blob.bin")), bytes);
  auto back = ReadFileBeneath(ws_fd_.get(), "blob.bin", bytes.size());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_TRUE(*back == bytes);
  struct stat st {};
  ASSERT_EQ(::stat(Ws("blob.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_uid, ::getuid());
  // An empty file is a file too.
  ASSERT_TRUE(Write("empty", "").ok());
  auto empty = ReadFileBeneath(ws_fd_.get(), "empty", 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

// From an fd (an input's memfd, a session's file_put): file to file, exactly
// `size` bytes from offset 0, whatever the fd's own offset; a source shorter
// than it says leaves nothing behind; the caps count `size`.
TEST_F(WorkspaceFilesTest, WritesFromAnFdFileToFile) {
  std::string bytes(3 << 20, '\0');
  std::mt19937_64 rng(20261204);
  for (char& c : bytes) c = static_cast<char>(rng());
  UniqueFd src(::memfd_create("src", MFD_CLOEXEC));
  ASSERT_TRUE(src.valid());
  ASSERT_EQ(::write(src.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ASSERT_TRUE(WriteFileBeneath(ws_fd_.get(), "d/from_fd.bin", src.get(), bytes.size(), kRoomy,
                               ::getuid(), ::getgid())
                  .ok());
  EXPECT_TRUE(Slurp(Ws("d/from_fd.bin")) == bytes);
  // A prefix only.
  ASSERT_TRUE(
      WriteFileBeneath(ws_fd_.get(), "head", src.get(), 10, kRoomy, ::getuid(), ::getgid()).ok());
  EXPECT_EQ(Slurp(Ws("head")), bytes.substr(0, 10));
  // Shorter than it says: an error, no file, no temporary left.
  auto short_src = WriteFileBeneath(ws_fd_.get(), "short", src.get(), bytes.size() + 1, kRoomy,
                                    ::getuid(), ::getgid());
  ASSERT_FALSE(short_src.ok());
  EXPECT_NE(short_src.error().message.find("end at"), std::string::npos)
      << short_src.error().message;
  EXPECT_FALSE(fs::exists(Ws("short")));
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
  // The caps count the size asked for.
  EXPECT_EQ(CodeOf(WriteFileBeneath(ws_fd_.get(), "big", src.get(), bytes.size(),
                                    {bytes.size() - 1, 1ULL << 30}, ::getuid(), ::getgid())),
            Code::kResourceExhausted);
  EXPECT_EQ(CodeOf(WriteFileBeneath(ws_fd_.get(), "x", -1, 1, kRoomy, ::getuid(), ::getgid())),
            Code::kInvalidArgument);
}

TEST_F(WorkspaceFilesTest, CreatesNestedDirectories) {
  ASSERT_TRUE(Write("a/b/c/d.txt", "deep").ok());
  EXPECT_TRUE(fs::is_directory(Ws("a/b/c")));
  EXPECT_EQ(Slurp(Ws("a/b/c/d.txt")), "deep");
  // Existing directories are reused.
  ASSERT_TRUE(Write("a/b/e.txt", "side").ok());
  EXPECT_EQ(Slurp(Ws("a/b/e.txt")), "side");
  EXPECT_EQ(Slurp(Ws("a/b/c/d.txt")), "deep");
}

TEST_F(WorkspaceFilesTest, OverwriteReplacesTheFileByRename) {
  ASSERT_TRUE(Write("f.txt", "old content, longer").ok());
  struct stat before {};
  ASSERT_EQ(::stat(Ws("f.txt").c_str(), &before), 0);
  // A reader that opened the old file keeps seeing all of it: the new bytes
  // went to another inode that took the name, never into this one.
  UniqueFd reader(::open(Ws("f.txt").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(reader.valid());
  ASSERT_TRUE(Write("f.txt", "new").ok());
  struct stat after {};
  ASSERT_EQ(::stat(Ws("f.txt").c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);
  EXPECT_EQ(Slurp(Ws("f.txt")), "new");
  char buf[64] = {};
  EXPECT_EQ(::pread(reader.get(), buf, sizeof buf, 0), 19);
  EXPECT_EQ(std::string(buf), "old content, longer");
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
}

TEST_F(WorkspaceFilesTest, PerFileCapRefusesAndKeepsTheOldFile) {
  ASSERT_TRUE(Write("f.txt", "old").ok());
  const WorkspaceCaps caps{10, 1000};
  EXPECT_TRUE(Write("f.txt", std::string(10, 'a'), caps).ok());
  auto s = Write("f.txt", std::string(11, 'b'), caps);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kResourceExhausted);
  EXPECT_EQ(Slurp(Ws("f.txt")), std::string(10, 'a'));
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
  // A refused write into a new directory creates no directory either.
  EXPECT_EQ(CodeOf(Write("newdir/g.txt", std::string(11, 'b'), caps)), Code::kResourceExhausted);
  EXPECT_FALSE(fs::exists(Ws("newdir")));
}

TEST_F(WorkspaceFilesTest, WorkspaceCapCountsEveryFileAndTheReplacedOne) {
  const WorkspaceCaps caps{1000, 150};
  ASSERT_TRUE(Write("sub/a.bin", std::string(100, 'a'), caps).ok());
  // 100 + 60 > 150: refused, nothing written, no temp file.
  auto s = Write("b.bin", std::string(60, 'b'), caps);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kResourceExhausted);
  EXPECT_FALSE(fs::exists(Ws("b.bin")));
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
  // 100 + 50 == 150: allowed.
  ASSERT_TRUE(Write("b.bin", std::string(50, 'b'), caps).ok());
  // Replacing a.bin: 150 - 100 + 100 fits, 150 - 100 + 101 does not, and the
  // refused write leaves the old content.
  EXPECT_TRUE(Write("sub/a.bin", std::string(100, 'A'), caps).ok());
  EXPECT_EQ(CodeOf(Write("sub/a.bin", std::string(101, 'X'), caps)), Code::kResourceExhausted);
  EXPECT_EQ(Slurp(Ws("sub/a.bin")), std::string(100, 'A'));
  // Files the sandbox made itself count too.
  Spit(Ws("sub/made-inside.bin"), std::string(10, 'm'));
  EXPECT_EQ(CodeOf(Write("b.bin", std::string(51, 'b'), caps)), Code::kResourceExhausted);
  EXPECT_EQ(CodeOf(Write("c.bin", "x", caps)), Code::kResourceExhausted);
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
}

TEST_F(WorkspaceFilesTest, FullFilesystemIsResourceExhaustedAndCleansUp) {
  // RLIMIT_FSIZE makes write(2) fail with EFBIG half-way, as a full tmpfs
  // fails with ENOSPC: the temporary file must go and the old file stay.
  ASSERT_TRUE(Write("f.txt", "old").ok());
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto s = Write("f.txt", std::string(5000, 'n'));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Code::kResourceExhausted) << s.error().ToString();
  EXPECT_EQ(Slurp(Ws("f.txt")), "old");
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
}

TEST_F(WorkspaceFilesTest, SymlinksPointingOutsideAreNeverFollowed) {
  const std::string secret = outside_.path() + "/secret.txt";
  Spit(secret, "SECRET");
  ASSERT_EQ(::symlink(secret.c_str(), Ws("link_file").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.path().c_str(), Ws("link_dir").c_str()), 0);
  ASSERT_EQ(::mkdir(Ws("sub").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(outside_.path().c_str(), Ws("sub/link_dir").c_str()), 0);
  // A relative link that climbs out, as sandbox code would make one.
  ASSERT_EQ(::symlink(("../" + fs::path(outside_.path()).filename().string()).c_str(),
                      Ws("rel_link").c_str()),
            0);

  // Write: refused, outside untouched, nothing created there.
  for (const std::string p : {"link_file", "link_dir/secret.txt", "link_dir/x.txt",
                              "sub/link_dir/x.txt", "rel_link/x.txt", "link_dir/new/x.txt"}) {
    auto s = Write(p, "PWNED");
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_EQ(s.error().code, Code::kInvalidArgument) << p << ": " << s.error().ToString();
  }
  EXPECT_EQ(Slurp(secret), "SECRET");
  EXPECT_FALSE(fs::exists(outside_.path() + "/x.txt"));
  EXPECT_FALSE(fs::exists(outside_.path() + "/new"));
  EXPECT_TRUE(fs::is_symlink(Ws("link_file")));  // not replaced either

  // Read: refused, the secret is never returned.
  for (const std::string p :
       {"link_file", "link_dir/secret.txt", "rel_link/secret.txt", "sub/link_dir/secret.txt"}) {
    auto r = ReadFileBeneath(ws_fd_.get(), p, 1000);
    ASSERT_FALSE(r.ok()) << p << " returned " << *r;
    EXPECT_EQ(r.error().code, Code::kInvalidArgument) << p;
  }

  // List: no link, nothing behind one.
  Spit(Ws("sub/real.txt"), "r");
  auto list = ListBeneath(ws_fd_.get(), 100, 8);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  std::vector<std::string> paths;
  for (const auto& e : *list) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"sub", "sub/real.txt"}));

  // Delete through a link: refused, the outside file survives.
  EXPECT_EQ(CodeOf(DeleteBeneath(ws_fd_.get(), "link_dir/secret.txt")), Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(DeleteBeneath(ws_fd_.get(), "rel_link/secret.txt")), Code::kInvalidArgument);
  EXPECT_EQ(Slurp(secret), "SECRET");
  // Deleting the link itself removes the link only.
  ASSERT_TRUE(DeleteBeneath(ws_fd_.get(), "link_file").ok());
  ASSERT_TRUE(DeleteBeneath(ws_fd_.get(), "link_dir").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(Ws("link_file"))));
  EXPECT_FALSE(fs::exists(fs::symlink_status(Ws("link_dir"))));
  EXPECT_EQ(Slurp(secret), "SECRET");
  EXPECT_TRUE(fs::is_directory(outside_.path()));
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
}

TEST_F(WorkspaceFilesTest, SymlinksInsideTheWorkspaceAreNotFollowedEither) {
  // Confinement alone (RESOLVE_BENEATH) would allow these; "never followed"
  // means a link is refused wherever it points.
  ASSERT_TRUE(Write("real/data.txt", "inside").ok());
  ASSERT_EQ(::symlink("real", Ws("dir_link").c_str()), 0);
  ASSERT_EQ(::symlink("real/data.txt", Ws("file_link").c_str()), 0);
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "file_link", 100)), Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "dir_link/data.txt", 100)),
            Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(Write("dir_link/new.txt", "x")), Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(Write("file_link", "x")), Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(DeleteBeneath(ws_fd_.get(), "dir_link/data.txt")), Code::kInvalidArgument);
  EXPECT_EQ(Slurp(Ws("real/data.txt")), "inside");
  EXPECT_FALSE(fs::exists(Ws("real/new.txt")));
  auto list = ListBeneath(ws_fd_.get(), 100, 8);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);  // real, real/data.txt
}

TEST_F(WorkspaceFilesTest, NonDirectoryOnThePathAndDirectoryTargets) {
  ASSERT_TRUE(Write("file.txt", "f").ok());
  ASSERT_TRUE(Write("dir/inner.txt", "i").ok());
  EXPECT_EQ(CodeOf(Write("file.txt/x", "x")), Code::kFailedPrecondition);
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "file.txt/x", 10)), Code::kFailedPrecondition);
  EXPECT_EQ(CodeOf(Write("dir", "x")), Code::kFailedPrecondition);
  EXPECT_TRUE(fs::is_directory(Ws("dir")));
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "dir", 10)), Code::kInvalidArgument);
  EXPECT_TRUE(TempFilesIn(ws_.path()).empty());
}

TEST_F(WorkspaceFilesTest, ReadErrors) {
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "missing.txt", 10)), Code::kNotFound);
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "no/such/dir.txt", 10)), Code::kNotFound);
  ASSERT_TRUE(Write("ten.txt", "0123456789").ok());
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "ten.txt", 9)), Code::kResourceExhausted);
  auto ok = ReadFileBeneath(ws_fd_.get(), "ten.txt", 10);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "0123456789");
  // A fifo with no writer: refused at once, never blocks (the alarm kills
  // the test binary if the open waits for a writer).
  ASSERT_EQ(::mkfifo(Ws("pipe").c_str(), 0644), 0);
  ::alarm(10);
  EXPECT_EQ(CodeOf(ReadFileBeneath(ws_fd_.get(), "pipe", 10)), Code::kInvalidArgument);
  ::alarm(0);
  EXPECT_EQ(CodeOf(Write("pipe", "x")), Code::kInvalidArgument);
}

TEST_F(WorkspaceFilesTest, ListGivesSortedSizesAndSkipsSpecialFiles) {
  ASSERT_TRUE(Write("b.txt", "12345").ok());
  ASSERT_TRUE(Write("a/z.bin", std::string(1000, 'z')).ok());
  ASSERT_TRUE(Write("a/y/x.txt", "").ok());
  ASSERT_EQ(::mkfifo(Ws("a/fifo").c_str(), 0644), 0);
  auto list = ListBeneath(ws_fd_.get(), 100, 8);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  ASSERT_EQ(list->size(), 5u);
  const std::vector<std::tuple<std::string, uint64_t, bool>> want = {{"a", 0, true},
                                                                     {"a/y", 0, true},
                                                                     {"a/y/x.txt", 0, false},
                                                                     {"a/z.bin", 1000, false},
                                                                     {"b.txt", 5, false}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*list)[i].path, std::get<0>(want[i]));
    EXPECT_EQ((*list)[i].size, std::get<1>(want[i])) << (*list)[i].path;
    EXPECT_EQ((*list)[i].directory, std::get<2>(want[i])) << (*list)[i].path;
  }
  // Depth 0: the top level only; a directory at the limit is still listed.
  auto top = ListBeneath(ws_fd_.get(), 100, 0);
  ASSERT_TRUE(top.ok());
  ASSERT_EQ(top->size(), 2u);
  EXPECT_EQ((*top)[0].path, "a");
  EXPECT_EQ((*top)[1].path, "b.txt");
  // Over max_entries: an error, never a silently short listing. The fifo
  // does not count: 5 entries fit in 5.
  EXPECT_TRUE(ListBeneath(ws_fd_.get(), 5, 8).ok());
  EXPECT_EQ(CodeOf(ListBeneath(ws_fd_.get(), 4, 8)), Code::kResourceExhausted);
  EXPECT_EQ(CodeOf(ListBeneath(ws_fd_.get(), 100, -1)), Code::kInvalidArgument);
}

TEST_F(WorkspaceFilesTest, DeleteFileMissingAndDirectories) {
  ASSERT_TRUE(Write("f.txt", "f").ok());
  ASSERT_TRUE(Write("full/g.txt", "g").ok());
  ASSERT_EQ(::mkdir(Ws("empty").c_str(), 0755), 0);
  ASSERT_TRUE(DeleteBeneath(ws_fd_.get(), "f.txt").ok());
  EXPECT_FALSE(fs::exists(Ws("f.txt")));
  EXPECT_EQ(CodeOf(DeleteBeneath(ws_fd_.get(), "f.txt")), Code::kNotFound);
  EXPECT_EQ(CodeOf(DeleteBeneath(ws_fd_.get(), "nope/f.txt")), Code::kNotFound);
  EXPECT_EQ(CodeOf(DeleteBeneath(ws_fd_.get(), "full")), Code::kFailedPrecondition);
  EXPECT_EQ(Slurp(Ws("full/g.txt")), "g");
  ASSERT_TRUE(DeleteBeneath(ws_fd_.get(), "empty").ok());
  EXPECT_FALSE(fs::exists(Ws("empty")));
  ASSERT_TRUE(DeleteBeneath(ws_fd_.get(), "full/g.txt").ok());
  ASSERT_TRUE(DeleteBeneath(ws_fd_.get(), "full").ok());
  EXPECT_TRUE(fs::is_empty(ws_.path()));
}

// E2B's files.remove of a directory: everything in it goes, links are
// removed, never followed out of the workspace.
TEST_F(WorkspaceFilesTest, DeleteTreeRemovesAFullDirectoryNotWhatLinksPointTo) {
  ASSERT_TRUE(Write("tree/a.txt", "a").ok());
  ASSERT_TRUE(Write("tree/sub/deeper/b.txt", "b").ok());
  Spit(outside_.path() + "/keep.txt", "outside");
  ASSERT_EQ(::symlink(outside_.path().c_str(), Ws("tree/sub/out").c_str()), 0);
  ASSERT_EQ(::symlink((outside_.path() + "/keep.txt").c_str(), Ws("tree/link.txt").c_str()), 0);
  ASSERT_TRUE(DeleteTreeBeneath(ws_fd_.get(), "tree").ok());
  EXPECT_FALSE(fs::exists(Ws("tree")));
  EXPECT_EQ(Slurp(outside_.path() + "/keep.txt"), "outside");
  EXPECT_EQ(CodeOf(DeleteTreeBeneath(ws_fd_.get(), "tree")), Code::kNotFound);
  ASSERT_TRUE(Write("f.txt", "f").ok());
  ASSERT_TRUE(DeleteTreeBeneath(ws_fd_.get(), "f.txt").ok());
  // A symlink on the way is refused, never followed.
  ASSERT_EQ(::symlink(outside_.path().c_str(), Ws("via").c_str()), 0);
  EXPECT_EQ(CodeOf(DeleteTreeBeneath(ws_fd_.get(), "via/keep.txt")), Code::kInvalidArgument);
  EXPECT_TRUE(fs::exists(outside_.path() + "/keep.txt"));
}

TEST_F(WorkspaceFilesTest, MakeDirWithParentsOnceAndNotThroughALink) {
  ASSERT_TRUE(MakeDirBeneath(ws_fd_.get(), "a/b/c", ::getuid(), ::getgid()).ok());
  EXPECT_TRUE(fs::is_directory(Ws("a/b/c")));
  EXPECT_EQ(CodeOf(MakeDirBeneath(ws_fd_.get(), "a/b/c", ::getuid(), ::getgid())),
            Code::kAlreadyExists);
  ASSERT_EQ(::symlink(outside_.path().c_str(), Ws("out").c_str()), 0);
  EXPECT_EQ(CodeOf(MakeDirBeneath(ws_fd_.get(), "out/x", ::getuid(), ::getgid())),
            Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(MakeDirBeneath(ws_fd_.get(), "out", ::getuid(), ::getgid())),
            Code::kAlreadyExists);
  EXPECT_TRUE(fs::is_empty(outside_.path()));
  EXPECT_EQ(CodeOf(MakeDirBeneath(ws_fd_.get(), "../x", ::getuid(), ::getgid())),
            Code::kInvalidArgument);
}

TEST_F(WorkspaceFilesTest, MoveRenamesFilesDirectoriesAndLinksAsLinks) {
  const uid_t u = ::getuid();
  const gid_t g = ::getgid();
  ASSERT_TRUE(Write("a.txt", "a").ok());
  ASSERT_TRUE(MoveBeneath(ws_fd_.get(), "a.txt", "new/dir/b.txt", u, g).ok());
  EXPECT_FALSE(fs::exists(Ws("a.txt")));
  EXPECT_EQ(Slurp(Ws("new/dir/b.txt")), "a");
  ASSERT_TRUE(MoveBeneath(ws_fd_.get(), "new", "renamed", u, g).ok());
  EXPECT_EQ(Slurp(Ws("renamed/dir/b.txt")), "a");
  EXPECT_EQ(CodeOf(MoveBeneath(ws_fd_.get(), "missing", "x", u, g)), Code::kNotFound);
  EXPECT_EQ(CodeOf(MoveBeneath(ws_fd_.get(), "renamed", "renamed/dir/inside", u, g)),
            Code::kFailedPrecondition);
  // A link is moved as a link: what it points to outside stays where it is.
  Spit(outside_.path() + "/keep.txt", "outside");
  ASSERT_EQ(::symlink((outside_.path() + "/keep.txt").c_str(), Ws("link").c_str()), 0);
  ASSERT_TRUE(MoveBeneath(ws_fd_.get(), "link", "moved-link", u, g).ok());
  EXPECT_TRUE(fs::is_symlink(Ws("moved-link")));
  EXPECT_EQ(Slurp(outside_.path() + "/keep.txt"), "outside");
  // Through a link on the way, in either path: refused.
  ASSERT_EQ(::symlink(outside_.path().c_str(), Ws("out").c_str()), 0);
  EXPECT_EQ(CodeOf(MoveBeneath(ws_fd_.get(), "out/keep.txt", "stolen.txt", u, g)),
            Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(MoveBeneath(ws_fd_.get(), "renamed/dir/b.txt", "out/b.txt", u, g)),
            Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(outside_.path() + "/b.txt"));
}

TEST_F(WorkspaceFilesTest, ScopedFsIdsCreatesAsTheSandboxOwnerAndRestores) {
  if (::geteuid() != 0) GTEST_SKIP() << "setfsuid to another id needs root (CAP_SETUID)";
  constexpr uid_t kUid = 65534;
  constexpr gid_t kGid = 65534;
  // The sandbox owner must be able to write in its workspace.
  ASSERT_EQ(::chmod(ws_.path().c_str(), 0777), 0);
  {
    auto ids = ScopedFsIds::Enter(kUid, kGid);
    ASSERT_TRUE(ids.ok()) << ids.error().ToString();
    EXPECT_EQ(::setfsuid(static_cast<uid_t>(-1)), static_cast<int>(kUid));
    EXPECT_EQ(::setfsgid(static_cast<gid_t>(-1)), static_cast<int>(kGid));
    // Plain creation now carries the sandbox's ids, as a userns tmpfs needs.
    ASSERT_EQ(::mkdirat(ws_fd_.get(), "made", 0755), 0);
    ASSERT_TRUE(WriteFileBeneath(ws_fd_.get(), "sub/f.txt", "x", kRoomy, kUid, kGid).ok());
    // The file capabilities went with fsuid 0: the owner's access only.
    UniqueFd outside(::open(outside_.path().c_str(), O_PATH | O_CLOEXEC));
    ASSERT_TRUE(outside.valid());
    EXPECT_EQ(::mkdirat(outside.get(), "no", 0755), -1);
    EXPECT_EQ(errno, EACCES);
  }
  EXPECT_EQ(::setfsuid(static_cast<uid_t>(-1)), 0);
  EXPECT_EQ(::setfsgid(static_cast<gid_t>(-1)), 0);
  for (const std::string p : {"made", "sub", "sub/f.txt"}) {
    struct stat st {};
    ASSERT_EQ(::stat(Ws(p).c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, kUid) << p;
    EXPECT_EQ(st.st_gid, kGid) << p;
  }
}

}  // namespace
}  // namespace kiln::supervisor
