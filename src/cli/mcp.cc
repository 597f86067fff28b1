// kiln mcp: kiln as an MCP server on stdio (docs/mcp.md), for MCP clients that
// start it as a subprocess. Without --url it runs sandboxes itself, as
// `kiln serve` does: the spawner is started first (posix_spawn, restarted if
// it dies: ADR 0008), then the session manager and the stdio loop. With --url
// it proxies to a running `kiln serve` (the key from --api-key, or from the
// environment variable --api-key-env names, KILN_API_KEY by default).
//
// stdout carries JSON-RPC lines only: the protocol gets a private copy of the
// descriptor and fd 1 becomes a second stderr, so that nothing else in the
// process (a library, a forked helper) can write into the stream. Logs go to
// stderr (KILN_LOG).
#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "base/log.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "config/config.h"
#include "executions/service.h"
#include "mcp/engine.h"
#include "mcp/http_backend.h"
#include "mcp/local_backend.h"
#include "mcp/stdio.h"
#include "sessions/session_manager.h"
#include "spawner/spawner.h"
#include "supervisor/host.h"
#include "supervisor/sandbox.h"

namespace kiln::cli {
namespace {

struct McpFlags {
  std::string url;
  std::string api_key;
  std::string api_key_env = "KILN_API_KEY";
  std::string profile;
  std::string config;
};

int Fail(const std::string& message, int code) {
  std::cerr << "kiln mcp: " << message << "\n";
  return code;
}

// The protocol's own copies of stdin and stdout (close-on-exec); fd 0 becomes
// /dev/null and fd 1 a second stderr, so that nothing else in this process or
// its children can write into the JSON-RPC stream.
bool TakeStdio(UniqueFd* in, UniqueFd* out) {
  in->Reset(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3));
  out->Reset(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
  if (!*in || !*out) return false;
  if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) return false;
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null) (void)::dup2(null.get(), STDIN_FILENO);
  return true;
}

// SIGTERM/SIGINT/SIGHUP as a readable fd that ends the loop. Blocked before
// the first thread, so every thread inherits the mask.
UniqueFd StopSignals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  return UniqueFd(::signalfd(-1, &stop, SFD_CLOEXEC));
}

int Serve(mcp::Engine& engine, const UniqueFd& in, const UniqueFd& out, const UniqueFd& stop) {
  const mcp::StdioEnd end = mcp::RunStdio(engine, in.get(), out.get(), stop.get());
  return end == mcp::StdioEnd::kReadError ? 1 : 0;
}

int DoRemote(const McpFlags& f) {
  std::string key = f.api_key;
  if (key.empty() && !f.api_key_env.empty()) {
    if (const char* v = std::getenv(f.api_key_env.c_str())) key = v;
  }
  if (key.empty()) {
    return Fail("no API key: pass --api-key KEY or set $" +
                    (f.api_key_env.empty() ? "KILN_API_KEY" : f.api_key_env),
                kExitUsage);
  }
  if (!f.config.empty())
    return Fail("--config applies without --url only (the server has its own)", kExitUsage);
  mcp::HttpBackendOptions options;
  options.url = f.url;
  options.api_key = key;
  options.profile = f.profile;
  auto backend = mcp::HttpBackend::Create(options);
  if (!backend.ok()) return Fail(backend.error().message, kExitUsage);
  UniqueFd in, out;
  if (!TakeStdio(&in, &out)) return Fail("cannot take over stdin/stdout", 1);
  UniqueFd stop = StopSignals();
  if (!stop) return Fail("signalfd failed", 1);
  mcp::Engine engine(std::move(*backend), mcp::EngineOptions{});
  KILN_LOG_INFO("mcp: serving on stdio, proxying to {}", f.url);
  return Serve(engine, in, out, stop);
}

int DoLocal(const McpFlags& f) {
  auto loaded = config::LoadConfigOrBuiltin(f.config);
  if (!loaded.ok()) return Fail("--config: " + loaded.error().message, kExitUsage);
  config::Config cfg = std::move(*loaded);
  const std::string profile_name = f.profile.empty() ? cfg.server.default_profile : f.profile;
  auto profile = cfg.Find(profile_name);
  if (!profile.ok()) return Fail("--" + profile.error().message, kExitUsage);
  const std::string limits = mcp::LimitsText(**profile);

  UniqueFd in, out;
  if (!TakeStdio(&in, &out)) return Fail("cannot take over stdin/stdout", 1);
  // Everything that forks, before the first thread (ADR 0008).
  auto host = supervisor::LoadHostContext();
  if (!host.ok()) return Fail(host.error().ToString(), kExitRefused);
  if (Status s = supervisor::EnsureFontCache(*host); !s.ok()) {
    KILN_LOG_WARN("no matplotlib font cache: {}", s.error().ToString());
  }
  auto spawner = spawner::Spawner::Start(cfg, *host);
  if (!spawner.ok()) return Fail(spawner.error().ToString(), kExitRefused);
  UniqueFd stop = StopSignals();
  if (!stop) return Fail("signalfd failed", 1);

  int code = 0;
  {
    // Locally there is no audit log, admission or /metrics: cells only run,
    // their output through the profile's output audit.
    executions::Deps exec_deps;
    exec_deps.config = &cfg;
    executions::Service executions(exec_deps);
    sessions::SessionManager manager(sessions::Deps{&cfg, spawner->get(), &executions});
    manager.Start();
    sessions::SessionOptions options;
    options.profile = profile_name;
    mcp::EngineOptions engine_options;
    engine_options.limits_text = limits;
    mcp::Engine engine(std::make_unique<mcp::LocalBackend>(
                           &manager, sessions::Caller{"local", "", "stdio"}, options),
                       engine_options);
    KILN_LOG_INFO("mcp: serving on stdio, sandboxes run here (profile {})", profile_name);
    code = Serve(engine, in, out, stop);  // ends the engine: its kiln session is deleted
    manager.Shutdown();
  }
  spawner->reset();  // kills the spawner; nothing is left running under it
  return code;
}

int DoMcp(const McpFlags& f) {
  if (!f.url.empty()) return DoRemote(f);
  if (!f.api_key.empty())
    return Fail("--api-key needs --url (locally there is no key)", kExitUsage);
  return DoLocal(f);
}

}  // namespace

void RegisterMcp(CLI::App& app, Action* action) {
  auto flags = std::make_shared<McpFlags>();
  CLI::App* cmd =
      app.add_subcommand("mcp", "Serve MCP (Model Context Protocol) on stdio, for agents");
  cmd->add_option("--url", flags->url,
                  "A running kiln serve to use, http://HOST:PORT (default: run sandboxes here)");
  cmd->add_option("--config", flags->config, "kiln.toml, without --url (default: built-in)");
  cmd->add_option("--api-key", flags->api_key,
                  "Its API key (visible to other local users in ps: prefer --api-key-env)");
  cmd->add_option("--api-key-env", flags->api_key_env,
                  "The environment variable holding the key (default KILN_API_KEY)");
  cmd->add_option("--profile", flags->profile,
                  "Profile of the sessions (default: the config's default_profile)");
  cmd->callback([flags, action] { *action = [flags] { return DoMcp(*flags); }; });
}

}  // namespace kiln::cli
