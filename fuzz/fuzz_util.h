// Helpers shared by the fuzz targets (fuzz/README.md). A target reads its
// input as bytes, decodes it with kiln's own decoder, and checks what the
// decoder promises; a broken promise aborts, which libFuzzer reports as a
// crash and the replay driver as a failed test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace kiln::fuzz {

// The input as text. An exact-size copy (no terminating NUL), so that
// AddressSanitizer sees a read one byte past the end.
class Input final {
 public:
  Input(const uint8_t* data, size_t size) : bytes_(data, data + size) {}
  std::string_view text() const { return {bytes_.data(), bytes_.size()}; }

 private:
  std::vector<char> bytes_;
};

// Splits off the first byte of `text` (0 when empty): the adapters use it to
// choose limits or a mode, the rest is the decoder's input.
inline uint8_t TakeByte(std::string_view* text) {
  if (text->empty()) return 0;
  const auto b = static_cast<uint8_t>(text->front());
  text->remove_prefix(1);
  return b;
}

[[noreturn]] inline void Fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace kiln::fuzz

// A promise of the decoder under test; abort() when it is broken.
#define FUZZ_CHECK(cond)                                        \
  do {                                                          \
    if (!(cond)) ::kiln::fuzz::Fail(__FILE__, __LINE__, #cond); \
  } while (0)
