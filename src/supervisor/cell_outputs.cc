#include "supervisor/cell_outputs.h"

#include <limits>

#include "ipc/frame.h"

namespace kiln::supervisor {

uint64_t Base64DecodedSize(std::string_view b64) {
  uint64_t n = 0;
  for (char c : b64) {
    if (c != '\n' && c != '\r' && c != '=') ++n;
  }
  return n * 3 / 4;
}

CellOutputs::CellOutputs(int64_t cell, const policy::DisplayLimits& limits, uint64_t frame_budget)
    : cell_(cell), limits_(limits), frame_budget_(frame_budget) {}

void CellOutputs::AddStream(const char* name, std::string_view text) {
  if (text.empty()) return;
  if (!outputs_.empty()) {
    auto& last = outputs_.back();
    if (last["output_type"] == "stream" && last["name"] == name) {
      last["text"] = last["text"].get<std::string>() + std::string(text);
      return;
    }
  }
  outputs_.push_back({{"output_type", "stream"}, {"name", name}, {"text", std::string(text)}});
}

Status CellOutputs::CheckCell(const nlohmann::json& f) const {
  KILN_ASSIGN_OR_RETURN(int64_t cell, ipc::GetInt(f, "cell"));
  if (cell != cell_) {
    return InvalidArgument("frame for cell " + std::to_string(cell) + " during cell " +
                           std::to_string(cell_));
  }
  return OkStatus();
}

Result<CellOutputs::FrameVerdict> CellOutputs::OnFrame(const nlohmann::json& f, size_t wire_bytes) {
  frame_bytes_ += wire_bytes;
  if (frame_bytes_ > frame_budget_ || outputs_.size() >= kMaxOutputsPerCell) {
    return FrameVerdict::kOverBudget;
  }
  KILN_ASSIGN_OR_RETURN(std::string type, ipc::GetString(f, "type"));
  if (replied()) return InvalidArgument("frame '" + type + "' after the cell's execute_reply");
  KILN_TRY(CheckCell(f));

  if (type == "display_data" || type == "execute_result") {
    KILN_ASSIGN_OR_RETURN(nlohmann::json data, ipc::GetStringMap(f, "data"));
    nlohmann::json metadata = nlohmann::json::object();
    if (auto it = f.find("metadata"); it != f.end()) {
      if (!it->is_object()) return InvalidArgument("member \"metadata\" must be an object");
      metadata = *it;
    }
    if (data.contains("image/png")) {
      const uint64_t size = Base64DecodedSize(data["image/png"].get<std::string>());
      if (images_ + 1 > limits_.max_images || image_bytes_ + size > limits_.max_image_bytes) {
        ++dropped_;
        return FrameVerdict::kAccepted;
      }
      ++images_;
      image_bytes_ += size;
    }
    nlohmann::json out = {{"output_type", type}, {"data", data}, {"metadata", metadata}};
    if (type == "execute_result") {
      KILN_ASSIGN_OR_RETURN(int64_t count, ipc::GetInt(f, "execution_count"));
      out["execution_count"] = count;
    }
    outputs_.push_back(std::move(out));
    return FrameVerdict::kAccepted;
  }
  if (type == "error") {
    CellError e;
    KILN_ASSIGN_OR_RETURN(e.name, ipc::GetString(f, "ename"));
    KILN_ASSIGN_OR_RETURN(e.value, ipc::GetString(f, "evalue"));
    auto tb = f.find("traceback");
    if (tb == f.end() || !tb->is_array())
      return InvalidArgument("member \"traceback\" must be an array");
    for (const auto& line : *tb) {
      if (!line.is_string()) return InvalidArgument("member \"traceback\" must hold strings");
      e.traceback.push_back(line.get<std::string>());
    }
    outputs_.push_back({{"output_type", "error"},
                        {"ename", e.name},
                        {"evalue", e.value},
                        {"traceback", e.traceback}});
    error_ = std::move(e);
    return FrameVerdict::kAccepted;
  }
  if (type == "policy_violation") {
    PolicyViolationInfo v;
    KILN_ASSIGN_OR_RETURN(v.module, ipc::GetString(f, "module"));
    KILN_ASSIGN_OR_RETURN(v.line, ipc::GetInt(f, "line"));
    KILN_ASSIGN_OR_RETURN(v.message, ipc::GetString(f, "message"));
    outputs_.push_back({{"output_type", "error"},
                        {"ename", "ImportPolicyViolation"},
                        {"evalue", v.message},
                        {"traceback", nlohmann::json::array({v.message})}});
    error_ = CellError{"ImportPolicyViolation", v.message, {v.message}};
    violation_ = std::move(v);
    return FrameVerdict::kAccepted;
  }
  if (type == "command_started") {
    KILN_ASSIGN_OR_RETURN(int64_t pid, ipc::GetInt(f, "pid"));
    if (command_pid_ || pid <= 0 || pid > (int64_t{1} << 22))
      return InvalidArgument("'command_started' twice or with a pid out of range");
    command_pid_ = pid;
    return FrameVerdict::kAccepted;
  }
  if (type == "execute_reply") {
    KILN_ASSIGN_OR_RETURN(std::string status, ipc::GetString(f, "status"));
    if (status != "ok" && status != "error" && status != "policy_violation" && status != "exit" &&
        status != "command") {
      return InvalidArgument("execute_reply status '" + status + "' is unknown");
    }
    if (auto it = f.find("execution_count"); it != f.end() && !it->is_null()) {
      if (!it->is_number_integer())
        return InvalidArgument("member \"execution_count\" must be an integer");
      execution_count_ = it->get<int64_t>();
    }
    if (status == "exit" || status == "command") {
      KILN_ASSIGN_OR_RETURN(int64_t code, ipc::GetInt(f, "exit_code"));
      if (status == "command" && (code < 0 || code > 255 || !command_pid_))
        return InvalidArgument("a command's execute_reply without its start or exit code 0-255");
      exit_code_ = code;
    }
    if (auto it = f.find("dropped"); it != f.end()) {
      if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
        return InvalidArgument("member \"dropped\" must be a non-negative integer");
      }
      // Saturating: the runtime's count must not wrap kiln's own to a small
      // number (2^64 - 1 after one image kiln dropped read 0; found by
      // fuzz/cell_outputs_fuzzer.cc).
      const uint64_t n = it->get<uint64_t>();
      dropped_ = n > std::numeric_limits<uint64_t>::max() - dropped_
                     ? std::numeric_limits<uint64_t>::max()
                     : dropped_ + n;
    }
    reply_status_ = std::move(status);
    return FrameVerdict::kAccepted;
  }
  return InvalidArgument("unknown frame type '" + type + "'");
}

}  // namespace kiln::supervisor
