#include "ipc/frame.h"

#include <string>

#include "base/json_depth.h"

namespace kiln::ipc {

std::string EncodeFrame(std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out;
  out.reserve(4 + payload.size());
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(payload);
  return out;
}

std::string EncodeMessage(const nlohmann::json& message) {
  return EncodeFrame(
      std::string_view(message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

Result<std::optional<std::string>> FrameReader::Next() {
  if (pending() < 4) return std::optional<std::string>();
  auto byte = [this](size_t i) {
    return static_cast<uint32_t>(static_cast<unsigned char>(buffer_[offset_ + i]));
  };
  const uint32_t n = (byte(0) << 24) | (byte(1) << 16) | (byte(2) << 8) | byte(3);
  if (n > max_frame_) {
    return MakeError(Code::kResourceExhausted, "frame of " + std::to_string(n) +
                                                   " bytes is over the limit of " +
                                                   std::to_string(max_frame_));
  }
  if (pending() < 4 + static_cast<size_t>(n)) return std::optional<std::string>();
  std::string payload = buffer_.substr(offset_ + 4, n);
  offset_ += 4 + n;
  // Compact now and then so a long stream does not grow the buffer forever.
  if (offset_ > (1u << 20) && offset_ * 2 > buffer_.size()) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return std::optional<std::string>(std::move(payload));
}

Result<nlohmann::json> ParseFrame(std::string_view payload) {
  if (HasNulByte(payload))
    return InvalidArgument("frame holds a NUL byte (never part of JSON text)");
  if (!JsonDepthWithin(payload)) {
    return InvalidArgument("frame nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("frame is not valid JSON");
  if (!j.is_object()) return InvalidArgument("frame is not a JSON object");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return InvalidArgument("frame has no string \"type\"");
  return j;
}

Result<std::string> GetString(const nlohmann::json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || !it->is_string()) {
    return InvalidArgument(std::string("member \"") + key + "\" must be a string");
  }
  return it->get<std::string>();
}

Result<int64_t> GetInt(const nlohmann::json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || !it->is_number_integer()) {
    return InvalidArgument(std::string("member \"") + key + "\" must be an integer");
  }
  return it->get<int64_t>();
}

Result<nlohmann::json> GetStringMap(const nlohmann::json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || !it->is_object()) {
    return InvalidArgument(std::string("member \"") + key + "\" must be an object");
  }
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) {
      return InvalidArgument(std::string("member \"") + key + "\": value of \"" + k +
                             "\" must be a string");
    }
  }
  return *it;
}

}  // namespace kiln::ipc
