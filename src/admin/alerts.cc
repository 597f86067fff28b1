#include "admin/alerts.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>

#include "base/log.h"
#include "store/api_key.h"
#include "store/time_format.h"

namespace kiln::admin {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct Url {
  std::string host;
  std::string port = "80";
  std::string target = "/";
};

std::optional<Url> ParseUrl(const std::string& url) {
  static const std::string kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) return std::nullopt;
  const std::string rest = url.substr(kScheme.size());
  const auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  Url u;
  if (slash != std::string::npos) u.target = rest.substr(slash);
  if (!authority.empty() && authority.front() == '[') {  // [::1]:8080
    const auto close = authority.find(']');
    if (close == std::string::npos) return std::nullopt;
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      u.port = authority.substr(close + 2);
  } else if (const auto colon = authority.rfind(':'); colon != std::string::npos) {
    u.host = authority.substr(0, colon);
    u.port = authority.substr(colon + 1);
  } else {
    u.host = authority;
  }
  if (u.host.empty() || u.port.empty()) return std::nullopt;
  return u;
}

}  // namespace

std::string WebhookSignature(const std::string& secret, const std::string& timestamp,
                             const std::string& body) {
  auto mac = store::HmacSha256Hex(secret, timestamp + "." + body);
  return mac.ok() ? "sha256=" + *mac : std::string();
}

Result<int> PostJson(const std::string& url, const std::string& body,
                     const std::vector<std::pair<std::string, std::string>>& headers,
                     double timeout_s) {
  auto u = ParseUrl(url);
  if (!u) return InvalidArgument("not an http:// url: " + url);
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    asio::ip::tcp::socket socket(io);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(u->host, u->port, ec);
    if (ec) return MakeError(Code::kUnavailable, "resolve " + u->host + ": " + ec.message());
    asio::connect(socket, endpoints, ec);
    if (ec) return MakeError(Code::kUnavailable, "connect " + url + ": " + ec.message());
    // Every read and write must progress within the timeout.
    timeval tv{static_cast<time_t>(timeout_s),
               static_cast<suseconds_t>((timeout_s - std::floor(timeout_s)) * 1e6)};
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    http::request<http::string_body> req{http::verb::post, u->target, 11};
    req.set(http::field::host, u->host + ":" + u->port);
    req.set(http::field::user_agent, "kiln");
    req.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    req.keep_alive(false);
    http::write(socket, req, ec);
    if (ec) return MakeError(Code::kUnavailable, "send to " + url + ": " + ec.message());
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1 << 20);
    http::read(socket, buffer, parser, ec);
    if (ec) return MakeError(Code::kUnavailable, "answer from " + url + ": " + ec.message());
    socket.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    return static_cast<int>(parser.get().result_int());
  } catch (const std::exception& e) {
    return MakeError(Code::kUnavailable, std::string("post to ") + url + ": " + e.what());
  }
}

Alerts::Alerts(const config::EventsConfig& config, store::Store* store,
               executions::SecurityEvents* events, Controls* controls)
    : config_(config), store_(store), events_(events), controls_(controls) {}

