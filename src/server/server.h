// kiln serve's HTTP API (docs/api.md): Boost.Beast, one thread per connection
// (connections are bounded by server.max_connections; sandboxes by admission
// control), every socket with receive/send timeouts so a slow client cannot
// hold a thread forever. The server never forks: executions go to the
// spawner process.
//
// Request flow of an execute: authenticate (401) -> parse + validate
// (400/422) -> the executions service (src/executions: admission, 429/503
// with Retry-After; audit row "running"; the spawner runs the sandbox; audit
// row finished and committed; metrics) -> reply. A client that disconnects
// cancels its execution. This file is HTTP only: connections, routing,
// rendering, and the one table from errors to HTTP.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "admin/controls.h"
#include "admission/admission.h"
#include "base/result.h"
#include "config/config.h"
#include "executions/service.h"
#include "metrics/metrics.h"
#include "sessions/session_manager.h"
#include "spawner/spawner.h"
#include "store/store.h"

namespace kiln::server {

struct Deps {
  const config::Config* config;
  store::Store* store;
  admission::AdmissionController* admission;
  metrics::Metrics* metrics;
  spawner::Spawner* spawner;
  executions::Service* executions;  // one-shot executions (and their drain)
  sessions::SessionManager* sessions;
  nlohmann::json readiness;  // doctor's verdict at start: {"ready": bool, "layers": [...]}
  executions::SecurityEvents* events = nullptr;  // auth_failures, /v1/admin/events (optional)
  admin::Controls* controls = nullptr;           // quarantine, lockdown, /v1/admin/* (optional)
  // In a fleet (docs/adr/0020): MCP session ids carry node_id; node_gone
  // says whether another node is gone; while draining() /readyz is 503.
  std::string node_id{};
  std::function<bool(std::string_view node)> node_gone{};
  std::function<bool()> draining{};
};

// The routes the server answers, "METHOD PATH" with {id}/{path} placeholders
// (checked against docs/openapi.json).
const std::vector<std::string>& Routes();
// The OpenAPI document served at /openapi.json (docs/openapi.json, built in).
std::string_view OpenApiText();

class HttpServer final {
 public:
  // Binds `listen` ("127.0.0.1:8080"; port 0 = any free port).
  static Result<std::unique_ptr<HttpServer>> Bind(const std::string& listen, Deps deps);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const { return port_; }
  // Starts the accept thread.
  void Start();
  // Graceful: stop accepting, fail queued requests, give running executions
  // `grace` to finish, then cancel them (their sandboxes are killed and their
  // audit rows say "cancelled"), then wait for every connection thread.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace kiln::server
