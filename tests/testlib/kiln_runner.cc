#include "testlib/kiln_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "testlib/host_facts.h"

extern char** environ;

namespace kiln::testing {
namespace {

using Clock = std::chrono::steady_clock;

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// $NAME, else the value the build baked in (tests/CMakeLists.txt).
std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  if (v != nullptr && *v != '\0') return v;
  if (fallback == nullptr || *fallback == '\0') {
    ADD_FAILURE() << name << " is not set and the build gave no default";
    return "";
  }
  return fallback;
}

// Reads what is there; false at EOF or on a hard error.
bool Drain(int fd, std::string* into) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      into->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

void FillResult(int status, ProcessResult* r) {
  if (WIFEXITED(status)) r->exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r->term_signal = WTERMSIG(status);
}

}  // namespace

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  CloseFd(&in_fd_);
  CloseFd(&out_fd_);
  CloseFd(&err_fd_);
}

bool Subprocess::Start(const std::vector<std::string>& argv, const ProcessOptions& options) {
  if (argv.empty() || argv[0].empty()) {
    ADD_FAILURE() << "Subprocess::Start: empty argv";
    return false;
  }
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [k, v] : options.env) overridden = overridden || k == name;
    if (!overridden) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  int in[2] = {-1, -1}, out[2], err[2];
  if (options.stdin_data && ::pipe2(in, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return false;
  }
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return false;
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  started_ = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGPIPE, SIG_DFL);
    const int stdin_src = options.stdin_data ? in[0] : null_fd;
    if (::dup2(stdin_src, 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(err[1], 2) < 0) ::_exit(127);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from here, so a kill(-pid) right away reaches it
  pid_ = pid;
  if (null_fd >= 0) ::close(null_fd);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (options.stdin_data) {
    ::close(in[0]);
    in_fd_ = in[1];
    stdin_data_ = *options.stdin_data;
  }
  for (int fd : {in_fd_, out_fd_, err_fd_}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  timeout_ = options.timeout;
  return true;
}

ProcessResult Subprocess::Wait() {
  ProcessResult r;
  r.pid = pid_;
  if (pid_ <= 0) return r;
  size_t written = 0;
  if (in_fd_ >= 0 && stdin_data_.empty()) CloseFd(&in_fd_);
  const auto deadline = started_ + timeout_;
  bool reaped = false;
  int status = 0;
  while (!reaped) {
    pollfd fds[3];
    nfds_t n = 0;
    if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
    if (in_fd_ >= 0) fds[n++] = {in_fd_, POLLOUT, 0};
    ::poll(fds, n, 20);
    if (out_fd_ >= 0 && !Drain(out_fd_, &r.out)) CloseFd(&out_fd_);
    if (err_fd_ >= 0 && !Drain(err_fd_, &r.err)) CloseFd(&err_fd_);
    if (in_fd_ >= 0) {
      ssize_t w = ::write(in_fd_, stdin_data_.data() + written, stdin_data_.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == stdin_data_.size()) {
        CloseFd(&in_fd_);
      }
    }
    pid_t w = ::waitpid(pid_, &status, WNOHANG);
    if (w == pid_) {
      reaped = true;
    } else if (Clock::now() >= deadline) {
      r.timed_out = true;
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      reaped = true;
    }
  }
  r.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
  // What it wrote just before exiting is still in the pipes; a descendant
  // that kept them open must not keep us here.
  if (out_fd_ >= 0) Drain(out_fd_, &r.out);
  if (err_fd_ >= 0) Drain(err_fd_, &r.err);
  CloseFd(&in_fd_);
  CloseFd(&out_fd_);
  CloseFd(&err_fd_);
  FillResult(status, &r);
  pid_ = -1;
  return r;
}

ProcessResult RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options) {
  Subprocess p;
  if (!p.Start(argv, options)) return {};
  return p.Wait();
}

#ifndef KILN_TEST_DEFAULT_BIN
#define KILN_TEST_DEFAULT_BIN ""
#endif
#ifndef KILN_TEST_DEFAULT_SOURCE_DIR
#define KILN_TEST_DEFAULT_SOURCE_DIR ""
#endif

std::string TestBackend() {
  const char* v = std::getenv("KILN_TEST_BACKEND");
  return v != nullptr ? v : "";
}

std::string WithTestBackend(const std::string& config) {
  if (TestBackend().empty()) return config;
  static const std::regex kProfileHeader(R"(^\[profiles\.[A-Za-z0-9_-]+\][ \t]*$)");
  std::istringstream in(config);
  std::string out, line;
  while (std::getline(in, line)) {
    out += line + "\n";
    if (std::regex_match(line, kProfileHeader)) out += "backend = \"" + TestBackend() + "\"\n";
  }
  return out;
}

