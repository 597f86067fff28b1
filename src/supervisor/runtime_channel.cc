#include "supervisor/runtime_channel.h"

#include <utility>

namespace kiln::supervisor {

RuntimeChannel::RuntimeChannel(Limits limits) : limits_(limits), frames_(limits.max_frame) {}

void RuntimeChannel::BeginCell(int64_t number, const policy::DisplayLimits& display, bool last) {
  cell_.reset();
  cell_.emplace(number, display, limits_.cell_frame_budget, last);
  cell_number_ = number;
}

void RuntimeChannel::EndCell() { cell_.reset(); }

void RuntimeChannel::SendExecute(const std::string& code, const std::string& filename,
                                 const policy::ImportPolicy& import_policy,
                                 const policy::DisplayLimits& display,
                                 const nlohmann::json& extra) {
  nlohmann::json modules = import_policy.modules;
  nlohmann::json frame = {
      {"type", "execute"},
      {"cell", cell_number_},
      {"code", code},
      {"filename", filename},
      {"import_policy",
       {{"mode", std::string(policy::ToString(import_policy.mode))}, {"modules", modules}}},
      {"limits",
       {{"max_images", display.max_images}, {"max_image_bytes", display.max_image_bytes}}}};
  for (const char* key : {"context", "reset_contexts", "env", "command", "cwd"}) {
    if (auto it = extra.find(key); it != extra.end() && !it->is_null()) frame[key] = *it;
  }
  outbox_ += ipc::EncodeMessage(frame);
}

RuntimeChannel::Event RuntimeChannel::Next(const std::function<void()>& before_frame) {
  auto next = frames_.Next();
  if (!next.ok()) return Violation("the runtime sent an oversized frame: " + next.error().message);
  if (!next->has_value()) return {};
  const std::string payload = std::move(**next);
  if (before_frame) before_frame();
  auto parsed = ipc::ParseFrame(payload);
  if (!parsed.ok())
    return Violation("the runtime sent a malformed frame: " + parsed.error().message);
  const std::string type = (*parsed)["type"].get<std::string>();
  if (type == "hello") {
    auto version = ipc::GetInt(*parsed, "protocol");
    if (hello_ || cell_) return Make(EventKind::kBadHello, "the runtime said hello twice");
    if (!version.ok() || *version != ipc::kProtocolVersion) {
      return Make(EventKind::kBadHello,
                  "the runtime speaks protocol " +
                      (version.ok() ? std::to_string(*version) : std::string("?")) +
                      ", kiln speaks " + std::to_string(ipc::kProtocolVersion));
    }
    hello_ = true;
    return Make(EventKind::kHello);
  }
  if (cell_ && cell_->outputs.replied() && cell_->last) {
    // After a one-shot cell: the program's exit work (its threads may still
    // write, in order) and then the exit code.
    if (type == "sync" && !exit_code_ && ++cell_->syncs <= limits_.max_syncs_per_cell) {
      outbox_ += ipc::EncodeMessage({{"type", "synced"}});
      return Make(EventKind::kSynced);
    }
    if (type == "exiting" && !exit_code_) {
      auto code = ipc::GetInt(*parsed, "exit_code");
      if (!code.ok() || *code < 0 || *code > 255) {
        return Violation("the runtime sent a malformed 'exiting' frame");
      }
      exit_code_ = static_cast<int>(*code);
      return Make(EventKind::kExiting, "", *exit_code_);
    }
  }
  if (!cell_ || cell_->outputs.replied()) {
    return Violation("the runtime sent '" + type + "' " +
                     (cell_ ? "after the cell's execute_reply" : "before any cell"));
  }
  if (type == "sync") {
    // The caller drained the pipes up to this frame (before_frame): stdout
    // and stderr written before it are in order; let the runtime go on.
    if (++cell_->syncs > limits_.max_syncs_per_cell) return Make(EventKind::kOutputLimit);
    outbox_ += ipc::EncodeMessage({{"type", "synced"}});
    return Make(EventKind::kSynced);
  }
  auto verdict = cell_->outputs.OnFrame(*parsed, payload.size() + 4);
  if (!verdict.ok()) return Violation("the runtime broke the protocol: " + verdict.error().message);
  if (*verdict == CellOutputs::FrameVerdict::kOverBudget) return Make(EventKind::kOutputLimit);
  if (!cell_->outputs.replied()) return Make(EventKind::kOutput);
  if (cell_->last && !cell_->shutdown_sent) {
    // One-shot: the cell is done; the runtime exits with its status.
    outbox_ += ipc::EncodeMessage({{"type", "shutdown"}});
    cell_->shutdown_sent = true;
  }
  return Make(EventKind::kReplied);
}

std::optional<std::string> RuntimeChannel::TruncatedFrame() const {
  if (frames_.pending() == 0) return std::nullopt;
  return "the runtime's channel ended inside a frame (" + std::to_string(frames_.pending()) +
         " bytes of a truncated frame)";
}

}  // namespace kiln::supervisor
