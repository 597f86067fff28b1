// kiln::fleet: this node's place in a fleet of kiln nodes sharing one
// PostgreSQL store (docs/adr/0020). A heartbeat thread writes the node's row
// in the store's node registry every `heartbeat_ms`, claims nodes whose
// heartbeat is older than `timeout_ms` (their running audit rows become
// "interrupted": nothing waits on a dead node), and keeps a snapshot of the
// registry in memory, so the request path asks IsGone() without a store
// round trip.
//
// Threads: every method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "base/result.h"
#include "fleet/node_id.h"
#include "store/store.h"

namespace kiln::fleet {

struct Options {
  std::string node_id;  // [a-z0-9-], 1-32 chars (IsValidNodeId)
  std::string address;  // host:port the node serves on
  int64_t heartbeat_ms = 2000;
  int64_t timeout_ms = 10'000;      // a node silent this long is lost
  std::function<int64_t()> now_ms;  // tests fake it (the store's clock must agree)
  // Called after each round with LiveNodes() (the server hands it to admission: each node
  // enforces its share of every tenant's limits, docs/adr/0020).
  std::function<void(int live_nodes)> on_live_nodes;
};

// The nodes that share the fleet's quotas: those whose heartbeat is within `timeout_ms` of
// `now_ms` (draining ones included: they still run what they took), and `self` whether or not
// the snapshot has it yet. At least 1.
int CountLiveNodes(const std::map<std::string, int64_t>& beats, std::string_view self,
                   int64_t now_ms, int64_t timeout_ms);

// The host name made into a node id (lower case, other characters '-', cut
// to 32), "node" if nothing is left.
std::string NodeIdFromHostname();

class Registry final {
 public:
  Registry(store::Store* store, Options options);
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry();

  // One round now: beat, reap lost nodes, refresh the snapshot. The thread
  // calls it every heartbeat_ms; tests call it directly.
  Status Tick();
  // At start: the rows this node left "running" when it last stopped (same
  // node id) become "interrupted"; then the first Tick() and the thread.
  Status Start();
  // Stops the thread; `leave`: delete this node's row (a clean shutdown, so
  // its sessions are gone at once instead of at the timeout).
  void Stop(bool leave);
  // Draining: written with the next beat (the router's health check is
  // /readyz, which answers 503 while draining).
  void SetDraining(bool draining);
  bool draining() const { return draining_; }

  // Whether `node` is gone: not in the registry, or its heartbeat older than
  // the timeout, as of the last snapshot. This node is never gone.
  bool IsGone(std::string_view node) const;
  // CountLiveNodes() of the last snapshot (1 before the first).
  int LiveNodes() const;
  const std::string& node_id() const { return options_.node_id; }

 private:
  int64_t Now() const;

  store::Store* const store_;
  const Options options_;
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                     // guarded by mu_
  std::map<std::string, int64_t> beats_;  // node -> heartbeat_ms; guarded by mu_
  bool have_snapshot_ = false;            // guarded by mu_
  int64_t started_ms_ = 0;
  std::thread thread_;
};

}  // namespace kiln::fleet
