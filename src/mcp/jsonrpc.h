// JSON-RPC 2.0 as MCP uses it (2025-11-25): one message per line or POST, no
// batches (removed in 2025-06-18: an array is an Invalid Request), ids that
// are strings or integers (never null), params that are objects. Everything
// here reads hostile input: the text is bounded by the transport, its nesting
// is checked before parsing (nlohmann's serializer recurses), and every member
// is type-checked before use.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/json_depth.h"

namespace kiln::mcp::jsonrpc {

inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
// Implementation-defined server errors (-32000..-32099).
inline constexpr int kServerError = -32000;
inline constexpr int kSessionNotFound = -32001;

// Deeper JSON than this is refused before it is parsed (base/json_depth.h).
inline constexpr int kMaxDepth = kMaxJsonDepth;

enum class Kind {
  kRequest,       // method + id: gets exactly one response
  kNotification,  // method, no id: gets nothing
  kResponse,      // result or error + id (the client answering; kiln sends no requests)
  kInvalid,       // answered with `error_code`/`error` and `id` (null when unknown)
};

struct Message {
  Kind kind = Kind::kInvalid;
  nlohmann::json id;  // string or integer; null when absent or invalid
  std::string method;
  nlohmann::json params;  // an object (empty when absent)
  int error_code = 0;     // for kInvalid
  std::string error;      // for kInvalid
};

// Parses one message's text. nullopt: not JSON, or nested deeper than
// kMaxDepth (answer kParseError with a null id).
std::optional<nlohmann::json> Parse(std::string_view text);

// Classifies a parsed value. Arrays (batches), non-objects, a wrong "jsonrpc",
// a bad id or method are kInvalid (kInvalidRequest); params that are not an
// object are kInvalid (kInvalidParams) with the request's id, or, on a
// notification (never answered), kNotification with `error_code` set.
Message Classify(const nlohmann::json& value);

nlohmann::json Response(const nlohmann::json& id, nlohmann::json result);
nlohmann::json ErrorResponse(const nlohmann::json& id, int code, std::string_view message);
nlohmann::json Notification(std::string_view method, nlohmann::json params);

// One line of JSON (no embedded newlines; invalid UTF-8 replaced).
std::string Serialize(const nlohmann::json& message);

}  // namespace kiln::mcp::jsonrpc