std::string KilnBin() { return EnvOr("KILN_BIN", KILN_TEST_DEFAULT_BIN); }
std::string SourceDir() { return EnvOr("KILN_SOURCE_DIR", KILN_TEST_DEFAULT_SOURCE_DIR); }

ProcessResult RunKiln(const std::vector<std::string>& args, const ProcessOptions& options) {
  std::vector<std::string> argv{KilnBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  // The pool-path variants of a tier (tests/CMakeLists.txt) run every
  // `kiln run` with extra flags, e.g. "--pool": a sandbox from a zygote.
  if (!args.empty() && args[0] == "run") {
    const char* run_args = std::getenv("KILN_TEST_RUN_ARGS");
    std::istringstream extra(run_args != nullptr ? run_args : "");
    std::string a;
    size_t at = 2;
    while (extra >> a) argv.insert(argv.begin() + static_cast<std::ptrdiff_t>(at++), a);
    if (TestBackend() == "gvisor") argv.insert(argv.begin() + 2, {"--backend", "gvisor"});
  }
  return RunProcess(argv, options);
}

std::string ReadProbe(const std::string& name) {
  const std::string path = SourceDir() + "/tests/probes/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read probe " << path;
    return "";
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string WithPrelude(const std::string& code) { return ReadProbe("prelude.py") + "\n" + code; }

std::string JsonRun::Describe() const {
  std::string dump = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (dump.size() > 6000) dump = dump.substr(0, 6000) + "...";
  return "kiln exit " + std::to_string(raw.exit_code) + " signal " +
         std::to_string(raw.term_signal) + (raw.timed_out ? " (timed out)" : "") +
         "\njson: " + dump + "\nkiln stderr: " + raw.err.substr(0, 3000);
}

JsonRun RunPython(const std::string& code, const std::vector<std::string>& extra_args,
                  const ProcessOptions& options) {
  std::vector<std::string> args{"run", "--json"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  args.push_back("-c");
  args.push_back(code);
  JsonRun run;
  run.raw = RunKiln(args, options);
  run.j = nlohmann::json::parse(run.raw.out, nullptr, /*allow_exceptions=*/false);
  if (run.j.is_discarded() || !run.j.is_object()) {
    run.j =
        nlohmann::json{{"status", "<unparsable>"}, {"kiln_stdout", run.raw.out.substr(0, 2000)}};
  }
  return run;
}

JsonRun RunProbe(const std::string& code, const std::vector<std::string>& extra_args,
                 const ProcessOptions& options) {
  return RunPython(WithPrelude(code), extra_args, options);
}

namespace {

struct DoctorVerdict {
  bool broken = false;
  std::string problem;                   // when broken
  std::optional<std::string> missing;    // the sandbox cannot run here at all
  std::optional<std::string> no_cgroup;  // it runs, without cgroup limits
};

const nlohmann::json* Layer(const nlohmann::json& layers, const std::string& name) {
  for (const auto& layer : layers) {
    if (layer.value("name", "") == name) return &layer;
  }
  return nullptr;
}

// What doctor says of the layers a `kiln run` depends on, each cross-checked
// with the tests' own probe of the host (host_facts.h): doctor saying a layer
// is missing that the host has is a broken kiln, never a skip.
DoctorVerdict AskDoctor() {
  DoctorVerdict v;
  ProcessOptions o;
  o.timeout = std::chrono::seconds(60);
  const ProcessResult r = RunKiln({"doctor", "--json", "--no-smoke"}, o);
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("layers") || !j["layers"].is_array()) {
    v.broken = true;
    v.problem = "`kiln doctor --json --no-smoke` gave no usable JSON (exit " +
                std::to_string(r.exit_code) + "): " + r.out.substr(0, 500) + r.err.substr(0, 500);
    return v;
  }
  const nlohmann::json& layers = j["layers"];
  std::string missing;
  auto add_missing = [&](const std::string& why) {
    missing += (missing.empty() ? "" : "; ") + why;
  };
  auto contradicts = [&](const std::string& what, const std::string& host) {
    v.broken = true;
    v.problem += (v.problem.empty() ? "" : "\n") + std::string("kiln doctor: ") + what +
                 ", but the host has it: " + host;
  };
  for (const char* name : {"user namespace", "landlock", "cgroup"}) {
    if (Layer(layers, name) == nullptr) {
      v.broken = true;
      v.problem += std::string(v.problem.empty() ? "" : "\n") +
                   "`kiln doctor --json --no-smoke` lists no \"" + name + "\" layer";
    }
  }
  if (v.broken) return v;

  const nlohmann::json& userns = *Layer(layers, "user namespace");
  if (userns.value("state", "") == "missing") {
    const std::string what =
        "user namespaces are missing (" + userns.value("detail", std::string()) + ")";
    if (HostUserNamespaces().present) {
      contradicts(what, HostUserNamespaces().detail);
    } else {
      add_missing("kiln doctor: " + what);
    }
  }
  // kiln's default policy requires Landlock: without it every run is refused.
  const nlohmann::json& landlock = *Layer(layers, "landlock");
  if (landlock.value("state", "") == "missing") {
    const std::string what =
        "Landlock is missing (" + landlock.value("detail", std::string()) + ")";
    if (HostLandlock().abi > 0) {
      contradicts(what, HostLandlock().detail);
    } else {
      add_missing("kiln doctor: " + what + "; kiln's default policy requires it");
    }
  }
  // Required (and so "missing" rather than "degraded") when kiln runs as
  // root, which must then use whatever cgroups the host gives it. An
  // unprivileged kiln uses them on a best-effort basis (a delegated v2
  // subtree may or may not be usable): its verdict is taken as it is.
  const nlohmann::json& cgroup = *Layer(layers, "cgroup");
  if (cgroup.value("state", "") != "available") {
    const std::string what = "no cgroup limits (" + cgroup.value("detail", std::string()) + ")";
    if (HostIsRoot() && HostCgroupControllers().present) {
      contradicts(what, HostCgroupControllers().detail);
    } else {
      v.no_cgroup = "kiln doctor: " + what +
                    (HostIsRoot() ? "; the host probe agrees: " : "; host probe: ") +
                    HostCgroupControllers().detail;
      if (cgroup.value("state", "") == "missing" && cgroup.value("required", false)) {
        add_missing("kiln runs as root here, where cgroup limits are required, and " +
                    *v.no_cgroup);
      }
    }
  }
  if (!missing.empty()) v.missing = missing;
  return v;
}

const DoctorVerdict& CachedDoctor() {
  static const DoctorVerdict verdict = AskDoctor();
  return verdict;
}

}  // namespace

std::optional<std::string> SandboxMissingReason() {
  const DoctorVerdict& v = CachedDoctor();
  if (v.broken) ADD_FAILURE() << v.problem;
  return v.missing;
}

void RequireSandbox() {
  const DoctorVerdict& v = CachedDoctor();
  if (v.broken) GTEST_FAIL() << v.problem;
  if (v.missing) GTEST_SKIP() << *v.missing;
  // The pool-path variants (KILN_TEST_RUN_ARGS=--pool): the warm pool gives
  // each sandbox its own host uid and cgroup, so it needs both.
  const char* run_args = std::getenv("KILN_TEST_RUN_ARGS");
  if (run_args != nullptr && std::string(run_args).find("--pool") != std::string::npos) {
    if (!HostIsRoot())
      GTEST_SKIP()
          << "the pool path (--pool) needs root: each pooled sandbox gets its own host uid";
    if (v.no_cgroup) GTEST_SKIP() << "the pool path (--pool) needs cgroups: " << *v.no_cgroup;
  }
  // The gVisor variants (KILN_TEST_BACKEND=gvisor): runsc must run here, by
  // the tests' own probe (host_facts.h), not kiln's.
  if (TestBackend() == "gvisor" && !HostGvisor().present) {
    GTEST_SKIP() << "gVisor cannot run here: " << HostGvisor().detail;
  }
}

std::optional<std::string> CgroupLimitsMissingReason() {
  const DoctorVerdict& v = CachedDoctor();
  if (v.broken) ADD_FAILURE() << v.problem;
  return v.no_cgroup;
}

void RequireCgroupLimits() {
  const DoctorVerdict& v = CachedDoctor();
  if (v.broken) GTEST_FAIL() << v.problem;
  if (v.no_cgroup)
    GTEST_SKIP() << "this test reads what only cgroups give (OOM kills, pids, usage): "
                 << *v.no_cgroup;
}

std::string UniqueMarker(const std::string& prefix) {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(rd() % 100000000u);
}

std::vector<pid_t> PgrepF(const std::string& marker) {
  // What `pgrep -f` does, without needing procps on the host: every process
  // whose command line (arguments joined by spaces) contains `marker`.
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::optional<std::string> cmdline = ReadFile("/proc/" + name + "/cmdline");
    if (!cmdline || cmdline->empty()) continue;  // gone, or a kernel thread or zombie
    for (char& c : *cmdline) {
      if (c == '\0') c = ' ';
    }
    const pid_t p = static_cast<pid_t>(std::atoi(name.c_str()));
    if (cmdline->find(marker) != std::string::npos && p != ::getpid()) pids.push_back(p);
  }
  EXPECT_FALSE(ec) << "cannot list /proc: " << ec.message();
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string cur;
  for (char c : text) {
    if (c == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kiln::testing
