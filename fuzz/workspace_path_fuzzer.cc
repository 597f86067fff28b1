// Workspace file paths of the files API (PUT/GET/DELETE
// /v1/sessions/{id}/files/{path}): the URL path is percent-decoded
// (server::PercentDecode), checked by supervisor::NormalizeWorkspacePath, and
// only then used, one component at a time, beneath the workspace's fd
// (supervisor::ReadFileBeneath and the others, src/supervisor/workspace_files.h).
//
// Input: the path as it appears in the URL. Checked: decoding refuses only a
// malformed escape or an encoded NUL and changes nothing without a '%';
// NormalizeWorkspacePath accepts exactly what policy::IsSafeRelativePath
// accepts (the spelled-out checks and the policy's rule must not drift
// apart), returning the path unchanged; and reading an accepted path in a
// workspace full of symlinks that lead out (relative, absolute, through a
// directory) never yields the bytes of the file outside.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "policy/policy.h"
#include "server/request.h"
#include "supervisor/workspace_files.h"

namespace {

constexpr const char* kSecret = "the host's secret, outside the workspace";

// A workspace and, beside it, what it must never reach; removed at exit.
class Fixture final {
 public:
  Fixture() {
    char dir[] = "/tmp/kiln-fuzz-workspace-XXXXXX";
    FUZZ_CHECK(::mkdtemp(dir) != nullptr);
    root_ = dir;
    const std::filesystem::path out = root_ / "outside", ws = root_ / "ws";
    std::filesystem::create_directories(out);
    std::filesystem::create_directories(ws / "dir" / "sub");
    Write(out / "secret", kSecret);
    Write(ws / "a.txt", "inside a");
    Write(ws / "dir" / "b.txt", "inside b");
    Write(ws / "dir" / "sub" / "c", "inside c");
    std::filesystem::create_symlink("../outside/secret", ws / "rel");
    std::filesystem::create_symlink(out / "secret", ws / "abs");
    std::filesystem::create_symlink("../outside", ws / "outdir");
    std::filesystem::create_symlink("..", ws / "dir" / "up");
    std::filesystem::create_symlink("../../outside/secret", ws / "dir" / "sub" / "deep");
    // A procfs magic link through our own root to the outside file.
    const std::filesystem::path own_root = std::filesystem::path("/proc/self") / "root";
    std::filesystem::create_symlink(own_root / out.relative_path() / "secret", ws / "magic");
    FUZZ_CHECK(::mkfifo((ws / "fifo").c_str(), 0600) == 0);
    fd_ = ::open(ws.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    FUZZ_CHECK(fd_ >= 0);
  }
  ~Fixture() {
    ::close(fd_);
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  int fd() const { return fd_; }

 private:
  static void Write(const std::filesystem::path& p, const char* text) { std::ofstream(p) << text; }
  std::filesystem::path root_;
  int fd_ = -1;
};

Fixture& Workspace() {
  static Fixture fixture;  // destroyed at exit: the temporary tree goes
  return fixture;
}

void CheckPath(const std::string& path) {
  auto norm = kiln::supervisor::NormalizeWorkspacePath(path);
  FUZZ_CHECK(norm.ok() == kiln::policy::IsSafeRelativePath(path));
  if (!norm.ok()) {
    FUZZ_CHECK(norm.error().code == kiln::Code::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(*norm == path);
  auto bytes = kiln::supervisor::ReadFileBeneath(Workspace().fd(), *norm, 1 << 20);
  if (bytes.ok()) {
    FUZZ_CHECK(bytes->find("inside") == 0);
    FUZZ_CHECK(bytes->find("secret") == std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  const std::string_view raw = input.text();
  const auto decoded = kiln::server::PercentDecode(raw);
  if (raw.find('%') == std::string_view::npos) {
    FUZZ_CHECK(decoded && *decoded == raw);
  }
  if (decoded) {
    FUZZ_CHECK(decoded->size() <= raw.size());
    CheckPath(*decoded);
  }
  CheckPath(std::string(raw));
  return 0;
}
