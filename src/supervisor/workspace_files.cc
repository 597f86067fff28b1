#include "supervisor/workspace_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "base/cleanup.h"
#include "base/unique_fd.h"
#include "policy/policy.h"
#include "sys/syscalls.h"

namespace kiln::supervisor {
namespace {

constexpr size_t kMaxComponent = 255;
constexpr size_t kMaxPath = 4096;  // exclusive, PATH_MAX with its NUL
constexpr int kMaxDepth = 16;      // policy::IsSafeRelativePath's
// Bounds of the accounting walk before a write (see the header).
constexpr size_t kAccountingMaxEntries = 1000000;
constexpr int kAccountingMaxDepth = 64;
constexpr char kTempPrefix[] = ".kiln-put-";

// openat2 with the workspace confinement. O_NOFOLLOW matters for the last
// component only when O_PATH is set: RESOLVE_NO_SYMLINKS then returns an
// O_PATH fd of the symlink itself (openat2(2)), which the callers fstat and
// refuse; without O_PATH a trailing symlink is ELOOP.
int OpenConfined(int dirfd, const char* path, int flags, mode_t mode = 0) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  // openat2 rejects a mode without O_CREAT/O_TMPFILE (EINVAL).
  how.mode = (flags & O_CREAT) != 0 ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return sys::Openat2(dirfd, path, &how);
}

std::string Quote(const std::string& path) { return "'" + path + "'"; }

// ErrnoError with the codes the header promises for filesystem failures.
Error FsError(std::string what, int err) {
  switch (err) {
    case ELOOP:
      return Error{Code::kInvalidArgument, err, SetupStep::kNone,
                   what + " (a symlink in the workspace; the host never follows one)"};
    case EXDEV:
      return Error{Code::kInvalidArgument, err, SetupStep::kNone,
                   what + " (the path leaves the workspace filesystem)"};
    case ENOTDIR: return Error{Code::kFailedPrecondition, err, SetupStep::kNone, std::move(what)};
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return Error{Code::kResourceExhausted, err, SetupStep::kNone, std::move(what)};
    case EOVERFLOW:
      return Error{Code::kFailedPrecondition, err, SetupStep::kNone,
                   what +
                       " (the caller's fsuid/fsgid is not mapped in the workspace's user "
                       "namespace; hold ScopedFsIds with the sandbox's outer ids)"};
    default: return ErrnoError(std::move(what), err);
  }
}

std::vector<std::string> SplitPath(const std::string& clean) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = clean.find('/', start);
    if (end == std::string::npos) {
      parts.push_back(clean.substr(start));
      return parts;
    }
    parts.push_back(clean.substr(start, end - start));
    start = end + 1;
  }
}

struct Owner {
  uid_t uid;
  gid_t gid;
};

// The directory holding the last of `parts`, walked one component at a time;
// each opened inode is checked, never its name. With `create`, a missing
// directory is made and given to `create`'s ids.
Result<UniqueFd> OpenParentDir(int workspace_fd, const std::vector<std::string>& parts,
                               const Owner* create) {
  UniqueFd cur(::fcntl(workspace_fd, F_DUPFD_CLOEXEC, 0));
  if (!cur) return ErrnoError("dup the workspace fd");
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& name = parts[i];
    walked += walked.empty() ? name : "/" + name;
    UniqueFd next(OpenConfined(cur.get(), name.c_str(), O_PATH));
    bool created = false;
    if (!next && errno == ENOENT && create != nullptr) {
      if (::mkdirat(cur.get(), name.c_str(), 0755) == 0) {
        created = true;
      } else if (errno != EEXIST) {  // EEXIST: the sandbox made it meanwhile
        return FsError("mkdir " + Quote(walked) + " in the workspace", errno);
      }
      next.Reset(OpenConfined(cur.get(), name.c_str(), O_PATH));
    }
    if (!next) {
      if (errno == ENOENT) {
        return Error{Code::kNotFound, ENOENT, SetupStep::kNone,
                     Quote(walked) + " does not exist in the workspace"};
      }
      return FsError("open " + Quote(walked) + " in the workspace", errno);
    }
    struct stat st {};
    if (::fstat(next.get(), &st) != 0) return ErrnoError("fstat " + Quote(walked));
    if (S_ISLNK(st.st_mode)) {
      return InvalidArgument(Quote(walked) +
                             " is a symlink; the host never follows links in the workspace");
    }
    if (!S_ISDIR(st.st_mode)) return FailedPrecondition(Quote(walked) + " is not a directory");
    // The fd, not the name: whatever the sandbox renamed meanwhile, this is
    // the directory just checked. fchownat(AT_EMPTY_PATH) works on O_PATH fds.
    if (created && ::fchownat(next.get(), "", create->uid, create->gid, AT_EMPTY_PATH) != 0) {
      return FsError("chown new directory " + Quote(walked), errno);
    }
    cur = std::move(next);
  }
  return cur;
}

