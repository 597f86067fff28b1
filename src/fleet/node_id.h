// Node ids and the session ids that carry them (docs/adr/0020): header only,
// so the session manager and the MCP transport use them without linking the
// registry.
#pragma once

#include <string>
#include <string_view>

namespace kiln::fleet {

// 1-32 characters of [a-z0-9-]: the key a router reads out of a session id.
inline bool IsValidNodeId(std::string_view id) {
  if (id.empty() || id.size() > 32) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// "<node>-<id>": a session id (or an MCP session id) that names the node
// that owns the session; `id` is hex (a single node's session id). A router
// reads the node as what precedes the last '-'.
inline std::string SessionIdFor(std::string_view node, std::string_view id) {
  return std::string(node) + "-" + std::string(id);
}

// The node a session id names ("" for an id without one: a single node's).
inline std::string_view NodeOfSessionId(std::string_view session_id) {
  const size_t dash = session_id.rfind('-');
  if (dash == std::string_view::npos || dash == 0) return {};
  const std::string_view node = session_id.substr(0, dash);
  return IsValidNodeId(node) ? node : std::string_view();
}

}  // namespace kiln::fleet
