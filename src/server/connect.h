// The Connect protocol's streaming framing (https://connectrpc.com/docs/protocol,
// "Streaming RPC"), as E2B's envd speaks it and the E2B SDK's connect-web
// client expects it (application/connect+json): every message is an envelope,
// one flags byte and a 4-byte big-endian length, then the message; the last
// envelope of a response is the end-of-stream message (flag 0x02), `{}` or
// `{"error": {"code", "message"}}`. The request's envelopes come from the
// network: parsed with bounds, a compressed one (flag 0x01) is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kiln::server::connect {

inline constexpr uint8_t kCompressed = 0x01;
inline constexpr uint8_t kEndStream = 0x02;

struct Envelope {
  uint8_t flags = 0;
  std::string message;
};

// One envelope on the wire.
std::string Encode(uint8_t flags, std::string_view message);

// The end-of-stream envelope: `{}`, or an error with a Connect code
// ("invalid_argument", "not_found", ...) and a message.
std::string EndStream();
std::string EndStream(std::string_view code, std::string_view message);

// All envelopes of a request body. kInvalidArgument: a truncated envelope, a
// compressed one, an unknown flag, or a message over `max_message` bytes.
Result<std::vector<Envelope>> Parse(std::string_view body, size_t max_message);

}  // namespace kiln::server::connect
