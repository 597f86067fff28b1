// The `kiln` binary's subcommands. Each file turns flags into builder calls and
// prints; none holds logic of its own (gVisor's runsc layout).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>

namespace kiln::cli {

// Exit codes shared by the subcommands.
inline constexpr int kExitUsage = 2;      // bad flags, sizes, missing files
inline constexpr int kExitRefused = 125;  // the host cannot give what the policy requires

// Each Register* adds its subcommand and stores the action to run when it is
// the one parsed. The action returns the process's exit code.
using Action = std::function<int()>;
void RegisterRun(CLI::App& app, Action* action);
void RegisterServe(CLI::App& app, Action* action);
void RegisterDoctor(CLI::App& app, Action* action);
void RegisterKeys(CLI::App& app, Action* action);
void RegisterAudit(CLI::App& app, Action* action);
void RegisterEvents(CLI::App& app, Action* action);
void RegisterLockdown(CLI::App& app, Action* action);
void RegisterMcp(CLI::App& app, Action* action);
void RegisterPoolBench(CLI::App& app, Action* action);  // hidden; cli/pool.cc

// kiln doctor's report: {"layers": [...], "ready": bool, "verdict": str}. It
// forks probes (and, with `smoke_test`, a sandbox): single-threaded callers only.
nlohmann::json DoctorReport(bool smoke_test);

}  // namespace kiln::cli
