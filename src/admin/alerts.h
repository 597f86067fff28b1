// What the server does with its security events besides storing them
// (docs/api.md, "Security events"; docs/adr/0015): the quarantine rules of
// kiln.toml ([[events.quarantine]]: N events of given kinds from one tenant
// within a window quarantine it) and the webhooks ([[events.webhook]]: each
// event POSTed as JSON, signed with HMAC-SHA256, from a durable queue in the
// database, retried with backoff, at most max_per_minute of one kind).
//
// A listener of SecurityEvents; one thread delivers the queue. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "admin/controls.h"
#include "config/config.h"
#include "executions/security_events.h"
#include "store/store.h"

namespace kiln::admin {

// A delivery given up after this many attempts (about 2.5 hours of backoff).
inline constexpr int kMaxWebhookAttempts = 30;
inline constexpr int64_t kMaxWebhookBackoffMs = 300'000;

// The signature of a webhook body: "sha256=" + hex HMAC-SHA256(secret,
// timestamp + "." + body), sent as X-Kiln-Signature with X-Kiln-Timestamp.
std::string WebhookSignature(const std::string& secret, const std::string& timestamp,
                             const std::string& body);

// One POST; the HTTP status (an error: no answer). Exposed for tests.
Result<int> PostJson(const std::string& url, const std::string& body,
                     const std::vector<std::pair<std::string, std::string>>& headers,
                     double timeout_s);

class Alerts final {
 public:
  Alerts(const config::EventsConfig& config, store::Store* store,
         executions::SecurityEvents* events, Controls* controls);
  ~Alerts();  // stops the delivery thread; what is queued stays queued
  Alerts(const Alerts&) = delete;
  Alerts& operator=(const Alerts&) = delete;

  // Subscribes and starts delivering (what an earlier run left queued too).
  void Start();

 private:
  void OnEvent(const store::EventRow& row);
  void Deliver();
  bool DeliverOne(const store::WebhookDelivery& d);

  const config::EventsConfig config_;
  store::Store* store_;
  executions::SecurityEvents* events_;
  Controls* controls_;
  int handle_ = 0;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  // (rule, tenant) -> times of its matching events within the window.
  std::map<std::pair<std::string, std::string>, std::deque<int64_t>> seen_;
  // (webhook, kind) -> times of the events queued in the last minute.
  std::map<std::pair<std::string, std::string>, std::deque<int64_t>> rate_;
  std::thread sender_;
};

}  // namespace kiln::admin