// Size of the regular file `name` in `dir` that a write would replace, 0 when
// absent; refuses what a write must not replace.
Result<uint64_t> ReplacedSize(int dir, const std::string& name, const std::string& shown) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return uint64_t{0};
    return FsError("stat " + Quote(shown), errno);
  }
  if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_size);
  if (S_ISDIR(st.st_mode)) return FailedPrecondition(Quote(shown) + " is a directory");
  if (S_ISLNK(st.st_mode)) {
    return InvalidArgument(
        Quote(shown) + " is a symlink; the host never follows or replaces it (delete it first)");
  }
  return InvalidArgument(Quote(shown) + " is a special file, not a regular file");
}

struct WalkOptions {
  size_t max_entries;
  int max_depth;
  bool deeper_is_error;  // accounting must see everything; a listing may stop
};
using Visitor = std::function<void(const std::string& rel, const struct stat& st)>;

// Visits the regular files and directories beneath `dir`. Names are used one
// at a time in a confined fd; what vanishes or changes type meanwhile is
// skipped (the sandbox runs concurrently).
Status WalkTree(int dir, const std::string& prefix, int depth, const WalkOptions& options,
                size_t* seen, const Visitor& visit) {
  UniqueFd listing(OpenConfined(dir, ".", O_RDONLY | O_DIRECTORY));
  if (!listing) return FsError("open workspace directory " + Quote(prefix), errno);
  DIR* stream = ::fdopendir(listing.get());
  if (stream == nullptr) return ErrnoError("fdopendir");
  (void)listing.Release();  // closedir closes it
  // One pass: stat while reading, so that only counted entries are held
  // (symlinks and special files are neither kept nor counted).
  std::vector<std::pair<std::string, struct stat>> found;
  Status status = OkStatus();
  while (dirent* e = ::readdir(stream)) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || !policy::IsSafeFileName(name)) continue;
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed since readdir
      status = ErrnoError("stat a workspace entry");
      break;
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) continue;  // symlink, fifo, socket, device
    if (++*seen > options.max_entries) {
      status = MakeError(Code::kResourceExhausted, "the workspace holds more than " +
                                                       std::to_string(options.max_entries) +
                                                       " files and directories");
      break;
    }
    found.emplace_back(std::move(name), st);
  }
  ::closedir(stream);
  KILN_TRY(status);
  for (const auto& [name, st] : found) {
    const std::string rel = prefix.empty() ? name : prefix + "/" + name;
    visit(rel, st);
    if (!S_ISDIR(st.st_mode)) continue;
    if (depth >= options.max_depth) {
      if (options.deeper_is_error) {
        return MakeError(Code::kResourceExhausted, "the workspace nests directories deeper than " +
                                                       std::to_string(options.max_depth));
      }
      continue;
    }
    UniqueFd sub(OpenConfined(dir, name.c_str(), O_PATH | O_DIRECTORY));
    if (!sub) continue;  // replaced by a symlink or removed since the fstatat
    KILN_TRY(WalkTree(sub.get(), rel, depth + 1, options, seen, visit));
  }
  return OkStatus();
}

