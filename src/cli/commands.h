// The `kiln` binary's subcommands. Each file turns flags into builder calls and
// prints; none holds logic of its own (gVisor's runsc layout).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace kiln::cli {

// Exit codes shared by the subcommands.
inline constexpr int kExitUsage = 2;      // bad flags, sizes, missing files
inline constexpr int kExitRefused = 125;  // the host cannot give what the policy requires

// Each Register* adds its subcommand and stores the action to run when it is
// the one parsed. The action returns the process's exit code.
using Action = std::function<int()>;
void RegisterRun(CLI::App& app, Action* action);
void RegisterDoctor(CLI::App& app, Action* action);

}  // namespace kiln::cli
