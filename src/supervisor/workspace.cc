#include "supervisor/workspace.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "policy/policy.h"
#include "sys/syscalls.h"

namespace kiln::supervisor {

int OpenBeneath(int dirfd, const char* path, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return sys::Openat2(dirfd, path, &how);
}

namespace {

struct Walk {
  const CollectLimits& limits;
  CollectReport report;
  uint64_t total = 0;
  std::vector<FileContent>* memory = nullptr;  // set: collect into memory, not a directory
  const std::vector<std::string>* globs = nullptr;
  uint64_t visited = 0;       // directory entries read
  bool entries_over = false;  // stopped reading at max_entries
  uint64_t skipped_bytes = 0;
  uint64_t skipped_more = 0;  // skipped records not kept

  void Skip(std::string why) {
    if (report.skipped.size() < limits.max_skipped &&
        skipped_bytes + why.size() <= limits.max_skipped_bytes) {
      skipped_bytes += why.size();
      report.skipped.push_back(std::move(why));
    } else {
      ++skipped_more;
    }
  }
  // The summary lines, once the walk is over.
  void Close() {
    if (entries_over) {
      report.skipped.push_back("the workspace has more than " + std::to_string(limits.max_entries) +
                               " entries: the rest were not looked at");
    }
    if (skipped_more > 0) report.skipped.push_back(std::to_string(skipped_more) + " more skipped");
  }
};

bool Matches(const std::vector<std::string>* globs, const std::string& rel) {
  if (globs == nullptr || globs->empty()) return true;
  const std::string base = rel.substr(rel.find_last_of('/') + 1);
  for (const auto& g : *globs) {
    if (::fnmatch(g.c_str(), rel.c_str(), 0) == 0 || ::fnmatch(g.c_str(), base.c_str(), 0) == 0) {
      return true;
    }
  }
  return false;
}

Status CopyFile(int src_dir, int dst_dir, const std::string& name, const std::string& rel,
                Walk* w) {
  UniqueFd in(OpenBeneath(src_dir, name.c_str(), O_RDONLY | O_NONBLOCK));
  if (!in) {
    w->Skip(rel + ": " + std::strerror(errno));
    return OkStatus();
  }
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) return ErrnoError("fstat " + rel);
  if (!S_ISREG(st.st_mode)) {
    w->Skip(rel + ": not a regular file");
    return OkStatus();
  }
  if (!Matches(w->globs, rel)) return OkStatus();
  if (w->report.files.size() >= w->limits.max_files ||
      w->total + static_cast<uint64_t>(st.st_size) > w->limits.max_total_bytes) {
    w->Skip(rel + ": over the collection limits");
    return OkStatus();
  }
  if (w->memory != nullptr) {
    std::string content;
    char chunk[65536];
    for (;;) {
      ssize_t n = ::read(in.get(), chunk, sizeof chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("read " + rel + " from the workspace");
      }
      if (n == 0) break;
      if (w->total + content.size() + static_cast<uint64_t>(n) > w->limits.max_total_bytes) {
        w->Skip(rel + ": over the collection limits");
        return OkStatus();
      }
      content.append(chunk, static_cast<size_t>(n));
    }
    w->total += content.size();
    w->report.files.push_back({rel, content.size()});
    w->memory->push_back({rel, std::move(content)});
    return OkStatus();
  }
  UniqueFd out(
      ::openat(dst_dir, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!out) {
    // E.g. a symlink of the same name already in the destination (O_NOFOLLOW).
    w->Skip(rel + ": cannot create in the collect directory: " + std::strerror(errno));
    return OkStatus();
  }
  char buf[65536];
  uint64_t copied = 0;
  for (;;) {
    ssize_t n = ::read(in.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read " + rel + " from the workspace");
    }
    if (n == 0) break;
    // The sandbox is dead when we collect, but never trust st_size alone.
    if (w->total + copied + static_cast<uint64_t>(n) > w->limits.max_total_bytes) {
      return MakeError(Code::kResourceExhausted, rel + ": grew past the collection limit");
    }
    if (sys::WriteAll(out.get(), buf, static_cast<size_t>(n)) != 0) {
      return ErrnoError("write " + rel + " in the collect directory");
    }
    copied += static_cast<uint64_t>(n);
  }
  w->total += copied;
  w->report.files.push_back({rel, copied});
  return OkStatus();
}

Status WalkDir(int src_dir, int dst_dir, const std::string& prefix, int depth, Walk* w,
               const std::vector<std::string>* only) {
  UniqueFd listing(OpenBeneath(src_dir, ".", O_RDONLY | O_DIRECTORY));
  if (!listing) return ErrnoError("open workspace directory '" + prefix + "'");
  DIR* dir = ::fdopendir(listing.Release());
  if (dir == nullptr) return ErrnoError("fdopendir");
  std::vector<std::pair<std::string, unsigned char>> entries;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (++w->visited > w->limits.max_entries) {
      w->entries_over = true;
      break;
    }
    entries.emplace_back(std::move(name), e->d_type);
  }
  ::closedir(dir);
  for (const auto& [name, type] : entries) {
    const std::string rel = prefix.empty() ? name : prefix + "/" + name;
    if (!policy::IsSafeFileName(name)) {
      w->Skip(rel + ": unsafe name");
      continue;
    }
    if (only != nullptr && !only->empty()) {
      bool wanted = false;
      for (const auto& o : *only) wanted = wanted || o == name;
      if (!wanted) continue;
    }
    if (type == DT_DIR) {
      if (depth >= w->limits.max_depth) {
        w->Skip(rel + ": deeper than " + std::to_string(w->limits.max_depth));
        continue;
      }
      UniqueFd sub(OpenBeneath(src_dir, name.c_str(), O_PATH | O_DIRECTORY));
      if (!sub) {
        w->Skip(rel + ": " + std::strerror(errno));
        continue;
      }
      if (w->memory != nullptr) {
        KILN_TRY(WalkDir(sub.get(), -1, rel, depth + 1, w, nullptr));
        continue;
      }
      if (::mkdirat(dst_dir, name.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoError("mkdir " + rel + " in the collect directory");
      }
      UniqueFd dsub(
          ::openat(dst_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dsub) return ErrnoError("open " + rel + " in the collect directory");
      KILN_TRY(WalkDir(sub.get(), dsub.get(), rel, depth + 1, w, nullptr));
    } else if (type == DT_REG || type == DT_UNKNOWN) {
      KILN_TRY(CopyFile(src_dir, dst_dir, name, rel, w));
    } else {
      w->Skip(rel + (type == DT_LNK ? ": symlink, not followed" : ": special file"));
    }
  }
  return OkStatus();
}

}  // namespace

Result<CollectReport> CollectWorkspace(int workspace_fd, const std::string& dest_dir,
                                       const CollectLimits& limits,
                                       const std::vector<std::string>& only_prefixes) {
  if (::mkdir(dest_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError("create collect directory " + dest_dir);
  }
  UniqueFd dst(::open(dest_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dst) return ErrnoError("open collect directory " + dest_dir);
  Walk w{limits, {}, 0};
  KILN_TRY(WalkDir(workspace_fd, dst.get(), "", 0, &w, &only_prefixes));
  w.Close();
  return std::move(w.report);
}

Result<CollectReport> CollectWorkspaceToMemory(int workspace_fd, const CollectLimits& limits,
                                               const std::vector<std::string>& globs,
                                               std::vector<FileContent>* out) {
  Walk w{limits, {}, 0, out, &globs};
  KILN_TRY(WalkDir(workspace_fd, -1, "", 0, &w, nullptr));
  w.Close();
  return std::move(w.report);
}

}  // namespace kiln::supervisor