Result<uint64_t> WorkspaceTotal(int workspace_fd) {
  uint64_t total = 0;
  size_t seen = 0;
  KILN_TRY(WalkTree(workspace_fd, "", 0, {kAccountingMaxEntries, kAccountingMaxDepth, true}, &seen,
                    [&](const std::string&, const struct stat& st) {
                      if (S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_size);
                    }));
  return total;
}

Result<std::string> TempName() {
  unsigned char random[8];
  if (::getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    return ErrnoError("getrandom for a temporary file name");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = kTempPrefix;
  for (unsigned char b : random) {
    name += kHex[b >> 4];
    name += kHex[b & 0xf];
  }
  return name;
}

}  // namespace

Result<std::string> NormalizeWorkspacePath(std::string_view raw) {
  if (raw.empty()) return InvalidArgument("workspace path is empty");
  if (raw.find('\0') != std::string_view::npos) {
    return InvalidArgument("workspace path contains a NUL byte");
  }
  if (raw.front() == '/') {
    return InvalidArgument("workspace path is absolute; it must be relative to the workspace");
  }
  if (raw.size() >= kMaxPath) {
    return InvalidArgument("workspace path is " + std::to_string(raw.size()) +
                           " bytes; the limit is " + std::to_string(kMaxPath - 1));
  }
  size_t start = 0;
  int depth = 0;
  for (;;) {
    size_t end = raw.find('/', start);
    if (end == std::string_view::npos) end = raw.size();
    const std::string_view part = raw.substr(start, end - start);
    if (part.empty()) {
      return InvalidArgument("workspace path has an empty component (\"//\" or a trailing '/')");
    }
    if (part == "..") return InvalidArgument("workspace path has a '..' component");
    if (part == ".") return InvalidArgument("workspace path has a '.' component");
    if (part.size() > kMaxComponent) {
      return InvalidArgument("workspace path has a component of " + std::to_string(part.size()) +
                             " bytes; the limit is " + std::to_string(kMaxComponent));
    }
    if (++depth > kMaxDepth) {
      return InvalidArgument("workspace path is more than " + std::to_string(kMaxDepth) +
                             " components deep");
    }
    if (end == raw.size()) break;
    start = end + 1;
  }
  std::string path(raw);
  // The checks above spell out IsSafeRelativePath with reasons; this keeps
  // the two from drifting apart silently.
  if (!policy::IsSafeRelativePath(path)) return InvalidArgument("workspace path is not safe");
  return path;
}

Result<ScopedFsIds> ScopedFsIds::Enter(uid_t uid, gid_t gid) {
  // setfsuid/setfsgid return the previous id whether or not they changed it;
  // an invalid id (-1) changes nothing and reads the current one back.
  const auto previous_gid = static_cast<gid_t>(::setfsgid(gid));
  if (static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != gid) {
    ::setfsgid(previous_gid);
    return Error{Code::kPermissionDenied, EPERM, SetupStep::kNone,
                 "setfsgid(" + std::to_string(gid) + ") was refused"};
  }
  const auto previous_uid = static_cast<uid_t>(::setfsuid(uid));
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != uid) {
    ::setfsuid(previous_uid);
    ::setfsgid(previous_gid);
    return Error{Code::kPermissionDenied, EPERM, SetupStep::kNone,
                 "setfsuid(" + std::to_string(uid) + ") was refused"};
  }
  return ScopedFsIds(previous_uid, previous_gid);
}

ScopedFsIds::ScopedFsIds(ScopedFsIds&& other) noexcept
    : previous_uid_(other.previous_uid_),
      previous_gid_(other.previous_gid_),
      active_(std::exchange(other.active_, false)) {}

