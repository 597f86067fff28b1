// The CLI's use of the warm pool (src/zygote): `kiln run --pool` and
// `kiln pool-bench`, both hidden (for tests and bench/).
#pragma once

#include <string>
#include <vector>

#include "policy/policy.h"
#include "supervisor/sandbox.h"
#include "zygote/pool.h"

namespace kiln::cli {

// The modules a zygote imports besides its profile's preload list:
// numpy, pandas, matplotlib, or $KILN_POOL_PRELOAD (comma-separated).
std::vector<std::string> DefaultPoolPreload();

// One program in a sandbox taken from a pool made for it (its zygote is
// started for this run and killed after it).
Result<supervisor::ExecutionResult> RunViaPool(const supervisor::HostContext& host,
                                               const policy::SandboxPolicy& policy,
                                               const supervisor::Program& program,
                                               supervisor::RunOptions options);

}  // namespace kiln::cli
