#include "mcp/jsonrpc.h"

#include <utility>

namespace kiln::mcp::jsonrpc {
namespace {

// The deepest nesting of arrays and objects in `text`, outside strings; stops
// counting past `limit`.

bool ValidId(const nlohmann::json& id) { return id.is_string() || id.is_number_integer(); }

Message Invalid(nlohmann::json id, int code, std::string message) {
  Message m;
  m.kind = Kind::kInvalid;
  m.id = std::move(id);
  m.error_code = code;
  m.error = std::move(message);
  return m;
}

}  // namespace

std::optional<nlohmann::json> Parse(std::string_view text) {
  if (!JsonDepthWithin(text, kMaxDepth) || HasNulByte(text)) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

Message Classify(const nlohmann::json& value) {
  if (value.is_array()) {
    return Invalid(
        nullptr, kInvalidRequest,
        "Invalid Request: JSON-RPC batches are not supported (MCP 2025-06-18 and later)");
  }
  if (!value.is_object())
    return Invalid(nullptr, kInvalidRequest, "Invalid Request: not a JSON-RPC object");
  const auto id_it = value.find("id");
  const bool has_id = id_it != value.end();
  const nlohmann::json id = has_id && ValidId(*id_it) ? *id_it : nlohmann::json(nullptr);
  const auto version = value.find("jsonrpc");
  if (version == value.end() || !version->is_string() || *version != "2.0") {
    return Invalid(id, kInvalidRequest, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
  }
  if (has_id && !ValidId(*id_it)) {
    return Invalid(nullptr, kInvalidRequest,
                   "Invalid Request: \"id\" must be a string or an integer");
  }
  const auto method = value.find("method");
  if (method == value.end()) {
    const bool result = value.contains("result"), error = value.contains("error");
    if (has_id && (result != error)) {
      Message m;
      m.kind = Kind::kResponse;
      m.id = id;
      return m;
    }
    return Invalid(id, kInvalidRequest, "Invalid Request: no \"method\"");
  }
  if (!method->is_string() || method->get_ref<const std::string&>().empty()) {
    return Invalid(id, kInvalidRequest, "Invalid Request: \"method\" must be a non-empty string");
  }
  Message m;
  m.kind = has_id ? Kind::kRequest : Kind::kNotification;
  m.id = id;
  m.method = method->get<std::string>();
  m.params = nlohmann::json::object();
  if (const auto params = value.find("params"); params != value.end() && !params->is_null()) {
    if (!params->is_object()) {
      Message bad = Invalid(id, kInvalidParams, "Invalid params: \"params\" must be an object");
      bad.method = m.method;
      if (!has_id) bad.kind = Kind::kNotification;  // a notification is never answered
      return bad;
    }
    m.params = *params;
  }
  return m;
}

nlohmann::json Response(const nlohmann::json& id, nlohmann::json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

nlohmann::json ErrorResponse(const nlohmann::json& id, int code, std::string_view message) {
  return {{"jsonrpc", "2.0"},
          {"id", id},
          {"error", {{"code", code}, {"message", std::string(message)}}}};
}

nlohmann::json Notification(std::string_view method, nlohmann::json params) {
  return {{"jsonrpc", "2.0"}, {"method", std::string(method)}, {"params", std::move(params)}};
}

std::string Serialize(const nlohmann::json& message) {
  return message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kiln::mcp::jsonrpc
