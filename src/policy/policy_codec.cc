#include "policy/policy_codec.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

namespace kiln::policy {
namespace {

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

std::string_view ToString(Requirement r) {
  return r == Requirement::kRequired ? "required" : "best_effort";
}

Result<Requirement> RequirementOf(const nlohmann::json& j, const char* key) {
  const std::string v = j.value(key, "");
  if (v == "required") return Requirement::kRequired;
  if (v == "best_effort") return Requirement::kBestEffort;
  return InvalidArgument(std::string("policy: ") + key + " must be required or best_effort");
}

// A member of `j` of type T, or an error naming it (json::value throws on a
// member of another type).
template <typename T>
Result<T> Get(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(std::string("policy: ") + key + " is missing");
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean())
      return InvalidArgument(std::string("policy: ") + key + ": not a boolean");
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (!it->is_number_unsigned())
      return InvalidArgument(std::string("policy: ") + key + ": not a count");
  } else if constexpr (std::is_same_v<T, double>) {
    if (!it->is_number()) return InvalidArgument(std::string("policy: ") + key + ": not a number");
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return InvalidArgument(std::string("policy: ") + key + ": not a string");
  }
  return it->get<T>();
}

Result<std::vector<std::string>> Strings(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    return InvalidArgument(std::string("policy: ") + key + " must be an array");
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) return InvalidArgument(std::string("policy: ") + key + ": not strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

Result<UniqueFd> SealedMemfd(const char* name, std::string_view bytes) {
  return SealedMemfd(name, std::vector<std::string_view>{bytes});
}

Result<UniqueFd> SealedMemfd(const char* name, const std::vector<std::string_view>& parts) {
  // MFD_NOEXEC_SEAL (Linux 6.3) where the kernel has it: the file can never
  // be made executable.
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL));
  if (!fd && errno == EINVAL) fd.Reset(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return ErrnoError("memfd_create");
  for (std::string_view bytes : parts) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ErrnoError("write memfd");
      done += static_cast<size_t>(n);
    }
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return ErrnoError("seal memfd");
  return fd;
}

Result<nlohmann::json> EncodePolicy(const SandboxPolicy& p,
                                    std::vector<std::shared_ptr<const UniqueFd>>* fds) {
  const Limits& l = p.limits();
  nlohmann::json limits = {{"wall_timeout_s", l.wall_timeout_s},
                           {"cpu_time_s", l.cpu_time_s},
                           {"cpu_time_explicit", l.cpu_time_explicit},
                           {"memory_bytes", l.memory_bytes},
                           {"cpus", l.cpus},
                           {"pids", l.pids},
                           {"output_bytes", l.output_bytes},
                           {"workspace_bytes", l.workspace_bytes},
                           {"tmp_bytes", l.tmp_bytes},
                           {"shm_bytes", l.shm_bytes},
                           {"open_files", l.open_files},
                           {"io_read_bps", l.io.read_bps},
                           {"io_write_bps", l.io.write_bps},
                           {"io_read_iops", l.io.read_iops},
                           {"io_write_iops", l.io.write_iops}};
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : p.input_files()) {
    if (!f.host_path.empty()) {
      files.push_back({{"name", f.name}, {"host_path", f.host_path}});
      continue;
    }
    std::shared_ptr<const UniqueFd> fd = f.fd;
    uint64_t size = f.size;
    if (f.content) {
      KILN_ASSIGN_OR_RETURN(UniqueFd made, SealedMemfd("kiln-input", *f.content));
      fd = std::make_shared<const UniqueFd>(std::move(made));
      size = f.content->size();
    }
    files.push_back({{"name", f.name}, {"fd", fds->size()}, {"size", size}});
    fds->push_back(std::move(fd));
  }
  return nlohmann::json{
      {"limits", std::move(limits)},
      {"interpreter", p.interpreter()},
      {"input_files", std::move(files)},
      {"cgroup", std::string(ToString(p.cgroup()))},
      {"landlock", std::string(ToString(p.landlock()))},
      {"hostname", p.hostname()},
      {"imports",
       {{"mode", std::string(ToString(p.import_policy().mode))},
        {"modules", p.import_policy().modules}}},
      {"preload", p.preload()},
      {"max_images", p.display_limits().max_images},
      {"max_image_bytes", p.display_limits().max_image_bytes},
      {"ro_mounts", p.extra_ro_mounts()},
      {"backend", std::string(ToString(p.backend()))},
  };
}

