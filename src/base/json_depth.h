// The nesting depth of JSON text, measured on the bytes before any parser
// sees them. nlohmann's parser is iterative, but copying, comparing and
// dumping a value recurse once per level: a value nested 100,000 deep from a
// sandbox frame or a request body would overflow the stack of whoever touches
// it. Every decoder of untrusted JSON refuses text nested past kMaxJsonDepth.
#pragma once

#include <string_view>

namespace kiln {

// Far more than any message of kiln's protocols, MCP or a notebook's
// metadata needs; each level costs a few hundred bytes of stack at most.
inline constexpr int kMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text` (brackets inside
// strings do not count), scanning no further once it passes `limit`. Not a
// validator: the parser still decides whether the text is JSON.
int JsonDepth(std::string_view text, int limit = kMaxJsonDepth);

inline bool JsonDepthWithin(std::string_view text, int limit = kMaxJsonDepth) {
  return JsonDepth(text, limit) <= limit;
}

// nlohmann's lexer takes a NUL byte for the end of its input: it parses
// "{...}\0anything" as "{...}" and never looks at the rest. A raw NUL is never
// part of JSON text (RFC 8259: control characters appear only escaped, inside
// strings), so every decoder of untrusted JSON refuses text with one before
// parsing, as it refuses deep nesting (found by fuzz/frame_fuzzer.cc).
inline bool HasNulByte(std::string_view text) { return text.find('\0') != std::string_view::npos; }

}  // namespace kiln
