// kiln serve: the HTTP API (docs/api.md). Everything that forks happens here,
// before the first thread: probes, the readiness smoke test, the font cache;
// then the spawner (posix_spawn, and again whenever it dies: ADR 0008), which
// forks every sandbox after that.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <thread>

#include "admin/alerts.h"
#include "admin/controls.h"
#include "admission/admission.h"
#include "base/log.h"
#include "cli/commands.h"
#include "config/config.h"
#include "executions/service.h"
#include "fleet/registry.h"
#include "metrics/metrics.h"
#include "server/server.h"
#include "sessions/session_manager.h"
#include "spawner/spawner.h"
#include "store/backends.h"
#include "store/store.h"
#include "supervisor/sandbox.h"

namespace kiln::cli {
namespace {

struct ServeFlags {
  std::string config;
  std::string listen;
  std::string data_dir;
  std::string store_url;
  std::string node;
  std::string advertise;
  bool check = false;
};

int Fail(const std::string& message, int code = 1) {
  std::cerr << "kiln serve: " << message << "\n";
  return code;
}

// "sbx-<pid>-..." of a kiln process that no longer runs: the pid is gone, a
// zombie (a killed supervisor not yet reaped), or now a different program.
// (The warm pool's process, kiln-pool, names the cgroups it makes for its
// sandboxes after itself.)
bool IsStaleSandboxCgroup(const std::string& name) {
  if (name.rfind("sbx-", 0) != 0) return false;
  const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + 4));
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return true;
  // "pid (comm) S ...": comm may hold spaces and parentheses; the state
  // follows the last ')'.
  const auto open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= line.size())
    return true;
  const std::string comm = line.substr(open + 1, close - open - 1);
  const char state = line[close + 2];
  return state == 'Z' || state == 'X' ||
         (comm != "kiln" && comm != "kiln-supervise" && comm != "kiln-pool");
}

// `kiln serve --check`: the configuration as this node would run it, read and
// validated, then described; nothing is started, opened or connected to (like
// `haproxy -c` and `nginx -t`, for a deploy pipeline or an init container).
int CheckOnly(const ServeFlags& f, const config::Config& cfg) {
  std::cout << "kiln serve: the configuration is valid ("
            << (f.config.empty() ? std::string("built-in kiln.toml") : f.config) << ")\n";
  std::cout << "  listen    " << cfg.server.listen << "\n";
  if (cfg.store.url.empty()) {
    std::cout << "  store     SQLite in " << cfg.server.data_dir << "\n";
  } else {
    const std::string node =
        cfg.fleet.node.empty() ? fleet::NodeIdFromHostname() + " (the host name)" : cfg.fleet.node;
    std::cout << "  store     " << store::RedactUrl(cfg.store.url) << " (" << cfg.store.pool
              << " connections)\n"
              << "  fleet     node " << node << ", advertise "
              << (cfg.fleet.advertise.empty() ? cfg.server.listen : cfg.fleet.advertise)
              << ", heartbeat " << cfg.fleet.heartbeat_s << " s, node_timeout "
              << cfg.fleet.node_timeout_s << " s, drain_wait " << cfg.fleet.drain_wait_s << " s\n";
  }
  for (const auto& [name, profile] : cfg.profiles) {
    std::cout << "  profile   " << name << (name == cfg.server.default_profile ? " (default)" : "")
              << ": " << policy::ToString(profile.backend) << ", " << profile.interpreter;
    if (!profile.preload.empty()) {
      std::cout << ", preload";
      for (const auto& m : profile.preload) std::cout << " " << m;
    }
    std::cout << "\n";
  }
  std::cout << "  tenants   " << cfg.tenants.size() << " configured, " << cfg.server.max_sessions
            << " sessions at most, shutdown_grace " << cfg.server.shutdown_grace_s << " s\n";
  return 0;
}

