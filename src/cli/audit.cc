// kiln audit: the server's execution log (DATA_DIR/kiln.db), newest first,
// as a table or JSON. Read-only: a running server keeps writing meanwhile.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "store/api_key.h"
#include "store/store.h"
#include "store/time_format.h"

namespace kiln::cli {
namespace {

constexpr int kExitFailed = 1;

struct AuditFlags {
  std::string data_dir;
  std::string store_url;
  std::string tenant;
  std::string session;
  std::string since;
  std::string status;
  int limit = 100;
  bool json = false;
};

int Fail(const std::string& message, int code) {
  std::cerr << "kiln audit: " << message << "\n";
  return code;
}

// Session ids, statuses and addresses may come from clients: a cell never
// carries control characters (terminal escapes) or spaces that break columns.
std::string Cell(std::string_view text) {
  std::string out(text.substr(0, 200));
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return out.empty() ? "-" : out;
}

std::string Ms(const std::optional<double>& ms) {
  if (!ms) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0fms", *ms);
  return buf;
}

template <typename T>
nlohmann::json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json ToJson(const store::AuditRow& r) {
  return {
      {"id", r.id},
      {"tenant", r.tenant},
      {"key_id", r.key_id},
      {"profile", r.profile},
      {"session_id", OrNull(r.session_id)},
      {"client_addr", r.client_addr},
      {"node", OrNull(r.node)},
      {"started", store::FormatTimeMs(r.started_ms, true)},
      {"ended", r.ended_ms ? nlohmann::json(store::FormatTimeMs(*r.ended_ms, true)) : nullptr},
      {"status", r.status},
      {"exit_code", OrNull(r.exit_code)},
      {"signal", OrNull(r.signal)},
      {"duration_ms", OrNull(r.duration_ms)},
      {"cpu_ms", OrNull(r.cpu_ms)},
      {"peak_memory_bytes", OrNull(r.peak_memory_bytes)},
      {"stdout_bytes", OrNull(r.stdout_bytes)},
      {"stderr_bytes", OrNull(r.stderr_bytes)},
      {"stdout_truncated", OrNull(r.stdout_truncated)},
      {"stderr_truncated", OrNull(r.stderr_truncated)},
      {"policy_violation", OrNull(r.policy_violation)},
      {"reason", OrNull(r.reason)},
      {"code", OrNull(r.code)},
      {"code_sha256", r.code_sha256},
      {"code_size", r.code_size},
  };
}

int DoAudit(const AuditFlags& f) {
  store::AuditQuery q;
  if (!f.tenant.empty()) {
    if (!store::IsValidTenant(f.tenant)) {
      return Fail("--tenant: '" + f.tenant + "' is not a tenant name ([A-Za-z0-9._-], 1-64)",
                  kExitUsage);
    }
    q.tenant = f.tenant;
  }
  if (!f.session.empty()) q.session_id = f.session;
  if (!f.status.empty()) q.status = f.status;
  if (!f.since.empty()) {
    auto since = store::ParseTimeSpec(f.since, store::NowMs());
    if (!since.ok()) return Fail("--since: " + since.error().message, kExitUsage);
    q.since_ms = *since;
  }
  if (f.limit < 1 || f.limit > 1'000'000) return Fail("--limit: use 1..1000000", kExitUsage);
  q.limit = f.limit;

  auto s = store::Store::OpenFor(f.store_url, f.data_dir, /*create=*/false);
  if (!s.ok()) return Fail(s.error().ToString(), kExitFailed);
  auto rows = (*s)->Query(q);
  if (!rows.ok()) return Fail(rows.error().ToString(), kExitFailed);

  if (f.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : *rows) {
      nlohmann::json j = ToJson(r);
      // The output audit's hits of this execution: the detector and where,
      // never the text (docs/adr/0015).
      store::OutputHitQuery hq;
      hq.execution_id = r.id;
      hq.limit = 1000;
      auto hits = (*s)->QueryOutputHits(hq);
      if (!hits.ok()) return Fail(hits.error().ToString(), kExitFailed);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& h : *hits) {
        list.push_back({{"detector", h.detector},
                        {"where", h.location},
                        {"action", h.action},
                        {"count", h.count}});
      }
      j["output_hits"] = std::move(list);
      out.push_back(std::move(j));
    }
    // User code may hold invalid UTF-8; replace rather than fail the dump.
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> table = {{"STARTED", "ID", "TENANT", "KEY", "PROFILE",
                                                  "SESSION", "STATUS", "EXIT", "DURATION", "CPU",
                                                  "PEAK MEM", "CODE", "CLIENT"}};
  for (const auto& r : *rows) {
    std::string exit = "-";
    if (r.exit_code) {
      exit = std::to_string(*r.exit_code);
    } else if (r.signal) {
      exit = "sig " + std::to_string(*r.signal);
    }
    std::string status = r.status;
    if (r.stdout_truncated.value_or(false) || r.stderr_truncated.value_or(false)) {
      status += " (truncated)";
    }
    table.push_back({store::FormatTimeMs(r.started_ms), Cell(r.id), Cell(r.tenant), Cell(r.key_id),
                     Cell(r.profile), Cell(r.session_id.value_or("-")), Cell(status), exit,
                     Ms(r.duration_ms), Ms(r.cpu_ms),
                     r.peak_memory_bytes ? FormatSize(*r.peak_memory_bytes) : "-",
                     FormatSize(r.code_size), Cell(r.client_addr)});
  }
  PrintTable(table);
  return 0;
}

}  // namespace

void RegisterAudit(CLI::App& app, Action* action) {
  auto flags = std::make_shared<AuditFlags>();
  CLI::App* audit = app.add_subcommand("audit", "Show the server's execution log, newest first");
  audit->add_option("--data-dir", flags->data_dir,
                    "State directory (default: /var/lib/kiln as root, else "
                    "$XDG_STATE_HOME/kiln or ~/.local/state/kiln)");
  audit->add_option(
      "--store", flags->store_url,
      "The PostgreSQL store (postgresql://...) a fleet shares, instead of --data-dir's SQLite");
  audit->add_option("--tenant", flags->tenant, "Only this tenant's executions");
  audit->add_option("--session", flags->session, "Only this session's executions");
  audit->add_option("--since", flags->since,
                    "Only executions started since TIME: ISO 8601 (2026-11-30T08:00:00Z) or a "
                    "duration back (30m, 1h, 7d)");
  audit->add_option("--status", flags->status,
                    "Only this status (ok, error, timeout, "
                    "interrupted, rejected, ...)");
  audit->add_option("--limit", flags->limit, "At most N rows (default 100)");
  audit->add_flag("--json", flags->json, "Print one JSON array with every field, code included");
  audit->callback([flags, action] { *action = [flags] { return DoAudit(*flags); }; });
}

}  // namespace kiln::cli
