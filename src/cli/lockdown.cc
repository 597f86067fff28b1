// kiln lockdown on|off|status: the server's emergency stop (docs/api.md,
// "Operator controls"). Written to DATA_DIR/kiln.db: a running server picks
// it up within a second (it refuses new executions and sessions with 503 and
// stops every running sandbox), and a restarted one starts locked down.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "executions/security_events.h"
#include "store/store.h"
#include "store/time_format.h"

namespace kiln::cli {
namespace {

constexpr int kExitFailed = 1;

struct LockdownFlags {
  std::string data_dir;
  std::string store_url;
  std::string state;  // on | off | status
  std::string reason;
  bool json = false;
};

int Fail(const std::string& message, int code) {
  std::cerr << "kiln lockdown: " << message << "\n";
  return code;
}

nlohmann::json StateJson(const store::LockdownState& s) {
  if (!s.on) return {{"on", false}, {"reason", nullptr}, {"since", nullptr}, {"by", nullptr}};
  return {{"on", true},
          {"reason", s.reason},
          {"since", store::FormatTimeMs(s.since_ms, true)},
          {"by", s.by}};
}

int DoLockdown(const LockdownFlags& f) {
  if (f.state != "on" && f.state != "off" && f.state != "status") {
    return Fail("say on, off or status", kExitUsage);
  }
  if (f.reason.size() > 1000) return Fail("--reason: at most 1000 bytes", kExitUsage);
  auto s = store::Store::OpenFor(f.store_url, f.data_dir, /*create=*/false);
  if (!s.ok()) return Fail(s.error().ToString(), kExitFailed);
  if (f.state != "status") {
    store::LockdownState state;
    state.on = f.state == "on";
    state.reason = state.on && f.reason.empty() ? "no reason given" : f.reason;
    state.since_ms = store::NowMs();
    state.by = "kiln CLI";
    if (Status st = (*s)->SetLockdown(state); !st.ok()) return Fail(st.error().ToString(), 1);
    // Audited like the API's (the server's metrics do not see it).
    store::EventRow e;
    e.at_ms = state.since_ms;
    e.kind = std::string(executions::ToString(executions::EventKind::kLockdown));
    e.detail = (state.on ? "lockdown on: " + state.reason
                         : "lockdown off" + (f.reason.empty() ? "" : ": " + f.reason)) +
               " (by kiln CLI)";
    (void)(*s)->RecordEvent(e);
  }
  auto now = (*s)->GetLockdown();
  if (!now.ok()) return Fail(now.error().ToString(), kExitFailed);
  if (f.json) {
    std::cout << StateJson(*now).dump() << "\n";
  } else if (now->on) {
    std::cout << "lockdown on since " << store::FormatTimeMs(now->since_ms) << " (by " << now->by
              << "): " << now->reason << "\n";
  } else {
    std::cout << "lockdown off\n";
  }
  return 0;
}

}  // namespace

void RegisterLockdown(CLI::App& app, Action* action) {
  auto flags = std::make_shared<LockdownFlags>();
  CLI::App* cmd = app.add_subcommand(
      "lockdown",
      "Emergency stop: `on` refuses new executions and sessions (503) and stops every running "
      "sandbox of the server on --data-dir, kept across restarts; `off` lifts it");
  cmd->add_option("state", flags->state, "on, off or status")->required();
  cmd->add_option("--reason", flags->reason, "Why (shown to clients in the 503)");
  cmd->add_option("--data-dir", flags->data_dir,
                  "State directory (default: /var/lib/kiln as root, else "
                  "$XDG_STATE_HOME/kiln or ~/.local/state/kiln)");
  cmd->add_option(
      "--store", flags->store_url,
      "The PostgreSQL store (postgresql://...) a fleet shares, instead of --data-dir's SQLite");
  cmd->add_flag("--json", flags->json, "Print the state as JSON");
  cmd->callback([flags, action] { *action = [flags] { return DoLockdown(*flags); }; });
}

}  // namespace kiln::cli