Result<SandboxPolicy> DecodePolicy(const nlohmann::json& j,
                                   std::vector<std::shared_ptr<const UniqueFd>> fds) {
  if (!j.is_object()) return InvalidArgument("policy must be an object");
  SandboxPolicy p;
  auto lit = j.find("limits");
  if (lit == j.end() || !lit->is_object()) return InvalidArgument("policy: limits is missing");
  const nlohmann::json& l = *lit;
  Limits& o = p.limits_;
  KILN_ASSIGN_OR_RETURN(o.wall_timeout_s, Get<double>(l, "wall_timeout_s"));
  KILN_ASSIGN_OR_RETURN(o.cpu_time_s, Get<double>(l, "cpu_time_s"));
  KILN_ASSIGN_OR_RETURN(o.cpu_time_explicit, Get<bool>(l, "cpu_time_explicit"));
  KILN_ASSIGN_OR_RETURN(o.memory_bytes, Get<uint64_t>(l, "memory_bytes"));
  KILN_ASSIGN_OR_RETURN(o.cpus, Get<double>(l, "cpus"));
  KILN_ASSIGN_OR_RETURN(o.pids, Get<uint64_t>(l, "pids"));
  KILN_ASSIGN_OR_RETURN(o.output_bytes, Get<uint64_t>(l, "output_bytes"));
  KILN_ASSIGN_OR_RETURN(o.workspace_bytes, Get<uint64_t>(l, "workspace_bytes"));
  KILN_ASSIGN_OR_RETURN(o.tmp_bytes, Get<uint64_t>(l, "tmp_bytes"));
  KILN_ASSIGN_OR_RETURN(o.shm_bytes, Get<uint64_t>(l, "shm_bytes"));
  KILN_ASSIGN_OR_RETURN(o.open_files, Get<uint64_t>(l, "open_files"));
  KILN_ASSIGN_OR_RETURN(o.io.read_bps, Get<uint64_t>(l, "io_read_bps"));
  KILN_ASSIGN_OR_RETURN(o.io.write_bps, Get<uint64_t>(l, "io_write_bps"));
  KILN_ASSIGN_OR_RETURN(o.io.read_iops, Get<uint64_t>(l, "io_read_iops"));
  KILN_ASSIGN_OR_RETURN(o.io.write_iops, Get<uint64_t>(l, "io_write_iops"));
  if (!(o.wall_timeout_s > 0) || !(o.cpu_time_s > 0) || !(o.cpus > 0) || o.pids == 0)
    return InvalidArgument("policy: limits out of range");

  KILN_ASSIGN_OR_RETURN(p.interpreter_, Get<std::string>(j, "interpreter"));
  if (p.interpreter_.empty() || p.interpreter_[0] != '/')
    return InvalidArgument("policy: interpreter must be an absolute path");
  auto files = j.find("input_files");
  if (files == j.end() || !files->is_array()) return InvalidArgument("policy: input_files");
  std::vector<bool> used(fds.size(), false);
  for (const auto& f : *files) {
    if (!f.is_object()) return InvalidArgument("policy: input_files entries must be objects");
    InputFile in;
    KILN_ASSIGN_OR_RETURN(in.name, Get<std::string>(f, "name"));
    if (f.contains("host_path")) {
      KILN_ASSIGN_OR_RETURN(in.host_path, Get<std::string>(f, "host_path"));
      if (!IsSafeFileName(in.name)) return InvalidArgument("policy: bad input file name");
    } else {
      if (!IsSafeRelativePath(in.name)) return InvalidArgument("policy: bad input file path");
      KILN_ASSIGN_OR_RETURN(uint64_t index, Get<uint64_t>(f, "fd"));
      KILN_ASSIGN_OR_RETURN(in.size, Get<uint64_t>(f, "size"));
      if (index >= fds.size() || used[index] || fds[index] == nullptr || !fds[index]->valid())
        return InvalidArgument("policy: input file '" + in.name + "' has no open file");
      used[index] = true;
      // The file must be what the server said: a regular file of that size.
      struct stat st {};
      if (::fstat(fds[index]->get(), &st) != 0 || !S_ISREG(st.st_mode) ||
          static_cast<uint64_t>(st.st_size) != in.size) {
        return InvalidArgument("policy: input file '" + in.name + "' is not its declared file");
      }
      in.fd = fds[index];
    }
    p.input_files_.push_back(std::move(in));
  }
  KILN_ASSIGN_OR_RETURN(p.cgroup_, RequirementOf(j, "cgroup"));
  KILN_ASSIGN_OR_RETURN(p.landlock_, RequirementOf(j, "landlock"));
  KILN_ASSIGN_OR_RETURN(p.hostname_, Get<std::string>(j, "hostname"));
  auto imports = j.find("imports");
  if (imports == j.end() || !imports->is_object()) return InvalidArgument("policy: imports");
  KILN_ASSIGN_OR_RETURN(std::string mode, Get<std::string>(*imports, "mode"));
  if (mode == "open") {
    p.import_policy_.mode = ImportPolicy::Mode::kOpen;
  } else if (mode == "denylist") {
    p.import_policy_.mode = ImportPolicy::Mode::kDenylist;
  } else if (mode == "allowlist") {
    p.import_policy_.mode = ImportPolicy::Mode::kAllowlist;
  } else {
    return InvalidArgument("policy: imports.mode must be open, denylist or allowlist");
  }
  KILN_ASSIGN_OR_RETURN(p.import_policy_.modules, Strings(*imports, "modules"));
  KILN_ASSIGN_OR_RETURN(p.preload_, Strings(j, "preload"));
  for (const auto& m : p.preload_) {
    if (!IsModuleName(m)) return InvalidArgument("policy: preload: '" + m + "' is no module");
  }
  KILN_ASSIGN_OR_RETURN(p.display_limits_.max_images, Get<uint64_t>(j, "max_images"));
  KILN_ASSIGN_OR_RETURN(p.display_limits_.max_image_bytes, Get<uint64_t>(j, "max_image_bytes"));
  KILN_ASSIGN_OR_RETURN(p.extra_ro_mounts_, Strings(j, "ro_mounts"));
  for (const auto& m : p.extra_ro_mounts_) {
    if (m.empty() || m[0] != '/') return InvalidArgument("policy: ro_mounts must be absolute");
  }
  KILN_ASSIGN_OR_RETURN(std::string backend, Get<std::string>(j, "backend"));
  if (backend == "native") {
    p.backend_ = Backend::kNative;
  } else if (backend == "gvisor") {
    p.backend_ = Backend::kGvisor;
  } else {
    return InvalidArgument("policy: backend must be native or gvisor");
  }
  return p;
}

}  // namespace kiln::policy
