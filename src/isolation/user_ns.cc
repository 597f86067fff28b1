#include "isolation/user_ns.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>

#include "sys/syscalls.h"

namespace kiln::isolation {
namespace {

Status WriteProcFile(pid_t pid, const char* name, const std::string& content) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path, errno, SetupStep::kUserMaps);
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return ErrnoError("write '" + content + "' to " + path, errno, SetupStep::kUserMaps);
  }
  return OkStatus();
}

}  // namespace

Result<UidSlot> UidSlot::Acquire(const std::string& lock_dir) {
  UidSlot slot;
  if (::geteuid() != 0) {
    slot.uid_ = ::geteuid();
    slot.gid_ = ::getegid();
    return slot;
  }
  slot.privileged_ = true;
  ::mkdir(lock_dir.c_str(), 0700);
  std::random_device rd;
  const unsigned start = rd() % kSlotCount;
  for (unsigned i = 0; i < 256; ++i) {
    const unsigned n = (start + i) % kSlotCount;
    const std::string path = lock_dir + "/" + std::to_string(n);
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return ErrnoError("open uid slot lock " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
      slot.uid_ = kSlotUidBase + n;
      slot.gid_ = kSlotUidBase + n;
      slot.lock_ = std::move(fd);
      return slot;
    }
  }
  return MakeError(Code::kResourceExhausted, "no free sandbox uid slot in " + lock_dir);
}

Status WriteIdMapsFromParent(pid_t child, const UidSlot& slot) {
  KILN_TRY(
      WriteProcFile(child, "uid_map",
                    std::to_string(kInsideUid) + " " + std::to_string(slot.outer_uid()) + " 1\n"));
  if (!slot.privileged()) KILN_TRY(WriteProcFile(child, "setgroups", "deny"));
  return WriteProcFile(
      child, "gid_map",
      std::to_string(kInsideGid) + " " + std::to_string(slot.outer_gid()) + " 1\n");
}

int SetInsideIdsInChild(bool drop_groups) {
  if (drop_groups && ::setgroups(0, nullptr) != 0) return -1;
  if (::setresgid(kInsideGid, kInsideGid, kInsideGid) != 0) return -1;
  return ::setresuid(kInsideUid, kInsideUid, kInsideUid);
}

}  // namespace kiln::isolation