int DoServe(const ServeFlags& f) {
  // A server logs one line per request at info (KILN_LOG overrides).
  if (std::getenv("KILN_LOG") == nullptr) spdlog::set_level(spdlog::level::info);
  // --- Configuration.
  auto loaded = config::LoadConfigOrBuiltin(f.config);
  if (!loaded.ok()) return Fail("--config: " + loaded.error().message, kExitUsage);
  config::Config cfg = std::move(*loaded);
  if (!f.listen.empty()) cfg.server.listen = f.listen;
  if (!f.data_dir.empty()) cfg.server.data_dir = f.data_dir;
  if (cfg.server.data_dir.empty()) cfg.server.data_dir = store::DefaultDataDir();
  if (!f.store_url.empty()) {
    if (Status st = config::CheckStoreUrl(f.store_url); !st.ok()) {
      return Fail("--store: " + st.error().message, kExitUsage);
    }
    cfg.store.url = f.store_url;
  }
  // Per-node values of a fleet whose nodes share one kiln.toml (a Kubernetes
  // ConfigMap): the pod's name and address come as flags.
  if (!f.node.empty()) {
    if (Status st = config::CheckNodeId(f.node); !st.ok()) {
      return Fail("--node: " + st.error().message, kExitUsage);
    }
    cfg.fleet.node = f.node;
  }
  if (!f.advertise.empty()) {
    if (Status st = config::CheckHostPort(f.advertise); !st.ok()) {
      return Fail("--advertise: " + st.error().message, kExitUsage);
    }
    cfg.fleet.advertise = f.advertise;
  }
  if (cfg.store.url.empty() && (!f.node.empty() || !f.advertise.empty())) {
    return Fail(std::string(f.node.empty() ? "--advertise" : "--node") +
                    ": only for a node of a fleet (a PostgreSQL store: --store or [store] url)",
                kExitUsage);
  }
  if (cfg.server.concurrency == 0) {
    cfg.server.concurrency = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  if (f.check) return CheckOnly(f, cfg);

  // --- The host, once; leftovers of a crashed server; readiness.
  auto host = supervisor::LoadHostContext();
  if (!host.ok()) return Fail(host.error().ToString());
  if (host->cgroups) {
    auto removed = host->cgroups->RemoveStale(IsStaleSandboxCgroup);
    if (removed.ok() && *removed > 0) KILN_LOG_WARN("removed {} stale sandbox cgroup(s)", *removed);
  }
  if (Status s = supervisor::EnsureFontCache(*host); !s.ok()) {
    KILN_LOG_WARN("no matplotlib font cache: {}", s.error().ToString());
  }
  nlohmann::json readiness = DoctorReport(/*smoke_test=*/true);
  if (!readiness.value("ready", false)) {
    KILN_LOG_ERROR("not ready: {} (GET /readyz answers 503)", readiness.value("verdict", ""));
  }

  // --- The spawner: a process of its own (kiln's binary again), started
  // before anything secret is opened, and started again if it dies. No
  // supervisor, pool process or sandbox pid 1 (forks that never exec)
  // inherits the store's fds, mappings or page cache.
  auto spawner = spawner::Spawner::Start(cfg, *host);
  if (!spawner.ok()) return Fail(spawner.error().ToString());

  // --- State: the audit log and keys (the server alone holds them).
  store::OpenOptions store_options;
  store_options.pool_size = cfg.store.pool;
  store_options.key_cache_ms = static_cast<int64_t>(cfg.store.key_cache_s * 1000);
  // A fleet (docs/adr/0020): nodes sharing a PostgreSQL store.
  const bool in_fleet = !cfg.store.url.empty();
  const std::string node_id = !in_fleet                 ? ""
                              : !cfg.fleet.node.empty() ? cfg.fleet.node
                                                        : fleet::NodeIdFromHostname();
  store_options.node_id = node_id;
  auto store = cfg.store.url.empty() ? store::Store::Open(cfg.server.data_dir)
                                     : store::Store::OpenUrl(cfg.store.url, store_options);
  if (!store.ok()) return Fail(store.error().ToString());
  // A shared store's running rows may be other nodes' (the node registry
  // marks a lost node's); SQLite's are all this server's.
  if (auto n = (*store)->dialect() == store::Dialect::kSqlite ? (*store)->MarkInterrupted()
                                                              : Result<int>(0);
      n.ok() && *n > 0) {
    KILN_LOG_WARN("{} execution(s) were running when the server last stopped: marked interrupted",
                  *n);
  }
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  (void)(*store)->Prune(now_ms - int64_t{cfg.server.retention_days} * store::kDayMs);
  auto keys = (*store)->ListKeys();
  if (!keys.ok()) return Fail(keys.error().ToString());
  if (keys->empty()) {
    auto key = (*store)->CreateKey("default");
    if (!key.ok()) return Fail(key.error().ToString());
    std::cerr
        << "kiln: first start: created an API key for tenant 'default' (shown once; more with "
           "`kiln keys create --tenant T --data-dir "
        << cfg.server.data_dir << "`):\n";
    std::cout << key->key << std::endl;
  }

  // From here on there are threads: SIGTERM/SIGINT are taken by sigwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  admission::AdmissionConfig acfg;
  acfg.global_concurrency = cfg.server.concurrency;
  acfg.queue_depth = cfg.server.queue;
  acfg.max_queue_wait =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.server.queue_timeout_s * 1000));
  const auto& d = cfg.Tenant("default");
  acfg.default_tenant = {d.max_concurrent, d.rate_per_s, d.burst};
  for (const auto& [name, t] : cfg.tenants)
    acfg.tenants[name] = {t.max_concurrent, t.rate_per_s, t.burst};
  auto admission = admission::AdmissionController::Create(acfg);
  if (!admission.ok()) return Fail(admission.error().ToString());
  metrics::Metrics metrics;

  // Security events (docs/adr/0015): stored, counted, logged.
  executions::EventThresholds thresholds;
  thresholds.memory_kills_in_a_row = cfg.events.memory_kills_in_a_row;
  thresholds.auth_failures = cfg.events.auth_failures;
  thresholds.auth_window_ms = static_cast<int64_t>(cfg.events.auth_window_s * 1000);
  executions::SecurityEvents events(store->get(), &metrics, thresholds);
  executions::Deps exec_deps;
  exec_deps.events = &events;
  exec_deps.store = store->get();
  exec_deps.admission = admission->get();
  exec_deps.metrics = &metrics;
  exec_deps.store_code = cfg.server.store_code;
  exec_deps.config = &cfg;
  exec_deps.spawner = spawner->get();
  executions::Service executions(exec_deps);
  std::unique_ptr<fleet::Registry> registry;
  if (in_fleet) {
    fleet::Options fo;
    fo.node_id = node_id;
    fo.heartbeat_ms = static_cast<int64_t>(cfg.fleet.heartbeat_s * 1000);
    fo.timeout_ms = static_cast<int64_t>(cfg.fleet.node_timeout_s * 1000);
    fo.address = cfg.fleet.advertise.empty() ? cfg.server.listen : cfg.fleet.advertise;
    // Fleet-wide quotas: each node admits its share of every tenant's limits, recomputed from
    // the registry on each heartbeat (admission::ShareOf; no store round trip per request).
    fo.on_live_nodes = [a = admission->get()](int live) { a->SetNodes(live); };
    registry = std::make_unique<fleet::Registry>(store->get(), fo);
    // Before any request: this node's old running rows, and the registry.
    if (Status st = registry->Start(); !st.ok()) return Fail("fleet: " + st.error().ToString());
  }
  auto node_gone = [&registry](std::string_view node) { return registry->IsGone(node); };
  sessions::Deps session_deps{&cfg, spawner->get(), &executions};
  if (registry) {
    session_deps.node_id = node_id;
    session_deps.node_gone = node_gone;
  }
  sessions::SessionManager session_manager(session_deps);
  session_manager.Start();
  server::Deps deps{&cfg,           store->get(), admission->get(), &metrics,
                    spawner->get(), &executions,  &session_manager, readiness};
  deps.events = &events;
  if (registry) {
    deps.node_id = node_id;
    deps.node_gone = node_gone;
    deps.draining = [&registry] { return registry->draining(); };
  }
  // Quarantines and a lockdown kept from an earlier run apply before the first request.
  admin::Controls controls(admin::Deps{store->get(), &events, &executions, &session_manager, &cfg});
  if (Status st = controls.Load(); !st.ok()) return Fail(st.error().ToString());
  deps.controls = &controls;
  // Quarantine rules and webhooks ([events] in kiln.toml); what an earlier run
  // left in the webhook queue is delivered too.
  admin::Alerts alerts(cfg.events, store->get(), &events, &controls);
  alerts.Start();
  auto server = server::HttpServer::Bind(cfg.server.listen, deps);
  if (!server.ok()) return Fail(server.error().ToString());
  (*server)->Start();
  // One write: the spawner and the warm pool's process log to the same stderr
  // meanwhile, and scripts read this line.
  const std::string listening =
      "kiln: listening on http://" + cfg.server.listen.substr(0, cfg.server.listen.rfind(':')) +
      ":" + std::to_string((*server)->port()) + " (data in " +
      (cfg.store.url.empty() ? cfg.server.data_dir : (*store)->path()) + ")\n";
  std::cerr << listening << std::flush;

  // Retention: prune the audit log hourly.
  std::atomic<bool> done{false};
  std::thread pruner([&] {
    for (int tick = 0; !done; ++tick) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      controls.Refresh();  // `kiln lockdown on|off` writes the store; the server follows
      if (tick % 3600 != 3599) continue;
      const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
      (void)(*store)->Prune(now - int64_t{cfg.server.retention_days} * store::kDayMs);
    }
  });

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cerr << "kiln: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ": draining (grace "
            << cfg.server.shutdown_grace_s << " s)" << std::endl;
  if (registry) {
    // The router sees /readyz fail and sends nothing new; what it already
    // sent is served. Then the usual shutdown.
    registry->SetDraining(true);
    (void)registry->Tick();
    std::this_thread::sleep_for(
        std::chrono::milliseconds(static_cast<int64_t>(cfg.fleet.drain_wait_s * 1000)));
  }
  (*server)->Shutdown(
      std::chrono::milliseconds(static_cast<int64_t>(cfg.server.shutdown_grace_s * 1000)));
  done = true;
  pruner.join();
  server->reset();
  session_manager.Shutdown();
  if (registry) registry->Stop(/*leave=*/true);  // its sessions are gone: others answer 410
  spawner->reset();  // kills the spawner; nothing is left running under it
  std::cerr << "kiln: stopped" << std::endl;
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app, Action* action) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* serve = app.add_subcommand("serve", "Serve the HTTP API");
  serve->add_option("--config", flags->config, "kiln.toml (default: built-in)");
  serve->add_option("--listen", flags->listen,
                    "ADDR:PORT (default: server.listen, 127.0.0.1:8080)");
  serve->add_option("--data-dir", flags->data_dir, "Where the SQLite database lives");
  serve->add_option("--store", flags->store_url,
                    "The PostgreSQL store (postgresql://...) a fleet shares ([store] url)");
  serve->add_option(
      "--node", flags->node,
      "This node's id in the fleet, [a-z0-9-] ([fleet] node; default: the host name)");
  serve->add_option(
      "--advertise", flags->advertise,
      "HOST:PORT the fleet reaches this node at ([fleet] advertise; default: listen)");
  serve->add_flag("--check", flags->check,
                  "Validate the configuration and flags, describe them, and exit (starts nothing)");
  serve->callback([flags, action] { *action = [flags] { return DoServe(*flags); }; });

  // The spawner process of `kiln serve` and `kiln mcp` (spawner::Spawner
  // starts it, and starts it again when it dies): not for people.
  auto server_pid = std::make_shared<int>(0);
  CLI::App* spawner_cmd = app.add_subcommand("spawner", "The server's spawner process (internal)");
  spawner_cmd->group("");  // hidden
  spawner_cmd->add_option("--server-pid", *server_pid, "The server it serves and dies with")
      ->required();
  spawner_cmd->callback([server_pid, action] {
    *action = [server_pid] {
      spawner::RunSpawnerProcess(static_cast<pid_t>(*server_pid));
      return 1;
    };
  });
}

}  // namespace kiln::cli
