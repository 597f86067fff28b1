// kiln mcp: kiln as an MCP server on stdio (docs/mcp.md), for MCP clients that
// start it as a subprocess. With --url it proxies to a running `kiln serve`
// (the key from --api-key, or from the environment variable --api-key-env
// names, KILN_API_KEY by default).
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
#include "mcp/engine.h"
#include "mcp/http_backend.h"
#include "mcp/stdio.h"

namespace kiln::cli {
namespace {

struct McpFlags {
  std::string url;
  std::string api_key;
  std::string api_key_env = "KILN_API_KEY";
  std::string profile;
};

int Fail(const std::string& message, int code) {
  std::cerr << "kiln mcp: " << message << "\n";
  return code;
}

int DoMcp(const McpFlags& f) {
  if (f.url.empty()) {
    return Fail("--url is required for now: kiln mcp proxies to a running `kiln serve` (running sandboxes "
                "locally comes with kiln sessions)",
                kExitUsage);
  }
  std::string key = f.api_key;
  if (key.empty() && !f.api_key_env.empty()) {
    if (const char* v = std::getenv(f.api_key_env.c_str())) key = v;
  }
  if (key.empty()) {
    return Fail("no API key: pass --api-key KEY or set $" + (f.api_key_env.empty() ? "KILN_API_KEY" : f.api_key_env),
                kExitUsage);
  }
  mcp::HttpBackendOptions options;
  options.url = f.url;
  options.api_key = key;
  options.profile = f.profile;
  auto backend = mcp::HttpBackend::Create(options);
  if (!backend.ok()) return Fail(backend.error().message, kExitUsage);

  // The protocol's own descriptors; 0 and 1 point elsewhere from here on.
  UniqueFd in(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3));
  UniqueFd out(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
  if (!in || !out) return Fail("cannot duplicate stdin/stdout", 1);
  if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) return Fail("cannot redirect stdout", 1);
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null) (void)::dup2(null.get(), STDIN_FILENO);

  // SIGTERM/SIGINT/SIGHUP end the loop through a signalfd (before any thread,
  // so every thread inherits the mask).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  UniqueFd stop_fd(::signalfd(-1, &stop, SFD_CLOEXEC));
  if (!stop_fd) return Fail("signalfd failed", 1);

  mcp::Engine engine(std::move(*backend), mcp::EngineOptions{});
  KILN_LOG_INFO("mcp: serving on stdio, proxying to {}", f.url);
  const mcp::StdioEnd end = mcp::RunStdio(engine, in.get(), out.get(), stop_fd.get());
  return end == mcp::StdioEnd::kReadError ? 1 : 0;
}

}  // namespace

void RegisterMcp(CLI::App& app, Action* action) {
  auto flags = std::make_shared<McpFlags>();
  CLI::App* cmd = app.add_subcommand("mcp", "Serve MCP (Model Context Protocol) on stdio, for agents");
  cmd->add_option("--url", flags->url, "A running kiln serve to use, http://HOST:PORT");
  cmd->add_option("--api-key", flags->api_key, "Its API key (visible to other local users in ps: prefer --api-key-env)");
  cmd->add_option("--api-key-env", flags->api_key_env, "The environment variable holding the key (default KILN_API_KEY)");
  cmd->add_option("--profile", flags->profile, "Profile of the sessions (default: the server's)");
  cmd->callback([flags, action] { *action = [flags] { return DoMcp(*flags); }; });
}

}  // namespace kiln::cli