ScopedFsIds::~ScopedFsIds() {
  if (!active_) return;
  // fsuid first: leaving a non-zero fsuid is what dropped the file
  // capabilities; CAP_SETUID/CAP_SETGID were never dropped, so both succeed.
  ::setfsuid(previous_uid_);
  ::setfsgid(previous_gid_);
}

namespace {

// `size` bytes of `in` from offset 0 to `out`'s position: sendfile, so that
// they go file to file in the kernel (a memfd or a tmpfs file supports it);
// read and write where it does not. The source ending early is an error.
Status CopyFd(int in, uint64_t size, int out, const std::string& what) {
  off_t offset = 0;
  bool use_sendfile = true;
  std::string buffer;
  while (static_cast<uint64_t>(offset) < size) {
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(size - static_cast<uint64_t>(offset), uint64_t{1} << 30));
    ssize_t n;
    if (use_sendfile) {
      n = ::sendfile(out, in, &offset, want);
      if (n < 0 && (errno == EINVAL || errno == ENOSYS) && offset == 0) {
        use_sendfile = false;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return FsError("write " + what + " in the workspace", errno);
    } else {
      if (buffer.empty()) buffer.resize(1u << 16);
      n = ::pread(in, buffer.data(), std::min(want, buffer.size()), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read the bytes of " + what);
      if (n > 0 && sys::WriteAll(out, buffer.data(), static_cast<size_t>(n)) != 0) {
        return FsError("write " + what + " in the workspace", errno);
      }
      offset += n;
    }
    if (n == 0) {
      return Internal("the bytes of " + what + " end at " + std::to_string(offset) + " of " +
                      std::to_string(size));
    }
  }
  return OkStatus();
}

// What WriteFileBeneath writes: `bytes`, or `size` bytes of `fd` when fd >= 0.
struct FileSource {
  int fd = -1;
  uint64_t size = 0;
  std::string_view bytes;
};
Status WriteSourceBeneath(int workspace_fd, const std::string& path, const FileSource& source,
                          const WorkspaceCaps& caps, uid_t owner, gid_t group);

}  // namespace

Status WriteFileBeneath(int workspace_fd, const std::string& path, std::string_view bytes,
                        const WorkspaceCaps& caps, uid_t owner, gid_t group) {
  return WriteSourceBeneath(workspace_fd, path, FileSource{-1, bytes.size(), bytes}, caps, owner,
                            group);
}

Status WriteFileBeneath(int workspace_fd, const std::string& path, int source_fd, uint64_t size,
                        const WorkspaceCaps& caps, uid_t owner, gid_t group) {
  if (source_fd < 0) return InvalidArgument("write a file: no source fd");
  return WriteSourceBeneath(workspace_fd, path, FileSource{source_fd, size, {}}, caps, owner,
                            group);
}

namespace {

Status WriteSourceBeneath(int workspace_fd, const std::string& path, const FileSource& source,
                          const WorkspaceCaps& caps, uid_t owner, gid_t group) {
  KILN_ASSIGN_OR_RETURN(const std::string clean, NormalizeWorkspacePath(path));
  const uint64_t size = source.size;
  if (size > caps.max_file_bytes) {
    return MakeError(Code::kResourceExhausted, Quote(clean) + ": " + std::to_string(size) +
                                                   " bytes is over the per-file cap of " +
                                                   std::to_string(caps.max_file_bytes));
  }
  const std::vector<std::string> parts = SplitPath(clean);
  const std::string& name = parts.back();

  // Check first, create later: a refused write leaves no directory behind.
  uint64_t replaced = 0;
  {
    auto parent = OpenParentDir(workspace_fd, parts, nullptr);
    if (parent.ok()) {
      KILN_ASSIGN_OR_RETURN(replaced, ReplacedSize(parent->get(), name, clean));
    } else if (parent.error().code != Code::kNotFound) {
      return std::move(parent).error();
    }
  }
  KILN_ASSIGN_OR_RETURN(const uint64_t total, WorkspaceTotal(workspace_fd));
  const uint64_t others = total - std::min(total, replaced);
  if (size > caps.max_workspace_bytes || others > caps.max_workspace_bytes - size) {
    return MakeError(Code::kResourceExhausted,
                     Quote(clean) + ": the workspace would hold " + std::to_string(others + size) +
                         " bytes, over its cap of " + std::to_string(caps.max_workspace_bytes));
  }

  const Owner ids{owner, group};
  KILN_ASSIGN_OR_RETURN(UniqueFd parent, OpenParentDir(workspace_fd, parts, &ids));
  std::string temp;
  UniqueFd out;
  for (int attempt = 0; attempt < 4 && !out; ++attempt) {
    KILN_ASSIGN_OR_RETURN(temp, TempName());
    out.Reset(OpenConfined(parent.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644));
    if (!out && errno != EEXIST) break;
  }
  if (!out) return FsError("create a temporary file next to " + Quote(clean), errno);
  Cleanup remove_temp([&] { ::unlinkat(parent.get(), temp.c_str(), 0); });
  if (source.fd >= 0) {
    KILN_TRY(CopyFd(source.fd, size, out.get(), Quote(clean)));
  } else if (sys::WriteAll(out.get(), source.bytes.data(), source.bytes.size()) != 0) {
    return FsError("write " + Quote(clean) + " in the workspace", errno);
  }
  if (::fchown(out.get(), owner, group) != 0) {
    return FsError("chown " + Quote(clean) + " to the sandbox's ids", errno);
  }
  // The umask must not decide what the sandbox's program may do with it.
  if (::fchmod(out.get(), 0644) != 0) return FsError("chmod " + Quote(clean), errno);
  out.Reset();
  // Again, right before the rename: the sandbox may have put a directory or a
  // symlink there since. (A symlink made after this check is replaced by the
  // rename, never followed: rename works on the name.)
  KILN_TRY(ReplacedSize(parent.get(), name, clean));
  if (::renameat(parent.get(), temp.c_str(), parent.get(), name.c_str()) != 0) {
    if (errno == EISDIR) return FailedPrecondition(Quote(clean) + " is a directory");
    return FsError("rename the temporary file to " + Quote(clean), errno);
  }
  remove_temp.Release();
  return OkStatus();
}

}  // namespace

Result<std::string> ReadFileBeneath(int workspace_fd, const std::string& path, uint64_t max_bytes) {
  KILN_ASSIGN_OR_RETURN(const std::string clean, NormalizeWorkspacePath(path));
  const std::vector<std::string> parts = SplitPath(clean);
  KILN_ASSIGN_OR_RETURN(UniqueFd parent, OpenParentDir(workspace_fd, parts, nullptr));
  // O_NONBLOCK: opening a fifo for reading must not wait for a writer.
  UniqueFd in(OpenConfined(parent.get(), parts.back().c_str(), O_RDONLY | O_NONBLOCK));
  if (!in) {
    if (errno == ENOENT) {
      return Error{Code::kNotFound, ENOENT, SetupStep::kNone,
                   Quote(clean) + " does not exist in the workspace"};
    }
    if (errno == ELOOP) {
      return Error{Code::kInvalidArgument, ELOOP, SetupStep::kNone,
                   Quote(clean) + " is a symlink; the host never follows links in the workspace"};
    }
    return FsError("open " + Quote(clean) + " in the workspace", errno);
  }
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) return ErrnoError("fstat " + Quote(clean));
  if (S_ISDIR(st.st_mode)) return InvalidArgument(Quote(clean) + " is a directory");
  if (!S_ISREG(st.st_mode)) return InvalidArgument(Quote(clean) + " is not a regular file");
  const auto over = [&] {
    return MakeError(Code::kResourceExhausted,
                     Quote(clean) + " is larger than " + std::to_string(max_bytes) + " bytes");
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return over();
  std::string content;
  content.reserve(static_cast<size_t>(st.st_size));
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(in.get(), chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FsError("read " + Quote(clean) + " from the workspace", errno);
    }
    if (n == 0) break;
    // The sandbox may be growing the file: st_size alone is not a bound.
    if (content.size() + static_cast<uint64_t>(n) > max_bytes) return over();
    content.append(chunk, static_cast<size_t>(n));
  }
  return content;
}

