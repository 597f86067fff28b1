// A `kiln serve` subprocess for the integration tier, and small helpers
// shared by the HTTP tests (server, sessions).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "testlib/http_client.h"
#include "testlib/kiln_runner.h"

namespace kiln::testing {

namespace kiln_server_detail {
namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline json Parse(const HttpResponse& r) {
  return json::parse(r.body, nullptr, /*allow_exceptions=*/false);
}

inline std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// "kiln_<12 hex>_<secret>" -> the 12 hex chars.
inline std::string KeyId(const std::string& key) {
  return key.size() > 17 ? key.substr(5, 12) : "";
}

inline bool IsKey(const std::string& key) {
  return std::regex_match(key, std::regex("kiln_[0-9a-f]{12}_[A-Za-z0-9_-]+"));
}

// Whether `pid` (our child) has exited, without reaping it.
inline bool HasExited(pid_t pid) {
  siginfo_t si{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         si.si_pid == pid;
}

// `kiln audit --data-dir DIR --json [--tenant T]`, parsed (an array; null on failure).
inline json Audit(const std::string& data_dir, const std::string& tenant = "") {
  std::vector<std::string> args{"audit", "--data-dir", data_dir, "--json", "--limit", "1000"};
  if (!tenant.empty()) args.insert(args.end(), {"--tenant", tenant});
  ProcessOptions o;
  o.timeout = 20s;
  const ProcessResult p = RunKiln(args, o);
  EXPECT_EQ(p.exit_code, 0) << p.err;
  json j = json::parse(p.out, nullptr, false);
  if (!j.is_array()) {
    ADD_FAILURE() << "kiln audit --json printed no array: " << p.out << p.err;
    return json();
  }
  return j;
}

// Polls `pred` every 50 ms until it holds or `limit` passes.
template <typename Pred>
inline bool WaitFor(Pred pred, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
}

// --- A running `kiln serve` -------------------------------------------------

class KilnServer {
 public:
  KilnServer() = default;
  KilnServer(const KilnServer&) = delete;
  KilnServer& operator=(const KilnServer&) = delete;
  ~KilnServer() {
    if (running()) Terminate(15s);
  }

  // Starts `kiln serve --listen 127.0.0.1:0 --data-dir DATA --config CONFIG`
  // (then `extra`), reads the port from its stderr and waits for GET /healthz.
  // stdout and stderr go to files next to the config (`tag` names them).
  bool Start(const std::string& data_dir, const std::string& config, const std::string& tag,
             std::string* why, const std::vector<std::string>& extra = {}) {
    const std::string base = fs::path(config).parent_path().string() + "/" + tag;
    if (!TestBackend().empty()) {
      // The *_gvisor tiers: every profile of the config on that backend.
      std::optional<std::string> text = ReadFile(config);
      if (!text) {
        *why = "cannot read " + config;
        return false;
      }
      WriteFile(config, WithTestBackend(*text));
    }
    out_path_ = base + ".stdout";
    err_path_ = base + ".stderr";
    proc_ = std::make_unique<Subprocess>();
    ProcessOptions o;
    o.timeout = 30min;  // never relied on: Terminate() bounds every stop
    o.env = {{"KILN_TEST_SERVER_OUT", out_path_},
             {"KILN_TEST_SERVER_ERR", err_path_},
             {"KILN_LOG", "info"}};
    std::vector<std::string> argv{
        "/bin/sh",
        "-c",
        "exec \"$0\" \"$@\" >\"$KILN_TEST_SERVER_OUT\" 2>\"$KILN_TEST_SERVER_ERR\"",
        KilnBin(),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_dir,
        "--config",
        config};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (!proc_->Start(argv, o)) {
      *why = "cannot start kiln serve";
      return false;
    }
    const auto deadline = Clock::now() + 60s;
    static const std::regex kListening("kiln: listening on http://127\\.0\\.0\\.1:([0-9]+) ");
    while (port_ == 0) {
      std::smatch m;
      const std::string err = Stderr();
      if (std::regex_search(err, m, kListening)) {
        port_ = static_cast<uint16_t>(std::stoi(m[1]));
        break;
      }
      if (HasExited(proc_->pid())) {
        const ProcessResult r = proc_->Wait();
        *why = "kiln serve exited (code " + std::to_string(r.exit_code) + ", signal " +
               std::to_string(r.term_signal) + ") before listening; stderr:\n" + Stderr();
        return false;
      }
      if (Clock::now() > deadline) {
        *why = "kiln serve did not say it was listening within 60 s; stderr:\n" + Stderr();
        return false;
      }
      std::this_thread::sleep_for(20ms);
    }
    for (;;) {
      const HttpResponse h = Get("/healthz", 2s);
      if (h.status == 200) break;
      if (Clock::now() > deadline) {
        *why = "GET /healthz never answered 200: " + h.Describe() + "\nstderr:\n" + Stderr();
        return false;
      }
      std::this_thread::sleep_for(20ms);
    }
    stdout_ = ReadFile(out_path_).value_or("");
    return true;
  }

  bool running() const { return proc_ != nullptr && proc_->pid() > 0; }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  uint16_t port() const { return port_; }
  // What the server printed on stdout by the time it was listening.
  const std::string& Stdout() const { return stdout_; }
  std::string Stderr() const { return ReadFile(err_path_).value_or(""); }

  HttpResponse Call(const std::string& method, const std::string& path,
                    std::vector<std::pair<std::string, std::string>> headers = {},
                    const std::string& body = "", std::chrono::milliseconds timeout = 60s) const {
    HttpRequest r;
    r.method = method;
    r.path = path;
    r.headers = std::move(headers);
    if (!body.empty() || method == "POST")
      r.headers.emplace_back("Content-Type", "application/json");
    r.body = body;
    r.timeout = timeout;
    return HttpCall("127.0.0.1", port_, r);
  }
  HttpResponse Get(const std::string& path, std::chrono::milliseconds timeout = 30s) const {
    return Call("GET", path, {}, "", timeout);
  }
  // POST /v1/execute with a Bearer key.
  HttpResponse Execute(const std::string& key, const json& body,
                       std::chrono::milliseconds timeout = 60s) const {
    return Call("POST", "/v1/execute", {{"Authorization", "Bearer " + key}}, body.dump(), timeout);
  }
  std::string Metrics() const { return Get("/metrics").body; }

  struct Exit {
    bool in_time = false;  // exited by itself within the limit
    int code = -1;
    int signal = 0;
    double seconds = 0;  // from the signal to the exit
  };

  // SIGTERM to the server's pid, then wait up to `limit` for it to exit; past
  // that, SIGKILL its process group (the one this test started) and reap.
  Exit Terminate(std::chrono::milliseconds limit) {
    if (!running()) return Exit{};
    ::kill(proc_->pid(), SIGTERM);
    return WaitExit(limit);
  }

  // Waits up to `limit` for the server to exit by itself (after a signal sent
  // elsewhere); past that, SIGKILLs its process group and reaps it.
  Exit WaitExit(std::chrono::milliseconds limit) {
    Exit e;
    if (!running()) return e;
    const auto t0 = Clock::now();
    e.in_time = WaitFor([&] { return HasExited(proc_->pid()); }, limit);
    e.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!e.in_time) {
      ::kill(-proc_->pid(), SIGKILL);
      ::kill(proc_->pid(), SIGKILL);
    }
    const ProcessResult r = proc_->Wait();
    e.code = r.exit_code;
    e.signal = r.term_signal;
    return e;
  }

  // SIGKILL to the server's pid only (not its group: what it started must die
  // by itself), then reap it.
  void Kill() {
    if (!running()) return;
    ::kill(proc_->pid(), SIGKILL);
    (void)proc_->Wait();
  }

 private:
  std::unique_ptr<Subprocess> proc_;
  std::string out_path_, err_path_, stdout_;
  uint16_t port_ = 0;
};

// `kiln keys create --tenant T --data-dir DIR`: the key (stdout alone).
inline std::string CreateKey(const std::string& data_dir, const std::string& tenant) {
  const ProcessResult p = RunKiln({"keys", "create", "--tenant", tenant, "--data-dir", data_dir});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  const std::string key = Trim(p.out);
  EXPECT_TRUE(IsKey(key)) << "kiln keys create printed '" << p.out << "'";
  return key;
}

}  // namespace kiln_server_detail

using kiln_server_detail::Audit;
using kiln_server_detail::CreateKey;
using kiln_server_detail::HasExited;
using kiln_server_detail::IsKey;
using kiln_server_detail::KeyId;
using kiln_server_detail::KilnServer;
using kiln_server_detail::Parse;
using kiln_server_detail::Trim;
using kiln_server_detail::WaitFor;

}  // namespace kiln::testing
