// File operations on a live sandbox's workspace, from the host: the building
// block of PUT/GET/DELETE /v1/sessions/{id}/files/{path} and the listing.
//
// Runs in the session supervisor (single-threaded), which holds an O_PATH fd
// of the sandbox's workspace tmpfs while the sandbox runs. The sandbox's code
// runs concurrently and is hostile: it can create, rename and replace any
// name at any moment. So no path is ever resolved in one step by the host:
//   - every path is first checked by NormalizeWorkspacePath (no syscall is
//     made for a refused path);
//   - directories are walked one component at a time, each opened with
//     openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//     RESOLVE_NO_XDEV) and O_NOFOLLOW, and the opened inode (not the name) is
//     checked with fstat: a symlink is never followed, whatever it points to,
//     and a swap after the check changes nothing, since the fd is what is used;
//   - the last component is only ever used as one name in that confined
//     directory fd (openat2, fstatat/unlinkat/renameat with no following).
// docs/threat-model.md, "Files across the boundary", states the same rules.
//
// Error codes, which the HTTP layer maps in its one table:
//   kInvalidArgument    bad path (400); a symlink in the path, a directory or
//                       special file where a regular file is needed
//   kNotFound           the path (or a directory on it) does not exist (404)
//   kFailedPrecondition a component on the path is not a directory; writing
//                       over a directory; deleting a directory that is not empty
//   kResourceExhausted  over a per-file or per-workspace cap, or the tmpfs is
//                       full (ENOSPC/EDQUOT/EFBIG) (413)
//   others              the failed call, from ErrnoError (kInternal, ...)
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kiln::supervisor {

// Checks a workspace path as the API received it (percent-decoding is the HTTP
// layer's job, done before). Strict, nothing is rewritten: "a/b/c.txt" is
// returned as is; "./a", "a//b", "a/" and "a/./b" are refused, not cleaned.
// The result always satisfies policy::IsSafeRelativePath.
// kInvalidArgument (HTTP 400), the message naming why: empty, NUL byte,
// absolute, 4096 bytes or more, an empty component, "." or "..", a component
// over 255 bytes, more than 16 components deep.
Result<std::string> NormalizeWorkspacePath(std::string_view raw);

struct WorkspaceCaps {
  uint64_t max_file_bytes = 0;
  // Sum of the apparent sizes (st_size) of the regular files in the workspace
  // after the write. See WriteFileBeneath for how it is counted.
  uint64_t max_workspace_bytes = 0;
};

// Switches this thread's fsuid/fsgid to (uid, gid) and restores the previous
// ones on destruction.
//
// Why: a tmpfs mounted inside a user namespace only stores ids mapped in that
// namespace; a file created by a caller whose fsuid/fsgid is not mapped there
// fails with EOVERFLOW. A root supervisor therefore wraps WriteFileBeneath (and
// any other creation) in ScopedFsIds(sandbox's outer uid, outer gid). Note that
// leaving fsuid 0 drops CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN and the other
// file capabilities from the effective set until it is restored: while it
// lives, the caller has exactly the sandbox owner's file access.
//
// IMPORTANT: setfsuid/setfsgid are per-thread (glibc does not broadcast them
// to other threads as it does setuid); only the calling thread is affected, so
// this is meant for the single-threaded session supervisor. Changing them
// needs CAP_SETUID/CAP_SETGID, or ids the caller already holds.
class [[nodiscard]] ScopedFsIds final {
 public:
  // kPermissionDenied when the kernel kept the old ids (setfsuid reports no
  // error itself; the new value is read back). On failure nothing is changed.
  static Result<ScopedFsIds> Enter(uid_t uid, gid_t gid);
  ScopedFsIds(const ScopedFsIds&) = delete;
  ScopedFsIds& operator=(const ScopedFsIds&) = delete;
  ScopedFsIds(ScopedFsIds&& other) noexcept;
  ScopedFsIds& operator=(ScopedFsIds&&) = delete;
  ~ScopedFsIds();

 private:
  ScopedFsIds(uid_t previous_uid, gid_t previous_gid)
      : previous_uid_(previous_uid), previous_gid_(previous_gid) {}
  uid_t previous_uid_ = 0;
  gid_t previous_gid_ = 0;
  bool active_ = true;
};

// Writes `bytes` (any bytes) to `path` beneath `workspace_fd` (an O_PATH or
// O_RDONLY directory fd), creating missing parent directories (mode 0755 less
// the caller's umask).
//
// Atomic for readers: the bytes go to a fresh temporary name in the target's
// directory (".kiln-put-<random>", created O_CREAT|O_EXCL|O_NOFOLLOW through
// openat2 with the confinement flags), which renameat(2) then puts over the
// target, so a reader sees the old file or the new one, never half of one. On
// any failure the temporary name is removed and the old file is untouched
// (directories created on the way are kept). No fsync: the tmpfs has no
// durability to offer.
//
// New directories and the file (mode 0644) are fchown'ed to owner/group: the
// sandbox's outer uid/gid, so the program inside can modify or delete them.
// A root caller must also hold ScopedFsIds(owner, group) around the call (see
// above); otherwise creation fails with kFailedPrecondition (EOVERFLOW).
//
// Caps, checked before anything is created:
//   - bytes.size() > caps.max_file_bytes: kResourceExhausted, no syscall made.
//   - current total - size of the file replaced + bytes.size() >
//     caps.max_workspace_bytes: kResourceExhausted. The current total is the
//     sum of st_size of every regular file found by walking the workspace with
//     the same confinement (symlinks are not followed, so they count 0; a file
//     with two hard links counts twice). A walk, not statfs: statfs reports the
//     whole filesystem (which, outside a dedicated tmpfs, is not the
//     workspace), counts blocks rather than the bytes users see in the listing,
//     and includes directory and metadata pages. The walk is a snapshot: the
//     sandbox may write concurrently, so this is an admission cap for uploads;
//     the tmpfs size= is the hard bound, and its ENOSPC is kResourceExhausted
//     too. A workspace too large to walk (over 1,000,000 entries, or
//     directories nested over 64 deep) refuses the write (kResourceExhausted).
//
// The target itself: absent or a regular file is fine; a directory is
// kFailedPrecondition; a symlink (never followed, not replaced) or a special
// file is kInvalidArgument: delete it first. A symlink or non-directory on the
// way: kInvalidArgument / kFailedPrecondition, nothing created past it.
Status WriteFileBeneath(int workspace_fd, const std::string& path, std::string_view bytes,
                        const WorkspaceCaps& caps, uid_t owner, gid_t group);
// The same, with the first `size` bytes of `source_fd` (a regular file read
// from offset 0 with pread/sendfile, its own offset left alone: a sealed
// memfd, an input file), copied file to file in the kernel; a source shorter
// than `size` is an error and leaves nothing behind.
Status WriteFileBeneath(int workspace_fd, const std::string& path, int source_fd, uint64_t size,
                        const WorkspaceCaps& caps, uid_t owner, gid_t group);

// Reads the regular file at `path` beneath `workspace_fd`, up to `max_bytes`.
// Opened O_RDONLY|O_NONBLOCK (a fifo cannot block the supervisor) and checked
// with fstat on the opened fd. kNotFound when it (or a directory on the way)
// is absent; kInvalidArgument for a symlink anywhere on the path, a directory,
// a fifo, socket or device (the workspace tmpfs sits in the sandbox's user
// namespace and is therefore nodev: opening a device node there fails);
// kResourceExhausted when the file holds more than `max_bytes` (checked on
// st_size and again while reading, since the sandbox may grow it).
Result<std::string> ReadFileBeneath(int workspace_fd, const std::string& path, uint64_t max_bytes);

struct WorkspaceEntry {
  std::string path;   // relative, '/'-separated: "data/a.csv"
  uint64_t size = 0;  // st_size for a regular file; 0 for a directory
  bool directory = false;
};

// Every regular file and directory beneath `workspace_fd`, sorted by path
// (bytewise). Symlinks, fifos, sockets and devices are skipped, never
// followed or opened, and do not fail the listing; so are names that change
// or vanish while the sandbox runs. Entries at most `max_depth` directories
// below the root are listed (0: the top level only); a directory at the limit
// is listed but not opened. kInvalidArgument for a negative max_depth;
// kResourceExhausted when there are more than `max_entries` entries (the
// listing is never silently truncated).
Result<std::vector<WorkspaceEntry>> ListBeneath(int workspace_fd, size_t max_entries,
                                                int max_depth);

// Deletes `path` beneath `workspace_fd`: a regular file, an empty directory,
// and also a symlink, fifo or socket. Removing a name is unlinkat(2) on one
// component in the confined parent directory fd, which never follows or opens
// what the name points to, so deleting a symlink the sandbox made is safe (and
// the only way for the API client to get rid of one it cannot read or
// overwrite). A symlink *on the way* ("link/x.txt") is kInvalidArgument, never
// followed. kNotFound when absent; kFailedPrecondition for a directory that is
// not empty.
Status DeleteBeneath(int workspace_fd, const std::string& path);

// As DeleteBeneath, and a directory that is not empty is removed with all it
// holds: each name unlinked in a confined fd of its directory (a symlink is
// removed, never followed), at most 64 levels and 1,000,000 names
// (kResourceExhausted beyond).
Status DeleteTreeBeneath(int workspace_fd, const std::string& path);

// Makes the directory `path` (and its missing parents), owned by owner/group
// (a root caller holds ScopedFsIds, as for WriteFileBeneath). kAlreadyExists
// when the name exists; a symlink on the way is kInvalidArgument.
Status MakeDirBeneath(int workspace_fd, const std::string& path, uid_t owner, gid_t group);

// Renames `from` to `to` (renameat(2) between two confined parent fds; `to`'s
// missing parents are made as by MakeDirBeneath). A file replaces a file; a
// symlink is moved as a link. kNotFound when `from` is absent;
// kFailedPrecondition when the kernel refuses the move (a non-empty directory
// in the way, a directory into itself, a file over a directory).
Status MoveBeneath(int workspace_fd, const std::string& from, const std::string& to, uid_t owner,
                   gid_t group);

}  // namespace kiln::supervisor
