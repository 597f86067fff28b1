// base/json_depth.h: JsonDepth measures nesting on the raw bytes, before any
// parser sees them; every decoder of untrusted JSON refuses text past
// kMaxJsonDepth with it. Checked against nlohmann's own (iterative) SAX
// parser: on every text the parser accepts, JsonDepth is the true depth (at
// least the depth, past a NUL byte), and the cut at a limit says "over"
// exactly when the whole text's depth is over it.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/json_depth.h"
#include "fuzz_util.h"

namespace {

// Counts nesting without building a value (a DOM of a deep text would be
// what JsonDepth exists to avoid).
class DepthSax final : public nlohmann::json_sax<nlohmann::json> {
 public:
  int deepest() const { return deepest_; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool Open() {
    if (++depth_ > deepest_) deepest_ = depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  int deepest_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  const std::string_view text = input.text();

  const int full = kiln::JsonDepth(text, INT_MAX);
  FUZZ_CHECK(full >= 0);
  for (int limit : {0, 1, 2, 3, kiln::kMaxJsonDepth}) {
    const int cut = kiln::JsonDepth(text, limit);
    // Past the limit the scan stops at limit + 1; under it, the whole depth.
    FUZZ_CHECK(cut == (full > limit ? limit + 1 : full));
    FUZZ_CHECK(kiln::JsonDepthWithin(text, limit) == (full <= limit));
  }

  DepthSax sax;
  const bool valid = nlohmann::json::sax_parse(text, &sax, nlohmann::json::input_format_t::json,
                                               /*strict=*/true);
  // nlohmann's lexer takes a NUL byte for the end of the input (it parses
  // "[]\0[[" as "[]"), while JsonDepth counts every byte: past a NUL it may
  // only say more, never less.
  if (valid) {
    FUZZ_CHECK(text.find('\0') == std::string_view::npos ? sax.deepest() == full
                                                         : sax.deepest() <= full);
  }
  return 0;
}