Result<std::vector<WorkspaceEntry>> ListBeneath(int workspace_fd, size_t max_entries,
                                                int max_depth) {
  if (max_depth < 0) return InvalidArgument("max_depth must not be negative");
  std::vector<WorkspaceEntry> entries;
  size_t seen = 0;
  KILN_TRY(WalkTree(workspace_fd, "", 0, {max_entries, max_depth, false}, &seen,
                    [&](const std::string& rel, const struct stat& st) {
                      const bool dir = S_ISDIR(st.st_mode);
                      entries.push_back({rel, dir ? 0 : static_cast<uint64_t>(st.st_size), dir});
                    }));
  std::sort(entries.begin(), entries.end(),
            [](const WorkspaceEntry& a, const WorkspaceEntry& b) { return a.path < b.path; });
  return entries;
}

Status DeleteBeneath(int workspace_fd, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(const std::string clean, NormalizeWorkspacePath(path));
  const std::vector<std::string> parts = SplitPath(clean);
  KILN_ASSIGN_OR_RETURN(UniqueFd parent, OpenParentDir(workspace_fd, parts, nullptr));
  const char* name = parts.back().c_str();
  // unlinkat removes the name only; it never follows or opens a symlink.
  if (::unlinkat(parent.get(), name, 0) == 0) return OkStatus();
  int err = errno;
  if (err == EISDIR) {  // Linux's unlink(2) answer for a directory
    if (::unlinkat(parent.get(), name, AT_REMOVEDIR) == 0) return OkStatus();
    err = errno;
    if (err == ENOTEMPTY || err == EEXIST) {
      return Error{Code::kFailedPrecondition, err, SetupStep::kNone,
                   Quote(clean) + " is a directory that is not empty"};
    }
  }
  if (err == ENOENT) {
    return Error{Code::kNotFound, ENOENT, SetupStep::kNone,
                 Quote(clean) + " does not exist in the workspace"};
  }
  return FsError("delete " + Quote(clean) + " in the workspace", err);
}

