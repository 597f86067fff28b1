// The supervisor process of one job (`kiln-supervise`): forked by the
// spawner, single-threaded like `kiln run`. It reads the job's request from
// the job channel (its plan: the policy the server built, the input files
// as memfds beside it, the pool decision), runs the sandbox (a one-shot, or
// a session's cells) and writes the results back. It builds no policy.
#pragma once

#include <optional>

#include "supervisor/host.h"
#include "zygote/handoff.h"

namespace kiln::spawner {

// Bounds this process's own memory (RLIMIT_DATA; not under AddressSanitizer).
void LimitOwnMemory();

// The job on `fd`; `pooled`: the warm pool's sandbox the spawner took for it.
[[noreturn]] void RunJob(int fd, const supervisor::HostContext& host,
                         std::optional<zygote::Handoff> pooled);

}  // namespace kiln::spawner
