#include "server/connect.h"

#include <nlohmann/json.hpp>

namespace kiln::server::connect {

std::string Encode(uint8_t flags, std::string_view message) {
  const auto n = static_cast<uint32_t>(message.size());
  std::string out;
  out.reserve(5 + message.size());
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(message);
  return out;
}

std::string EndStream() { return Encode(kEndStream, "{}"); }

std::string EndStream(std::string_view code, std::string_view message) {
  const nlohmann::json j = {
      {"error", {{"code", std::string(code)}, {"message", std::string(message)}}}};
  return Encode(kEndStream, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Result<std::vector<Envelope>> Parse(std::string_view body, size_t max_message) {
  std::vector<Envelope> out;
  size_t pos = 0;
  while (pos < body.size()) {
    if (body.size() - pos < 5) {
      return InvalidArgument("a Connect envelope is cut short: " +
                             std::to_string(body.size() - pos) + " bytes of its 5-byte prefix");
    }
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(body[pos + i]); };
    const uint8_t flags = byte(0);
    const uint32_t n = (uint32_t{byte(1)} << 24) | (uint32_t{byte(2)} << 16) |
                       (uint32_t{byte(3)} << 8) | uint32_t{byte(4)};
    if (flags & kCompressed)
      return InvalidArgument("a compressed Connect envelope (none was agreed)");
    if (flags & ~kEndStream) return InvalidArgument("a Connect envelope with unknown flags");
    if (n > max_message) {
      return InvalidArgument("a Connect message of " + std::to_string(n) + " bytes (at most " +
                             std::to_string(max_message) + ")");
    }
    if (body.size() - pos - 5 < n) {
      return InvalidArgument(
          "a Connect envelope is cut short: " + std::to_string(body.size() - pos - 5) + " of its " +
          std::to_string(n) + " bytes");
    }
    out.push_back({flags, std::string(body.substr(pos + 5, n))});
    pos += 5 + n;
  }
  return out;
}

}  // namespace kiln::server::connect