namespace {

// Empties the directory open as `dir` (every name in it: files, symlinks,
// special files and directories, recursively), in confined fds, never
// following a link. `budget` counts the names removed.
Status EmptyDir(int dir, const std::string& rel, int depth, size_t* budget) {
  if (depth > kAccountingMaxDepth) {
    return MakeError(Code::kResourceExhausted, Quote(rel) + ": directories nested over " +
                                                   std::to_string(kAccountingMaxDepth) + " deep");
  }
  for (;;) {  // until a pass finds nothing (the sandbox may add names meanwhile)
    UniqueFd listing(OpenConfined(dir, ".", O_RDONLY | O_DIRECTORY));
    if (!listing) return FsError("open " + Quote(rel), errno);
    DIR* stream = ::fdopendir(listing.get());
    if (stream == nullptr) return ErrnoError("fdopendir");
    (void)listing.Release();
    std::vector<std::string> names;
    while (dirent* e = ::readdir(stream)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(stream);
    if (names.empty()) return OkStatus();
    for (const auto& name : names) {
      if (*budget == 0)
        return MakeError(Code::kResourceExhausted, Quote(rel) + ": too many entries");
      --*budget;
      const std::string child = rel + "/" + name;
      if (::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) continue;
      if (errno != EISDIR) return FsError("delete " + Quote(child), errno);
      UniqueFd sub(OpenConfined(dir, name.c_str(), O_PATH | O_DIRECTORY));
      if (!sub) {
        if (errno == ENOENT) continue;
        return FsError("open " + Quote(child), errno);
      }
      KILN_TRY(EmptyDir(sub.get(), child, depth + 1, budget));
      if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        return FsError("delete " + Quote(child), errno);
    }
  }
}

}  // namespace

Status DeleteTreeBeneath(int workspace_fd, const std::string& path) {
  Status first = DeleteBeneath(workspace_fd, path);
  if (first.ok() || first.error().code != Code::kFailedPrecondition) return first;
  KILN_ASSIGN_OR_RETURN(const std::string clean, NormalizeWorkspacePath(path));
  const std::vector<std::string> parts = SplitPath(clean);
  KILN_ASSIGN_OR_RETURN(UniqueFd parent, OpenParentDir(workspace_fd, parts, nullptr));
  UniqueFd dir(OpenConfined(parent.get(), parts.back().c_str(), O_PATH | O_DIRECTORY));
  if (!dir) return FsError("open " + Quote(clean), errno);
  size_t budget = kAccountingMaxEntries;
  KILN_TRY(EmptyDir(dir.get(), clean, 1, &budget));
  if (::unlinkat(parent.get(), parts.back().c_str(), AT_REMOVEDIR) != 0)
    return FsError("delete " + Quote(clean), errno);
  return OkStatus();
}

Status MakeDirBeneath(int workspace_fd, const std::string& path, uid_t owner, gid_t group) {
  KILN_ASSIGN_OR_RETURN(const std::string clean, NormalizeWorkspacePath(path));
  const std::vector<std::string> parts = SplitPath(clean);
  const Owner ids{owner, group};
  KILN_ASSIGN_OR_RETURN(UniqueFd parent, OpenParentDir(workspace_fd, parts, &ids));
  const char* name = parts.back().c_str();
  if (::mkdirat(parent.get(), name, 0755) != 0) {
    if (errno == EEXIST) {
      return Error{Code::kAlreadyExists, EEXIST, SetupStep::kNone,
                   Quote(clean) + " already exists in the workspace"};
    }
    return FsError("mkdir " + Quote(clean) + " in the workspace", errno);
  }
  UniqueFd made(OpenConfined(parent.get(), name, O_PATH | O_DIRECTORY));
  if (!made) return FsError("open the new directory " + Quote(clean), errno);
  if (::fchownat(made.get(), "", owner, group, AT_EMPTY_PATH) != 0)
    return FsError("chown new directory " + Quote(clean), errno);
  return OkStatus();
}

Status MoveBeneath(int workspace_fd, const std::string& from, const std::string& to, uid_t owner,
                   gid_t group) {
  KILN_ASSIGN_OR_RETURN(const std::string src, NormalizeWorkspacePath(from));
  KILN_ASSIGN_OR_RETURN(const std::string dst, NormalizeWorkspacePath(to));
  const std::vector<std::string> src_parts = SplitPath(src);
  const std::vector<std::string> dst_parts = SplitPath(dst);
  KILN_ASSIGN_OR_RETURN(UniqueFd src_parent, OpenParentDir(workspace_fd, src_parts, nullptr));
  const Owner ids{owner, group};
  KILN_ASSIGN_OR_RETURN(UniqueFd dst_parent, OpenParentDir(workspace_fd, dst_parts, &ids));
  // renameat moves the name: a symlink is moved as a link, never followed.
  if (::renameat(src_parent.get(), src_parts.back().c_str(), dst_parent.get(),
                 dst_parts.back().c_str()) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return Error{Code::kNotFound, ENOENT, SetupStep::kNone,
                   Quote(src) + " does not exist in the workspace"};
    }
    if (err == ENOTEMPTY || err == EEXIST || err == EISDIR || err == ENOTDIR || err == EINVAL) {
      return Error{Code::kFailedPrecondition, err, SetupStep::kNone,
                   "cannot move " + Quote(src) + " to " + Quote(dst) + ": " + std::strerror(err)};
    }
    return FsError("move " + Quote(src) + " to " + Quote(dst), err);
  }
  return OkStatus();
}

}  // namespace kiln::supervisor
