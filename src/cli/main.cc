// kiln: run AI-agent Python in a hardened Linux sandbox.
#include <signal.h>

#include <cstdlib>
#include <iostream>

#include "base/log.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  // Writes to a pipe whose reader died must be errors, not our death.
  ::signal(SIGPIPE, SIG_IGN);
  kiln::log::Init(std::getenv("KILN_LOG"));

  CLI::App app{"kiln: run untrusted Python in a hardened Linux sandbox"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");
  kiln::cli::Action action;
  kiln::cli::RegisterRun(app, &action);
  kiln::cli::RegisterServe(app, &action);
  kiln::cli::RegisterDoctor(app, &action);
  kiln::cli::RegisterKeys(app, &action);
  kiln::cli::RegisterAudit(app, &action);
  kiln::cli::RegisterEvents(app, &action);
  kiln::cli::RegisterLockdown(app, &action);
  kiln::cli::RegisterMcp(app, &action);
  kiln::cli::RegisterPoolBench(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    std::cerr << "Run 'kiln --help' (or 'kiln SUBCOMMAND --help') for usage.\n";
    return kiln::cli::kExitUsage;
  }
  return action ? action() : kiln::cli::kExitUsage;
}
