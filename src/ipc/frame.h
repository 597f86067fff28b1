// Frames of the runtime channel (docs/protocol.md, section 2): a 4-byte
// big-endian length, then that many bytes of one UTF-8 JSON object.
//
// Every byte comes from inside the sandbox and is hostile (P19): FrameReader
// is incremental (it never blocks and never trusts a length before checking
// it against the maximum), and ParseFrame turns a payload into a JSON object or
// a precise error; nlohmann's exceptions stop at this adapter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace kiln::ipc {

inline constexpr uint32_t kProtocolVersion = 2;
// The largest frame the supervisor accepts from a sandbox.
inline constexpr size_t kMaxFrameBytes = 32u << 20;

// Length prefix + payload.
std::string EncodeFrame(std::string_view payload);
std::string EncodeMessage(const nlohmann::json& message);

class FrameReader final {
 public:
  explicit FrameReader(size_t max_frame = kMaxFrameBytes) : max_frame_(max_frame) {}

  // Appends bytes read from the channel.
  void Feed(const char* data, size_t size) { buffer_.append(data, size); }
  // The next complete payload, if any. kResourceExhausted when the announced
  // length is over the maximum (the stream is then unusable: stop reading).
  Result<std::optional<std::string>> Next();
  // Bytes of an incomplete frame (non-zero at EOF means a truncated frame).
  size_t pending() const { return buffer_.size() - offset_; }

 private:
  size_t max_frame_;
  std::string buffer_;
  size_t offset_ = 0;
};

// A payload as a JSON object with a string "type". kInvalidArgument otherwise,
// with what was wrong.
Result<nlohmann::json> ParseFrame(std::string_view payload);

// Typed access to members of a hostile message: the error names the member.
Result<std::string> GetString(const nlohmann::json& m, const char* key);
Result<int64_t> GetInt(const nlohmann::json& m, const char* key);
// An object whose values are all strings (a MIME bundle), else an error.
Result<nlohmann::json> GetStringMap(const nlohmann::json& m, const char* key);

}  // namespace kiln::ipc
