// A policy's input files, opened for the copy into the workspace: one
// staging step for every way a sandbox is made (a cold native jail, gVisor,
// an adopted pooled sandbox), so that the checks are the same.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "policy/policy.h"

namespace kiln::supervisor {

struct OpenInput {
  int fd;            // a regular file, read from offset 0
  std::string name;  // relative path in the workspace
  uint64_t size;
};

// Every input file of `policy`: the plan's memfds as they came, bytes put
// into a sealed memfd, host paths (the CLI) opened with this process's
// privileges. `keep` owns what was opened here. Errors name the field
// "files": a host path that cannot be opened or is not a regular file, and
// files that together do not fit `workspace_bytes`.
Result<std::vector<OpenInput>> OpenInputs(const policy::SandboxPolicy& policy,
                                          uint64_t workspace_bytes, std::vector<UniqueFd>* keep);

// The whole of an open input (pread from 0, at most `size` bytes).
Result<std::string> ReadInput(const OpenInput& in);

}  // namespace kiln::supervisor