Alerts::~Alerts() {
  if (handle_ != 0) events_->Unsubscribe(handle_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (sender_.joinable()) sender_.join();
}

void Alerts::Start() {
  if (config_.quarantine.empty() && config_.webhooks.empty()) return;
  handle_ = events_->Subscribe([this](const store::EventRow& row) { OnEvent(row); });
  if (!config_.webhooks.empty()) sender_ = std::thread([this] { Deliver(); });
}

void Alerts::OnEvent(const store::EventRow& row) {
  const int64_t now = store::NowMs();
  // Quarantine rules: decided under the lock, carried out without it (the
  // quarantine records an event of its own, which comes back here).
  std::vector<std::pair<const config::QuarantineRule*, int>> fire;
  std::vector<store::WebhookDelivery> queue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!row.tenant.empty()) {
      for (const auto& rule : config_.quarantine) {
        if (std::find(rule.kinds.begin(), rule.kinds.end(), row.kind) == rule.kinds.end()) continue;
        auto& times = seen_[{rule.name, row.tenant}];
        times.push_back(row.at_ms);
        const int64_t window = static_cast<int64_t>(rule.window_s * 1000);
        while (!times.empty() && times.front() < row.at_ms - window) times.pop_front();
        if (static_cast<int>(times.size()) >= rule.count) {
          fire.emplace_back(&rule, static_cast<int>(times.size()));
          times.clear();
        }
      }
    }
    for (const auto& w : config_.webhooks) {
      if (!w.kinds.empty() &&
          std::find(w.kinds.begin(), w.kinds.end(), row.kind) == w.kinds.end()) {
        continue;
      }
      auto& sent = rate_[{w.name, row.kind}];
      while (!sent.empty() && sent.front() <= now - 60'000) sent.pop_front();
      if (static_cast<int>(sent.size()) >= w.max_per_minute) {
        KILN_LOG_WARN("webhook {}: event {} ({}) not sent: {} {} events in the last minute", w.name,
                      row.id, row.kind, w.max_per_minute, row.kind);
        continue;
      }
      sent.push_back(now);
      store::WebhookDelivery d;
      d.webhook = w.name;
      d.event_id = row.id;
      d.kind = row.kind;
      d.body =
          executions::EventJson(row).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      d.created_ms = now;
      d.next_ms = now;
      queue.push_back(std::move(d));
    }
  }
  for (const auto& d : queue) {
    if (Status st = store_->EnqueueWebhook(d); !st.ok()) {
      KILN_LOG_ERROR("webhook {}: cannot queue event {}: {}", d.webhook, d.event_id,
                     st.error().ToString());
    }
  }
  if (!queue.empty()) wake_.notify_all();
  for (const auto& [rule, n] : fire) {
    if (controls_ == nullptr || controls_->QuarantineReason(row.tenant)) continue;
    const std::string reason = "rule " + rule->name + ": " + std::to_string(n) +
                               " events of its kinds within " +
                               std::to_string(static_cast<int64_t>(rule->window_s)) + " s";
    auto q = controls_->Quarantine(row.tenant, reason, Actor{"", "", "rule " + rule->name});
    if (!q.ok()) KILN_LOG_ERROR("quarantine rule {}: {}", rule->name, q.error().ToString());
  }
}

bool Alerts::DeliverOne(const store::WebhookDelivery& d) {
  const config::WebhookConfig* w = nullptr;
  for (const auto& c : config_.webhooks) {
    if (c.name == d.webhook) w = &c;
  }
  if (w == nullptr) {
    KILN_LOG_WARN("webhook {}: no longer configured; event {} dropped", d.webhook, d.event_id);
    (void)store_->WebhookDone(d.id);
    return true;
  }
  const std::string timestamp = std::to_string(store::NowMs() / 1000);
  auto status = PostJson(w->url, d.body,
                         {{"X-Kiln-Event", d.kind},
                          {"X-Kiln-Delivery", std::to_string(d.id)},
                          {"X-Kiln-Timestamp", timestamp},
                          {"X-Kiln-Signature", WebhookSignature(w->secret, timestamp, d.body)}},
                         5.0);
  if (status.ok() && *status >= 200 && *status < 300) {
    (void)store_->WebhookDone(d.id);
    return true;
  }
  const std::string error =
      status.ok() ? "HTTP " + std::to_string(*status) : status.error().message;
  const int attempts = d.attempts + 1;
  if (attempts >= kMaxWebhookAttempts) {
    KILN_LOG_ERROR("webhook {}: event {} given up after {} attempts: {}", d.webhook, d.event_id,
                   attempts, error);
    (void)store_->WebhookDone(d.id);
    return false;
  }
  const int64_t backoff =
      std::min<int64_t>(kMaxWebhookBackoffMs, int64_t{1000} << std::min(attempts - 1, 20));
  KILN_LOG_WARN("webhook {}: event {} attempt {} failed ({}); next in {} ms", d.webhook, d.event_id,
                attempts, error, backoff);
  (void)store_->WebhookRetry(d.id, attempts, store::NowMs() + backoff, error);
  return false;
}

void Alerts::Deliver() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
    }
    auto due = store_->DueWebhooks(store::NowMs(), 20);
    bool all_sent = true;
    if (due.ok()) {
      for (const auto& d : *due) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_) return;
        }
        all_sent = DeliverOne(d) && all_sent;
      }
    }
    // More may be due at once: go on without waiting while the batch was full.
    if (due.ok() && due->size() == 20 && all_sent) continue;
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_; });
    if (stop_) return;
  }
}

}  // namespace kiln::admin
