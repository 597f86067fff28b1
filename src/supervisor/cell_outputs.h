// CellOutputs: one cell's results, assembled from what the sandbox sent.
//
// The frames are hostile (P19): each is checked for its type and the JSON
// types of the members kiln uses; anything unexpected is a protocol violation
// (the caller kills the sandbox and reports status protocol_error). Rich
// outputs are capped here whatever the runtime claims: images by count and
// decoded size (dropped ones are counted and flagged), every frame's bytes by
// a total budget (past it: an output-limit kill).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "policy/policy.h"

namespace kiln::supervisor {

struct CellError {
  std::string name;
  std::string value;
  std::vector<std::string> traceback;
};

struct PolicyViolationInfo {
  std::string module;
  int64_t line = 0;
  std::string message;
};

// Outputs of one cell at most (each stream chunk merge counts once).
inline constexpr size_t kMaxOutputsPerCell = 10000;

class CellOutputs final {
 public:
  CellOutputs(int64_t cell, const policy::DisplayLimits& limits, uint64_t frame_budget);

  // Text read from fd 1 ("stdout") or 2 ("stderr"); consecutive chunks of one
  // stream merge into one nbformat stream output.
  void AddStream(const char* name, std::string_view text);

  enum class FrameVerdict { kAccepted, kOverBudget };
  // One decoded frame of the runtime channel (not hello). kInvalidArgument:
  // protocol violation, with the reason.
  Result<FrameVerdict> OnFrame(const nlohmann::json& frame, size_t wire_bytes);

  bool replied() const { return reply_status_.has_value(); }
  const std::optional<std::string>& reply_status() const { return reply_status_; }
  std::optional<int64_t> exit_code() const { return exit_code_; }
  std::optional<int64_t> execution_count() const { return execution_count_; }
  // A command cell's process id in the sandbox, once the runtime started it.
  std::optional<int64_t> command_pid() const { return command_pid_; }
  uint64_t dropped() const { return dropped_; }
  const nlohmann::json& outputs() const { return outputs_; }
  const std::optional<CellError>& error() const { return error_; }
  const std::optional<PolicyViolationInfo>& policy_violation() const { return violation_; }

 private:
  Status CheckCell(const nlohmann::json& f) const;
  int64_t cell_;
  policy::DisplayLimits limits_;
  uint64_t frame_budget_;
  uint64_t frame_bytes_ = 0;
  uint64_t images_ = 0;
  uint64_t image_bytes_ = 0;
  uint64_t dropped_ = 0;  // by the runtime (reported) + by us
  nlohmann::json outputs_ = nlohmann::json::array();
  std::optional<CellError> error_;
  std::optional<PolicyViolationInfo> violation_;
  std::optional<std::string> reply_status_;
  std::optional<int64_t> exit_code_;
  std::optional<int64_t> execution_count_;
  std::optional<int64_t> command_pid_;
};

// Decoded size of base64 text (upper bound, no decoding).
uint64_t Base64DecodedSize(std::string_view b64);

}  // namespace kiln::supervisor
