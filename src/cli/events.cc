// kiln events: the server's security events (DATA_DIR/kiln.db), newest
// first, as a table or JSON (docs/api.md, "Security events"). Read-only.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/table.h"
#include "executions/security_events.h"
#include "store/api_key.h"
#include "store/store.h"
#include "store/time_format.h"

namespace kiln::cli {
namespace {

constexpr int kExitFailed = 1;

struct EventsFlags {
  std::string data_dir;
  std::string store_url;
  std::string tenant;
  std::string kind;
  std::string since;
  int limit = 100;
  bool json = false;
};

int Fail(const std::string& message, int code) {
  std::cerr << "kiln events: " << message << "\n";
  return code;
}

// Details and addresses may carry client text: no control characters.
std::string Cell(std::string_view text, size_t max = 200) {
  std::string out(text.substr(0, max));
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return out.empty() ? "-" : out;
}

int DoEvents(const EventsFlags& f) {
  store::EventQuery q;
  if (!f.tenant.empty()) {
    if (!store::IsValidTenant(f.tenant)) {
      return Fail("--tenant: '" + f.tenant + "' is not a tenant name ([A-Za-z0-9._-], 1-64)",
                  kExitUsage);
    }
    q.tenant = f.tenant;
  }
  if (!f.kind.empty()) {
    if (!executions::ParseEventKind(f.kind)) {
      return Fail("--kind: '" + f.kind + "' is not a kind (" + executions::EventKindNames() + ")",
                  kExitUsage);
    }
    q.kind = f.kind;
  }
  if (!f.since.empty()) {
    auto since = store::ParseTimeSpec(f.since, store::NowMs());
    if (!since.ok()) return Fail("--since: " + since.error().message, kExitUsage);
    q.since_ms = *since;
  }
  if (f.limit < 1 || f.limit > 1'000'000) return Fail("--limit: use 1..1000000", kExitUsage);
  q.limit = f.limit;

  auto s = store::Store::OpenFor(f.store_url, f.data_dir, /*create=*/false);
  if (!s.ok()) return Fail(s.error().ToString(), kExitFailed);
  auto rows = (*s)->QueryEvents(q);
  if (!rows.ok()) return Fail(rows.error().ToString(), kExitFailed);
  if (f.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : *rows) out.push_back(executions::EventJson(r));
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> table = {
      {"TIME", "ID", "KIND", "TENANT", "KEY", "EXECUTION", "SESSION", "CLIENT", "DETAIL"}};
  for (const auto& r : *rows) {
    table.push_back({store::FormatTimeMs(r.at_ms), std::to_string(r.id), Cell(r.kind),
                     Cell(r.tenant), Cell(r.key_id), Cell(r.execution_id.value_or("-")),
                     Cell(r.session_id.value_or("-")), Cell(r.client_addr), Cell(r.detail, 120)});
  }
  PrintTable(table);
  return 0;
}

}  // namespace

void RegisterEvents(CLI::App& app, Action* action) {
  auto flags = std::make_shared<EventsFlags>();
  CLI::App* events =
      app.add_subcommand("events", "Show the server's security events, newest first");
  events->add_option("--data-dir", flags->data_dir,
                     "State directory (default: /var/lib/kiln as root, else "
                     "$XDG_STATE_HOME/kiln or ~/.local/state/kiln)");
  events->add_option(
      "--store", flags->store_url,
      "The PostgreSQL store (postgresql://...) a fleet shares, instead of --data-dir's SQLite");
  events->add_option("--tenant", flags->tenant, "Only this tenant's events");
  events->add_option("--kind", flags->kind,
                     "Only this kind (" + executions::EventKindNames() + ")");
  events->add_option("--since", flags->since,
                     "Only events since TIME: ISO 8601 (2026-11-30T08:00:00Z) or a duration back "
                     "(30m, 1h, 7d)");
  events->add_option("--limit", flags->limit, "At most N events (default 100)");
  events->add_flag("--json", flags->json, "Print one JSON array with every field");
  events->callback([flags, action] { *action = [flags] { return DoEvents(*flags); }; });
}

}  // namespace kiln::cli
