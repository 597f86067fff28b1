// Integration tier: the [events] of kiln.toml through a real `kiln serve`:
// a quarantine rule fired by real import violations in real sandboxes, and a
// webhook that receives signed events on a loopback receiver started here,
// including those queued while it was down and across a server restart.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"
#include "testlib/kiln_server.h"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kSecret = "test-webhook-secret-0123456789";

std::string HmacHex(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[out[i] >> 4];
    hex += kHex[out[i] & 15];
  }
  return hex;
}

// A loopback HTTP receiver on a given port: answers 200 and keeps each request.
class Receiver {
 public:
  explicit Receiver(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0;
    if (ok_) thread_ = std::thread([this] { Loop(); });
  }
  ~Receiver() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  bool ok() const { return ok_; }
  // Each request: its headers (raw) and body.
  std::vector<std::pair<std::string, std::string>> requests() {
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
      char buf[8192];
      size_t head = std::string::npos, len = 0;
      for (;;) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 3000) <= 0) break;
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        raw.append(buf, static_cast<size_t>(n));
        head = raw.find("\r\n\r\n");
        if (head == std::string::npos) continue;
        const auto cl = raw.find("Content-Length: ");
        len = cl == std::string::npos ? 0 : std::stoul(raw.substr(cl + 16));
        if (raw.size() >= head + 4 + len) break;
      }
      if (head != std::string::npos) {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.emplace_back(raw.substr(0, head), raw.substr(head + 4, len));
      }
      static const std::string kOk =
          "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)!::send(c, kOk.data(), kOk.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  int fd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> requests_;
  std::thread thread_;
};

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string Header(const std::string& head, const std::string& name) {
  const auto at = head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  const auto start = at + 2 + name.size() + 2;
  return head.substr(start, head.find("\r\n", start) - start);
}

class Alerts : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    port_ = FreePort();
    data_ = dir_.path() + "/data";
    config_ = dir_.path() + "/kiln.toml";
    WriteFile(config_, R"TOML(
[server]
concurrency = 2
shutdown_grace = "5s"

[tenants.default]
rate = 1000
burst = 1000

[profiles.default]
interpreter = "/usr/bin/python3"
import_policy = "denylist"
modules = ["socket"]

[[events.quarantine]]
name = "imports"
kinds = ["import_violation"]
count = 3
window = "10m"

[[events.webhook]]
name = "ops"
url = "http://127.0.0.1:)TOML" +
                           std::to_string(port_) +
                           R"TOML(/hook"
secret = ")TOML" + kSecret +
                           R"TOML("
kinds = ["import_violation", "tenant_quarantined"]
)TOML");
    Start("first");
    key_ = Trim(server_->Stdout());
  }

  void Start(const std::string& tag) {
    server_ = std::make_unique<KilnServer>();
    std::string why;
    ASSERT_TRUE(server_->Start(data_, config_, tag, &why)) << why;
  }

  json Violate() {
    const HttpResponse r = server_->Execute(key_, {{"code", "import socket"}}, 120s);
    EXPECT_EQ(r.status, 200) << r.Describe();
    return Parse(r);
  }

  // Checks one received request's signature; its event.
  static json Verified(const std::pair<std::string, std::string>& req) {
    const std::string ts = Header(req.first, "X-Kiln-Timestamp");
    EXPECT_FALSE(ts.empty()) << req.first;
    EXPECT_EQ(Header(req.first, "X-Kiln-Signature"),
              "sha256=" + HmacHex(kSecret, ts + "." + req.second))
        << req.first;
    EXPECT_EQ(req.first.rfind("POST /hook HTTP/1.1", 0), 0u) << req.first;
    return json::parse(req.second, nullptr, false);
  }

  TempDir dir_;
  uint16_t port_ = 0;
  std::string data_, config_, key_;
  std::unique_ptr<KilnServer> server_;
};

TEST_F(Alerts, WebhookEventsQueuedWhileTheReceiverIsDownArriveAfterARestart) {
  // The receiver is down: the event waits in the database's queue.
  const json first = Violate();
  ASSERT_EQ(first["status"], "policy_violation") << first.dump();
  std::this_thread::sleep_for(1500ms);  // one refused attempt at least
  ASSERT_EQ(server_->Terminate(20s).code, 0);
  Start("second");
  Receiver receiver(port_);
  ASSERT_TRUE(receiver.ok()) << "port " << port_ << " was taken meanwhile";
  const json second = Violate();
  ASSERT_TRUE(WaitFor([&] { return receiver.requests().size() >= 2; }, 30s))
      << receiver.requests().size() << " requests";
  std::set<std::string> executions;
  for (const auto& req : receiver.requests()) {
    const json e = Verified(req);
    EXPECT_EQ(e["kind"], "import_violation") << req.second;
    executions.insert(e.value("execution_id", ""));
  }
  EXPECT_EQ(executions, (std::set<std::string>{first.value("id", ""), second.value("id", "")}));
}

TEST_F(Alerts, ARuleQuarantinesTheTenantAndAnAdminReleasesIt) {
  Receiver receiver(port_);
  ASSERT_TRUE(receiver.ok());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Violate()["status"], "policy_violation");
  const HttpResponse refused = server_->Execute(key_, {{"code", "print(1)"}});
  ASSERT_EQ(refused.status, 403) << refused.Describe();
  EXPECT_NE(Parse(refused)["error"]["message"].get<std::string>().find("rule imports"),
            std::string::npos)
      << refused.body;
  // The quarantine is an event, and the webhook gets it too.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& req : receiver.requests()) {
          if (Verified(req).value("kind", "") == "tenant_quarantined") return true;
        }
        return false;
      },
      15s));
  const ProcessResult admin = RunKiln({"keys", "create", "--admin", "--data-dir", data_});
  ASSERT_EQ(admin.exit_code, 0) << admin.err;
  const HttpResponse release =
      server_->Call("POST", "/v1/admin/tenants/default/release",
                    {{"Authorization", "Bearer " + Trim(admin.out)}}, "", 30s);
  ASSERT_EQ(release.status, 200) << release.Describe();
  EXPECT_EQ(server_->Execute(key_, {{"code", "print(1)"}}).status, 200);
}

}  // namespace
}  // namespace kiln::testing
