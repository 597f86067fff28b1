// Cleanup runs a callable at scope exit unless Release()d (gVisor's cleanup.Make):
// a half-built sandbox tears itself down by unwinding, never by a cleanup ladder.
#pragma once

#include <utility>

namespace kiln {

template <typename F>
class [[nodiscard]] Cleanup final {
 public:
  explicit Cleanup(F f) : f_(std::move(f)) {}
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  ~Cleanup() {
    if (armed_) f_();
  }
  void Release() { armed_ = false; }

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace kiln
