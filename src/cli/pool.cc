// `kiln run --pool` (hidden): the program runs in a sandbox from a warm pool
// made for this one run (a zygote with the pool's preload list), so the
// escape and integration tiers can exercise the pool path through the same
// CLI (tests/CMakeLists.txt: the *_pool variants). And `kiln pool-bench`
// (hidden): the standalone measurements of bench/pool_bench.py.
#include "cli/pool.h"

#include <cstdlib>
#include <sstream>

#include "zygote/pool.h"

namespace kiln::cli {

std::vector<std::string> DefaultPoolPreload() {
  if (const char* env = std::getenv("KILN_POOL_PRELOAD"); env != nullptr) {
    std::vector<std::string> out;
    std::stringstream ss(env);
    std::string m;
    while (std::getline(ss, m, ',')) {
      if (!m.empty()) out.push_back(m);
    }
    return out;
  }
  return {"numpy", "pandas", "matplotlib"};
}

supervisor::AdoptedSandbox ToAdopted(zygote::PooledChild&& c) {
  supervisor::AdoptedSandbox a;
  a.init_pidfd = std::move(c.init_pidfd);
  a.init_pid = c.init_pid;
  a.worker_pid = c.worker_pid;
  a.host_uid = c.host_uid;
  a.sync = std::move(c.sync);
  a.runtime = std::move(c.runtime);
  a.out = std::move(c.out);
  a.err = std::move(c.err);
  a.workspace = std::move(c.workspace);
  a.cgroup = std::move(c.cgroup);
  return a;
}

Result<supervisor::ExecutionResult> RunViaPool(const supervisor::HostContext& host,
                                               const policy::SandboxPolicy& policy,
                                               const supervisor::Program& program,
                                               supervisor::RunOptions options) {
  zygote::PoolOptions po{zygote::ZygoteOptions(policy)};
  po.zygote.profile = "run";
  po.zygote.preload = DefaultPoolPreload();
  for (const auto& m : policy.preload()) po.zygote.preload.push_back(m);
  po.min = 1;
  po.max = 1;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<zygote::Pool> pool, zygote::Pool::Create(host, po));
  KILN_ASSIGN_OR_RETURN(zygote::PooledChild child, pool->Take(std::chrono::seconds(60)));
  supervisor::AdoptedSandbox adopted = ToAdopted(std::move(child));
  options.adopt = &adopted;
  return supervisor::RunSandboxed(host, policy, program, options);
}

}  // namespace kiln::cli
