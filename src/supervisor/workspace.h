// Reading a sandbox's workspace from the host, safely.
//
// The supervisor holds an O_PATH fd of the workspace tmpfs that the sandbox's
// pid 1 handed over (SCM_RIGHTS). Every path below it is opened with openat2
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV, so a symlink the sandbox made is never followed by the host,
// and only regular files and directories are copied. Names come from the
// sandbox and are hostile: each is one component, checked before use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "supervisor/execution_result.h"

namespace kiln::supervisor {

// Everything below is sandbox-made, so every quantity the supervisor keeps
// about it is bounded: the bytes and files copied, the directory entries
// looked at, and the "skipped" records (then one "N more" line).
struct CollectLimits {
  uint64_t max_total_bytes = 1ULL << 30;
  uint64_t max_files = 10000;
  int max_depth = 16;
  uint64_t max_entries = 100000;          // directory entries visited, in all
  uint64_t max_skipped = 100;             // "path: why" records kept
  uint64_t max_skipped_bytes = 16 << 10;  // ... and their bytes together
};

struct CollectReport {
  std::vector<CollectedFile> files;
  std::vector<std::string> skipped;  // "path: why" (symlink, special file, over limits)
};

// Copies the regular files below `workspace_fd` into `dest_dir` (created if
// missing), recreating subdirectories. In `dest_dir`, files are created with
// O_NOFOLLOW and directories opened with O_NOFOLLOW, so a pre-existing symlink
// there is not followed either. `only_names`, when not empty, restricts the
// top-level entries copied.
Result<CollectReport> CollectWorkspace(int workspace_fd, const std::string& dest_dir,
                                       const CollectLimits& limits,
                                       const std::vector<std::string>& only_prefixes = {});

struct FileContent {
  std::string path;
  std::string content;
};

// Like CollectWorkspace, into memory: the regular files whose relative path
// matches one of `globs` (fnmatch, FNM_PATHNAME off: "*.png" matches in
// subdirectories too; empty = every file), up to the limits.
Result<CollectReport> CollectWorkspaceToMemory(int workspace_fd, const CollectLimits& limits,
                                               const std::vector<std::string>& globs,
                                               std::vector<FileContent>* out);

// openat2 with the confinement flags above.
int OpenBeneath(int dirfd, const char* path, int flags);

}  // namespace kiln::supervisor
