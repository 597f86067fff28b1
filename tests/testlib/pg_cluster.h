// A throwaway PostgreSQL cluster for tests (header only: the store's unit
// tests and the integration tiers share it): initdb in a fresh /tmp
// directory, one postgres listening only on a unix socket in that directory,
// trust authentication for the superuser "kiln", fsync off. As root the
// cluster runs as "nobody" (postgres refuses to run as root). The postmaster
// is this process's child with a parent-death signal, so a crashed test
// leaves no server behind; the destructor stops it and removes the files.
//
//   std::string why;
//   auto pg = PgCluster::Start(&why);
//   if (!pg) GTEST_SKIP() << why;
//   auto url = pg->CreateDatabase("t1");  // "postgresql:///t1?host=...&user=kiln"
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace kiln::testing {

class PgCluster final {
 public:
  static constexpr const char* kBinDir = "/usr/lib/postgresql/15/bin";

  // nullptr, with the reason in *why_not, when no cluster can be started
  // here (PostgreSQL not installed, no unprivileged user, initdb failed).
  static std::unique_ptr<PgCluster> Start(std::string* why_not) {
    auto fail = [why_not](std::string why) {
      *why_not = std::move(why);
      return nullptr;
    };
    for (const char* tool : {"initdb", "postgres", "pg_isready", "createdb"}) {
      const std::string path = std::string(kBinDir) + "/" + tool;
      if (::access(path.c_str(), X_OK) != 0) {
        return fail(path + " is not installed (Debian's postgresql-15)");
      }
    }
    std::unique_ptr<PgCluster> c(new PgCluster);
    std::string templ = "/tmp/kiln-pg-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) return fail("mkdtemp: " + std::string(strerror(errno)));
    c->dir_ = templ;
    if (::geteuid() == 0) {
      struct passwd* pw = ::getpwnam("nobody");
      if (pw == nullptr)
        return fail("running as root and there is no user 'nobody' to run postgres");
      c->uid_ = pw->pw_uid;
      c->gid_ = pw->pw_gid;
      if (::chown(c->dir_.c_str(), c->uid_, c->gid_) != 0) {
        return fail("chown " + c->dir_ + ": " + strerror(errno));
      }
    }
    const std::string data = c->dir_ + "/data";
    if (c->RunAs(true, {std::string(kBinDir) + "/initdb", "-D", data, "-U", "kiln", "-A", "trust",
                        "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"}) != 0) {
      return fail("initdb failed: " + c->Log());
    }
    c->postmaster_ = c->Spawn(true, {std::string(kBinDir) + "/postgres", "-D", data, "-k", c->dir_,
                                     "-p", "5432", "-c", "listen_addresses=", "-c", "fsync=off",
                                     "-c", "full_page_writes=off", "-c", "max_connections=200"});
    if (c->postmaster_ <= 0) return fail("cannot start postgres: " + c->Log());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (c->RunAs(false, {std::string(kBinDir) + "/pg_isready", "-q", "-h", c->dir_, "-p", "5432",
                            "-U", "kiln"}) != 0) {
      int status = 0;
      if (::waitpid(c->postmaster_, &status, WNOHANG) == c->postmaster_) {
        c->postmaster_ = 0;
        return fail("postgres exited at start: " + c->Log());
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return fail("postgres not ready after 30 s: " + c->Log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return c;
  }

  ~PgCluster() {
    if (postmaster_ > 0) {
      ::kill(postmaster_, SIGQUIT);  // immediate shutdown: nothing here is worth keeping
      int status = 0;
      ::waitpid(postmaster_, &status, 0);
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  PgCluster(const PgCluster&) = delete;
  PgCluster& operator=(const PgCluster&) = delete;

  // A new empty database `name` ([a-z0-9_]), and the URL that names it.
  std::optional<std::string> CreateDatabase(const std::string& name) {
    if (RunAs(false, {std::string(kBinDir) + "/createdb", "-h", dir_, "-p", "5432", "-U", "kiln",
                      name}) != 0) {
      ADD_FAILURE() << "createdb " << name << ": " << Log();
      return std::nullopt;
    }
    return Url(name);
  }
  std::string Url(const std::string& db) const {
    return "postgresql:///" + db + "?host=" + dir_ + "&port=5432&user=kiln";
  }
  const std::string& dir() const { return dir_; }
  std::string data_dir() const { return dir_ + "/data"; }
  pid_t postmaster() const { return postmaster_; }

  // Every byte of the cluster's files (tables, indexes, WAL): for tests that
  // look for what must never be stored.
  std::string AllBytes() const {
    std::string out;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(data_dir(), ec)) {
      if (!e.is_regular_file(ec)) continue;
      std::ifstream in(e.path(), std::ios::binary);
      out.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
  }

 private:
  PgCluster() = default;

  std::string Log() const {
    std::ifstream in(dir_ + "/log.txt");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
  }

  // fork + exec `argv`, output appended to DIR/log.txt; `as_owner`: as the
  // cluster's user (nobody when root), with a parent-death signal.
  pid_t Spawn(bool as_owner, const std::vector<std::string>& argv) {
    const std::string log = dir_ + "/log.txt";
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (as_owner && uid_ != 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(gid_) != 0 || ::setuid(uid_) != 0) ::_exit(126);
    }
    // After setuid, which clears it.
    ::prctl(PR_SET_PDEATHSIG, SIGQUIT);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int RunAs(bool as_owner, const std::vector<std::string>& argv) {
    const pid_t pid = Spawn(as_owner, argv);
    if (pid < 0) return -1;
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string dir_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  pid_t postmaster_ = 0;
};

}  // namespace kiln::testing
