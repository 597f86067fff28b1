// kiln keys create|list|revoke: the server's API keys in DATA_DIR/kiln.db.
// A key is shown once, by `create`, on stdout alone; the store keeps only its
// hash, so a lost key is revoked and replaced, never recovered.
#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/table.h"
#include "store/api_key.h"
#include "store/store.h"
#include "store/time_format.h"

namespace kiln::cli {
namespace {

constexpr int kExitFailed = 1;

struct KeysFlags {
  std::string data_dir;
  std::string store_url;
  std::string tenant;
  std::string id;
  bool json = false;
  bool admin = false;
};

int Fail(const char* cmd, const std::string& message, int code) {
  std::cerr << "kiln keys " << cmd << ": " << message << "\n";
  return code;
}

Result<std::unique_ptr<store::Store>> OpenStore(const KeysFlags& f, bool create) {
  return store::Store::OpenFor(f.store_url, f.data_dir, create);
}

int DoCreate(const KeysFlags& f) {
  if (f.tenant.empty() && !f.admin) return Fail("create", "--tenant is required", kExitUsage);
  const std::string tenant = f.tenant.empty() ? "admin" : f.tenant;
  if (!store::IsValidTenant(tenant)) {
    return Fail("create", "--tenant: '" + f.tenant + "': use 1-64 characters of A-Z a-z 0-9 . _ -",
                kExitUsage);
  }
  auto s = OpenStore(f, /*create=*/true);
  if (!s.ok()) return Fail("create", s.error().ToString(), kExitFailed);
  auto key = (*s)->CreateKey(tenant, f.admin);
  if (!key.ok()) return Fail("create", key.error().ToString(), kExitFailed);
  // stdout is the key alone, for `KEY=$(kiln keys create ...)`.
  std::cout << key->key << "\n" << std::flush;
  std::cerr << "kiln: created " << (f.admin ? "admin key " : "key ") << key->info.id
            << " for tenant " << key->info.tenant << " in " << (*s)->path()
            << "; it is shown only this once\n";
  return 0;
}

int DoList(const KeysFlags& f) {
  auto s = OpenStore(f, /*create=*/false);
  if (!s.ok()) return Fail("list", s.error().ToString(), kExitFailed);
  auto keys = (*s)->ListKeys();
  if (!keys.ok()) return Fail("list", keys.error().ToString(), kExitFailed);
  auto time_or = [](const std::optional<int64_t>& ms, bool millis) {
    return ms ? store::FormatTimeMs(*ms, millis) : std::string("-");
  };
  if (f.json) {
    nlohmann::json out = nlohmann::json::array();
    auto time_or_null = [](const std::optional<int64_t>& ms) {
      return ms ? nlohmann::json(store::FormatTimeMs(*ms, true)) : nlohmann::json(nullptr);
    };
    for (const auto& k : *keys) {
      out.push_back({{"id", k.id},
                     {"tenant", k.tenant},
                     {"created", store::FormatTimeMs(k.created_ms, true)},
                     {"revoked", time_or_null(k.revoked_ms)},
                     {"last_used", time_or_null(k.last_used_ms)},
                     {"admin", k.admin}});
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "TENANT", "ROLE", "CREATED", "LAST USED", "REVOKED"}};
  for (const auto& k : *keys) {
    rows.push_back({k.id, k.tenant, k.admin ? "admin" : "tenant", store::FormatTimeMs(k.created_ms),
                    time_or(k.last_used_ms, false), time_or(k.revoked_ms, false)});
  }
  PrintTable(rows);
  return 0;
}

int DoRevoke(const KeysFlags& f) {
  if (!store::IsValidKeyId(f.id)) {
    return Fail("revoke",
                "'" + f.id +
                    "' is not a key id: 12 lowercase hex characters, as kiln keys list "
                    "shows them",
                kExitUsage);
  }
  auto s = OpenStore(f, /*create=*/false);
  if (!s.ok()) return Fail("revoke", s.error().ToString(), kExitFailed);
  Status r = (*s)->RevokeKey(f.id);
  if (!r.ok()) return Fail("revoke", r.error().message, kExitFailed);
  std::cerr << "kiln: key " << f.id << " revoked\n";
  return 0;
}

void AddDataDir(CLI::App* cmd, KeysFlags* f) {
  cmd->add_option("--data-dir", f->data_dir,
                  "State directory (default: /var/lib/kiln as root, else "
                  "$XDG_STATE_HOME/kiln or ~/.local/state/kiln)");
  cmd->add_option(
      "--store", f->store_url,
      "The PostgreSQL store (postgresql://...) a fleet shares, instead of --data-dir's SQLite");
}

}  // namespace

void RegisterKeys(CLI::App& app, Action* action) {
  auto flags = std::make_shared<KeysFlags>();
  CLI::App* keys = app.add_subcommand("keys", "Manage the server's API keys");
  keys->require_subcommand(1);

  CLI::App* create = keys->add_subcommand(
      "create", "Create a key for a tenant; prints the key alone on stdout (shown once)");
  create->add_option("--tenant", flags->tenant,
                     "Tenant the key acts for ([A-Za-z0-9._-], 1-64); required unless --admin "
                     "(then 'admin')");
  create->add_flag("--admin", flags->admin,
                   "An admin key: it may also use /v1/admin/* (events, tenants, quarantine, "
                   "lockdown, revocation), which tenants' keys never reach (404)");
  AddDataDir(create, flags.get());
  create->callback([flags, action] { *action = [flags] { return DoCreate(*flags); }; });

  CLI::App* list = keys->add_subcommand("list", "List keys: id, tenant, times (never secrets)");
  AddDataDir(list, flags.get());
  list->add_flag("--json", flags->json, "Print one JSON array");
  list->callback([flags, action] { *action = [flags] { return DoList(*flags); }; });

  CLI::App* revoke = keys->add_subcommand("revoke", "Revoke a key by its id");
  revoke->add_option("id", flags->id, "The key's id (12 hex characters, from kiln keys list)")
      ->required();
  AddDataDir(revoke, flags.get());
  revoke->callback([flags, action] { *action = [flags] { return DoRevoke(*flags); }; });
}

}  // namespace kiln::cli
