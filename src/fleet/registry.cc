#include "fleet/registry.h"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <utility>

#include "base/log.h"
#include "store/time_format.h"

namespace kiln::fleet {

std::string NodeIdFromHostname() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "node";
  std::string out;
  for (const char* p = host; *p != '\0' && out.size() < 32; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    out += std::isalnum(c) ? static_cast<char>(std::tolower(c)) : '-';
  }
  return out.empty() ? "node" : out;
}

int CountLiveNodes(const std::map<std::string, int64_t>& beats, std::string_view self,
                   int64_t now_ms, int64_t timeout_ms) {
  int live = 1;  // self
  for (const auto& [id, beat] : beats) {
    if (id != self && beat >= now_ms - timeout_ms) ++live;
  }
  return live;
}

Registry::Registry(store::Store* store, Options options)
    : store_(store), options_(std::move(options)) {}

Registry::~Registry() { Stop(/*leave=*/false); }

int64_t Registry::Now() const { return options_.now_ms ? options_.now_ms() : store::NowMs(); }

Status Registry::Tick() {
  KILN_TRY(store_->Heartbeat(store::NodeRow{options_.node_id, options_.address, started_ms_, 0,
                                            draining_.load(), std::nullopt}));
  KILN_ASSIGN_OR_RETURN(auto lost, store_->ReapLostNodes(options_.timeout_ms));
  for (const auto& id : lost) {
    KILN_LOG_WARN(
        "fleet: node {} is lost (no heartbeat for {} ms): its running executions are "
        "marked interrupted",
        id, options_.timeout_ms);
  }
  KILN_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
  std::map<std::string, int64_t> beats;
  for (const auto& n : nodes) beats[n.id] = n.heartbeat_ms;
  const int live = CountLiveNodes(beats, options_.node_id, Now(), options_.timeout_ms);
  {
    std::lock_guard lock(mu_);
    beats_ = std::move(beats);
    have_snapshot_ = true;
  }
  if (options_.on_live_nodes) options_.on_live_nodes(live);
  return OkStatus();
}

Status Registry::Start() {
  started_ms_ = Now();
  auto own = store_->MarkNodeInterrupted(options_.node_id,
                                         "the server stopped before the execution finished");
  if (!own.ok()) return std::move(own).error();
  if (*own > 0) {
    KILN_LOG_WARN(
        "{} execution(s) of node {} were running when it last stopped: marked "
        "interrupted",
        *own, options_.node_id);
  }
  KILN_TRY(Tick());
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(options_.heartbeat_ms));
      if (stop_) break;
      lock.unlock();
      // A failed beat (the store unreachable) is retried at the next one; a
      // node that cannot beat for timeout_ms is lost to the others.
      if (Status s = Tick(); !s.ok()) KILN_LOG_WARN("fleet: heartbeat: {}", s.error().ToString());
      lock.lock();
    }
  });
  return OkStatus();
}

void Registry::Stop(bool leave) {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (leave) {
    if (Status s = store_->RemoveNode(options_.node_id); !s.ok()) {
      KILN_LOG_WARN("fleet: leaving the registry: {}", s.error().ToString());
    }
  }
}

void Registry::SetDraining(bool draining) { draining_ = draining; }

int Registry::LiveNodes() const {
  std::lock_guard lock(mu_);
  return CountLiveNodes(beats_, options_.node_id, Now(), options_.timeout_ms);
}

bool Registry::IsGone(std::string_view node) const {
  if (node == options_.node_id) return false;
  std::lock_guard lock(mu_);
  if (!have_snapshot_) return false;  // nothing known yet: never a false "lost"
  auto it = beats_.find(std::string(node));
  if (it == beats_.end()) return true;
  return it->second < Now() - options_.timeout_ms;
}

}  // namespace kiln::fleet
