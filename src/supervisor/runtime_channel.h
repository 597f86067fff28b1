// RuntimeChannel: the supervisor's side of the runtime channel
// (docs/protocol.md, section 2) over bytes: the frames the runtime sends,
// checked (P19) and turned into the current cell's CellOutputs, and the
// frames for the runtime (execute, synced, shutdown) queued in an outbox.
//
// No fd, no clock, no process: the owner (supervisor::Sandbox, sandbox.cc)
// reads the socket, feeds the bytes, handles each event (kills, timings,
// streaming) and writes the outbox. Runs in the supervisor process (`kiln
// run`, kiln-supervise); unit-tested on raw bytes (runtime_channel_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ipc/frame.h"
#include "policy/policy.h"
#include "supervisor/cell_outputs.h"

namespace kiln::supervisor {

class RuntimeChannel final {
 public:
  struct Limits {
    size_t max_frame = ipc::kMaxFrameBytes;
    // All frames of one cell together (rich outputs, tracebacks): past it,
    // kOutputLimit. Images have their own, smaller caps (CellOutputs).
    uint64_t cell_frame_budget = 64ULL << 20;
    // stdout/stderr switches the runtime may ask to order (one round trip
    // each).
    uint64_t max_syncs_per_cell = 1000000;
  };
  RuntimeChannel() : RuntimeChannel(Limits{}) {}
  explicit RuntimeChannel(Limits limits);

  // A cell begins: its outputs start empty (the previous cell's are
  // dropped). `last`: the one-shot cell, after which the runtime is told to
  // shut down and may send only `sync` and `exiting`.
  void BeginCell(int64_t number, const policy::DisplayLimits& display, bool last);
  // No cell any more (the sandbox ended between cells).
  void EndCell();
  // Queues the current cell's `execute` frame.
  // `extra`: the cell's other members (docs/protocol.md: context,
  // reset_contexts, env, command), from the server's trusted request.
  void SendExecute(const std::string& code, const std::string& filename,
                   const policy::ImportPolicy& import_policy, const policy::DisplayLimits& display,
                   const nlohmann::json& extra = nlohmann::json::object());

  // Bytes read from the runtime's socket.
  void Feed(const char* data, size_t size) { frames_.Feed(data, size); }

  enum class EventKind {
    kNone,           // no complete frame buffered
    kHello,          // the runtime's hello, of our protocol version
    kSynced,         // a `sync`, answered (`synced` queued)
    kOutput,         // a cell's frame accepted (outputs() may have grown)
    kReplied,        // its execute_reply (a one-shot's `shutdown` queued)
    kExiting,        // one-shot: `exiting` with exit_code
    kProtocolError,  // the runtime broke the protocol: reason (kill the sandbox)
    // A second hello, or one of another version: a protocol error too, but
    // the frames after it are still handled (as they always were).
    kBadHello,
    kOutputLimit,  // the cell's frames passed their budget, or too many syncs
  };
  struct Event {
    EventKind kind = EventKind::kNone;
    std::string reason;  // kProtocolError
    int exit_code = 0;   // kExiting
  };
  // Handles the next complete frame. `before_frame` runs once a frame is
  // complete and before it is handled: text the runtime wrote to the capture
  // pipes before this frame is then read first (outputs().AddStream), so
  // text and rich outputs keep their order.
  Event Next(const std::function<void()>& before_frame = {});

  bool hello() const { return hello_; }
  bool has_cell() const { return cell_.has_value(); }
  // The current cell's outputs; precondition: has_cell().
  CellOutputs& outputs() { return cell_->outputs; }
  const CellOutputs& outputs() const { return cell_->outputs; }
  // The current cell's execute_reply arrived.
  bool replied() const { return cell_ && cell_->outputs.replied(); }
  // One-shot: the exit code the runtime reported (`exiting`).
  std::optional<int> exit_code() const { return exit_code_; }

  // Frames for the runtime, to be written when its socket is writable;
  // erase what was written.
  std::string& outbox() { return outbox_; }

  // Bytes of an incomplete frame; at EOF, the protocol error it makes
  // (nullopt: the channel ended between frames).
  size_t pending() const { return frames_.pending(); }
  std::optional<std::string> TruncatedFrame() const;

 private:
  struct Cell {
    Cell(int64_t number, const policy::DisplayLimits& display, uint64_t budget, bool l)
        : outputs(number, display, budget), last(l) {}
    CellOutputs outputs;
    bool last;
    uint64_t syncs = 0;
    bool shutdown_sent = false;
  };
  static Event Make(EventKind kind, std::string reason = "", int exit_code = 0) {
    Event e;
    e.kind = kind;
    e.reason = std::move(reason);
    e.exit_code = exit_code;
    return e;
  }
  static Event Violation(std::string reason) {
    return Make(EventKind::kProtocolError, std::move(reason));
  }

  Limits limits_;
  ipc::FrameReader frames_;
  std::string outbox_;
  bool hello_ = false;
  std::optional<Cell> cell_;
  int64_t cell_number_ = 0;
  std::optional<int> exit_code_;
};

}  // namespace kiln::supervisor
