#include "supervisor/input_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/units.h"
#include "policy/policy_codec.h"

namespace kiln::supervisor {

Result<std::vector<OpenInput>> OpenInputs(const policy::SandboxPolicy& policy,
                                          uint64_t workspace_bytes, std::vector<UniqueFd>* keep) {
  std::vector<OpenInput> out;
  uint64_t total = 0;
  for (const auto& f : policy.input_files()) {
    if (f.fd) {
      out.push_back({f.fd->get(), f.name, f.size});
      total += f.size;
      continue;
    }
    if (f.content) {
      KILN_ASSIGN_OR_RETURN(UniqueFd fd, policy::SealedMemfd("kiln-input", *f.content));
      out.push_back({fd.get(), f.name, f.content->size()});
      total += f.content->size();
      keep->push_back(std::move(fd));
      continue;
    }
    UniqueFd fd(::open(f.host_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!fd) return WithField(ErrnoError("file: cannot open '" + f.host_path + "'"), "files");
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
      return InvalidField("files", "file: '" + f.host_path + "' is not a regular file");
    }
    out.push_back({fd.get(), f.name, static_cast<uint64_t>(info.st_size)});
    total += static_cast<uint64_t>(info.st_size);
    keep->push_back(std::move(fd));
  }
  if (total > workspace_bytes) {
    return InvalidField("files", "file: the input files (" + FormatSize(total) +
                                     ") do not fit the workspace (--disk " +
                                     FormatSize(workspace_bytes) + ")");
  }
  return out;
}

Result<std::string> ReadInput(const OpenInput& in) {
  std::string bytes(in.size, '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pread(in.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read input file " + in.name);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace kiln::supervisor
