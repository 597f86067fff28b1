// Quarantine rules and webhooks with the real store, events, executions
// service and controls; webhooks to a loopback receiver of the test's own.
#include "admin/alerts.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "store/time_format.h"

namespace kiln::admin {
namespace {

using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-alerts-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Accepts connections on 127.0.0.1 and answers each request with `status`,
// keeping what it received.
class Receiver {
 public:
  explicit Receiver(int status) : status_(status) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, static_cast<sockaddr*>(static_cast<void*>(&a)), sizeof a) != 0 ||
        ::listen(fd_, 16) != 0)
      std::abort();
    socklen_t len = sizeof a;
    ::getsockname(fd_, static_cast<sockaddr*>(static_cast<void*>(&a)), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~Receiver() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string raw;
      char buf[4096];
      for (;;) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 2000) <= 0) break;
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        raw.append(buf, static_cast<size_t>(n));
        const auto head = raw.find("\r\n\r\n");
        if (head == std::string::npos) continue;
        const auto cl = raw.find("Content-Length: ");
        const size_t len = cl == std::string::npos ? 0 : std::stoul(raw.substr(cl + 16));
        if (raw.size() >= head + 4 + len) break;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(raw);
      }
      const std::string answer = "HTTP/1.1 " + std::to_string(status_) +
                                 " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)!::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  int status_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

class AlertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::Store::Open(tmp_.path());
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    store_ = std::move(*s);
    events_ = std::make_unique<executions::SecurityEvents>(store_.get(), nullptr);
    executions::Deps deps;
    deps.store = store_.get();
    service_ = std::make_unique<executions::Service>(deps);
    controls_ =
        std::make_unique<Controls>(Deps{store_.get(), events_.get(), service_.get(), nullptr});
    ASSERT_TRUE(controls_->Load().ok());
  }

  void Record(executions::EventKind kind, const std::string& tenant) {
    executions::SecurityEvent e;
    e.kind = kind;
    e.tenant = tenant;
    e.detail = "test";
    events_->Record(e);
  }

  template <typename Pred>
  static bool WaitFor(Pred pred, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return pred();
  }

  TempDir tmp_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<executions::SecurityEvents> events_;
  std::unique_ptr<executions::Service> service_;
  std::unique_ptr<Controls> controls_;
};

TEST(WebhookSignatureTest, IsHmacSha256OfTimestampDotBody) {
  EXPECT_EQ(WebhookSignature("0123456789abcdef-secret", "1700000000", "{\"kind\":\"lockdown\"}"),
            "sha256=c052d2f41e2dd4a1436fea2c3aedaf504a99186b4d6043ef974f27728de36271");
}

TEST_F(AlertsTest, ARuleQuarantinesATenantAtItsCountWithinItsWindow) {
  config::EventsConfig cfg;
  cfg.quarantine.push_back({"escapes", {"protocol_error", "seccomp_kill"}, 3, 600});
  Alerts alerts(cfg, store_.get(), events_.get(), controls_.get());
  alerts.Start();
  Record(executions::EventKind::kProtocolError, "acme");
  Record(executions::EventKind::kSeccompKill, "acme");
  Record(executions::EventKind::kProtocolError, "other");   // another tenant's
  Record(executions::EventKind::kImportViolation, "acme");  // another kind
  EXPECT_FALSE(controls_->QuarantineReason("acme").has_value());
  Record(executions::EventKind::kProtocolError, "acme");
  const auto reason = controls_->QuarantineReason("acme");
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("rule escapes: 3 events"), std::string::npos) << *reason;
  EXPECT_FALSE(controls_->QuarantineReason("other").has_value());
  store::EventQuery q;
  q.kind = "tenant_quarantined";
  auto rows = store_->QueryEvents(q);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_NE((*rows)[0].detail.find("by rule escapes"), std::string::npos) << (*rows)[0].detail;
}

TEST_F(AlertsTest, WebhooksGetSignedEventsAndRetryUntilTheReceiverAnswers) {
  auto down = std::make_unique<Receiver>(503);
  config::EventsConfig cfg;
  cfg.webhooks.push_back({"ops", down->url(), "0123456789abcdef-secret", {}, 10});
  {
    Alerts alerts(cfg, store_.get(), events_.get(), controls_.get());
    alerts.Start();
    Record(executions::EventKind::kLockdown, "");
    ASSERT_TRUE(WaitFor([&] { return !down->requests().empty(); }, 5s));
    // Refused: still queued, with its attempt counted.
    ASSERT_TRUE(WaitFor(
        [&] {
          auto due = store_->DueWebhooks(store::NowMs() + 3'600'000, 10);
          return due.ok() && due->size() == 1 && (*due)[0].attempts >= 1;
        },
        5s));
  }
  // A new run (as after a restart) delivers what was queued, once it is due.
  Receiver up(200);
  cfg.webhooks[0].url = up.url();
  auto pending = store_->DueWebhooks(store::NowMs() + 3'600'000, 10);
  ASSERT_TRUE(pending.ok() && pending->size() == 1);
  ASSERT_TRUE(store_->WebhookRetry((*pending)[0].id, 1, 0, "test: due now").ok());
  Alerts again(cfg, store_.get(), events_.get(), controls_.get());
  again.Start();
  ASSERT_TRUE(WaitFor([&] { return !up.requests().empty(); }, 5s));
  ASSERT_TRUE(WaitFor([&] { return *store_->WebhookQueued() == 0; }, 5s));
  const std::string req = up.requests()[0];
  EXPECT_EQ(req.rfind("POST /hook HTTP/1.1\r\n", 0), 0u) << req;
  EXPECT_NE(req.find("X-Kiln-Event: lockdown"), std::string::npos) << req;
  const auto ts_at = req.find("X-Kiln-Timestamp: ");
  ASSERT_NE(ts_at, std::string::npos);
  const std::string ts = req.substr(ts_at + 18, req.find("\r\n", ts_at) - ts_at - 18);
  const std::string body = req.substr(req.find("\r\n\r\n") + 4);
  EXPECT_NE(body.find("\"kind\":\"lockdown\""), std::string::npos) << body;
  EXPECT_NE(req.find("X-Kiln-Signature: " + WebhookSignature("0123456789abcdef-secret", ts, body)),
            std::string::npos)
      << req;
}

TEST_F(AlertsTest, WebhooksAreRateLimitedPerKind) {
  Receiver up(200);
  config::EventsConfig cfg;
  cfg.webhooks.push_back({"ops", up.url(), "0123456789abcdef-secret", {"protocol_error"}, 2});
  Alerts alerts(cfg, store_.get(), events_.get(), controls_.get());
  alerts.Start();
  for (int i = 0; i < 5; ++i) Record(executions::EventKind::kProtocolError, "acme");
  Record(executions::EventKind::kSeccompKill, "acme");  // not one of its kinds
  ASSERT_TRUE(WaitFor([&] { return up.requests().size() >= 2; }, 5s));
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(up.requests().size(), 2u);
}

}  // namespace
}  // namespace kiln::admin
