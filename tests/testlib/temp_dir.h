// A fresh directory in the host's /tmp, removed with its contents at scope
// end: for unit tests (header only, no kiln binary needed) and the tiers
// above (kiln_runner.h).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

namespace kiln::testing {

class TempDir final {
 public:
  TempDir() {
    std::string templ = "/tmp/kiln-test-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      return;
    }
    path_ = templ;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kiln::testing
