// kiln's MCP tools: their definitions (JSON Schema 2020-12 input and output
// schemas, descriptions written for a model), the validation of their
// arguments (every error names the argument: a model can fix its call), and
// the formatting of their results: a text block a model reads, one image
// block per PNG, and structuredContent (MCP 2025-06-18 and later).
//
// Protocol versions: 2025-11-25 is the newest; 2025-06-18, 2025-03-26 and
// 2024-11-05 are accepted too. Clients of the two older ones get no title,
// outputSchema or structuredContent (those came in 2025-06-18), and no
// annotations before 2025-03-26; their text blocks carry everything.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kiln::mcp {

inline constexpr std::string_view kLatestProtocolVersion = "2025-11-25";
// Newest first.
const std::vector<std::string>& SupportedProtocolVersions();
bool IsSupportedProtocolVersion(std::string_view version);
// The version the server answers an initialize with: the client's when
// supported, else the newest.
std::string NegotiateProtocolVersion(std::string_view requested);

// What the tool descriptions say about limits, e.g. "Each call may run up to
// 30 s by default (timeout: at most 300 s), with 512 MiB of memory and 1 CPU".
std::string DefaultLimitsText();

// The tools/list result's "tools" array for a client of `version`.
nlohmann::json ToolDefinitions(std::string_view version, const std::string& limits_text);
bool IsTool(std::string_view name);

// Largest text block a tool returns; longer output keeps its head and tail
// (the whole of it is still in structuredContent).
inline constexpr size_t kMaxTextBlockBytes = 100 * 1024;
// Largest code, path and upload a tool accepts (the backend has its own caps).
inline constexpr size_t kMaxCodeBytes = 1 << 20;
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kMaxUploadBytes = 64 << 20;

struct RunArgs {
  std::string code;
  std::optional<double> timeout_s;
};
struct UploadArgs {
  std::string path;
  std::string bytes;  // decoded
};

// kInvalidArgument with a message that starts with the argument's name
// ("code: required: the Python source to run"); unknown arguments too.
Result<RunArgs> ParseRunArgs(const nlohmann::json& args);
Result<UploadArgs> ParseUploadArgs(const nlohmann::json& args);
Result<std::string> ParsePathArgs(const nlohmann::json& args);  // download_file: the path
Status ParseNoArgs(std::string_view tool, const nlohmann::json& args);

// A CallToolResult with isError true and one text block.
nlohmann::json ToolError(std::string_view text);

// run_python's CallToolResult from the backend's result JSON. `note` (may be
// empty) comes first in the text (e.g. that the previous interpreter was
// lost). isError when the code raised, exited non-zero, timed out or was
// killed (any status but "ok").
nlohmann::json RunPythonResult(const nlohmann::json& result, const std::string& note,
                               bool structured);
nlohmann::json UploadResult(const std::string& path, uint64_t size, bool structured);
nlohmann::json DownloadResult(const std::string& path, const std::string& bytes, bool structured);
nlohmann::json ListFilesResult(const nlohmann::json& listing, bool structured);
nlohmann::json ResetResult();

}  // namespace kiln::mcp
