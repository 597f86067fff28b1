// src/supervisor/cell_outputs.h: one cell's results assembled from hostile
// frames of the runtime channel (docs/protocol.md), with stdout and stderr
// text between them.
//
// Input: byte 0 picks the limits (images, image bytes, the frame budget) and
// the cell's number; the rest is lines, each one event of the cell: a line
// starting with \x01 or \x02 is text read from stdout or stderr, any other
// line one frame's payload. As in the supervisor (sandbox.cc, HandleFrames),
// each payload goes through ParseFrame, `sync` frames are answered outside
// CellOutputs, and the first malformed frame, protocol violation or budget
// overrun ends the cell. Checked after each event: the outputs keep the
// nbformat shapes kiln's API documents, the image caps hold whatever the
// runtime claims, drops are counted, a reply ends the cell, and the outputs
// serialize.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "ipc/frame.h"
#include "supervisor/cell_outputs.h"

namespace {

using kiln::supervisor::CellOutputs;
using nlohmann::json;

bool IsStringArray(const json& j) {
  if (!j.is_array()) return false;
  for (const auto& v : j) {
    if (!v.is_string()) return false;
  }
  return true;
}

bool IsStringMap(const json& j) {
  if (!j.is_object()) return false;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) return false;
  }
  return true;
}

// A member, or null when absent (operator[] on a const object must not be
// asked for a missing key).
const json& Member(const json& o, const char* key) {
  static const json kNull;
  const auto it = o.find(key);
  return it == o.end() ? kNull : *it;
}

// The outputs as docs/api.md describes them, within the caps.
void CheckOutputs(const CellOutputs& c, const kiln::policy::DisplayLimits& limits) {
  const json& outs = c.outputs();
  FUZZ_CHECK(outs.is_array());
  FUZZ_CHECK(outs.size() <= kiln::supervisor::kMaxOutputsPerCell);
  uint64_t images = 0, image_bytes = 0;
  for (const auto& o : outs) {
    FUZZ_CHECK(o.is_object() && o.contains("output_type") && o["output_type"].is_string());
    const std::string type = o["output_type"].get<std::string>();
    if (type == "stream") {
      FUZZ_CHECK(Member(o, "name") == "stdout" || Member(o, "name") == "stderr");
      FUZZ_CHECK(Member(o, "text").is_string() && !Member(o, "text").get<std::string>().empty());
    } else if (type == "display_data" || type == "execute_result") {
      const json& d = Member(o, "data");
      FUZZ_CHECK(IsStringMap(d));
      FUZZ_CHECK(Member(o, "metadata").is_object());
      if (type == "execute_result") FUZZ_CHECK(Member(o, "execution_count").is_number_integer());
      if (d.contains("image/png")) {
        ++images;
        image_bytes +=
            kiln::supervisor::Base64DecodedSize(Member(d, "image/png").get<std::string>());
      }
    } else {
      FUZZ_CHECK(type == "error");
      FUZZ_CHECK(Member(o, "ename").is_string() && Member(o, "evalue").is_string() &&
                 IsStringArray(Member(o, "traceback")));
    }
  }
  FUZZ_CHECK(images <= limits.max_images);
  FUZZ_CHECK(image_bytes <= limits.max_image_bytes);
  if (c.replied()) {
    const std::string& s = *c.reply_status();
    FUZZ_CHECK(s == "ok" || s == "error" || s == "policy_violation" || s == "exit");
    if (s == "exit") FUZZ_CHECK(c.exit_code().has_value());
  }
  if (c.policy_violation()) {
    FUZZ_CHECK(c.error().has_value() && c.error()->name == "ImportPolicyViolation");
  }
  // What the server and the event stream do with them.
  (void)outs.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  std::string_view rest = input.text();
  const uint8_t mode = kiln::fuzz::TakeByte(&rest);
  kiln::policy::DisplayLimits limits;
  static constexpr uint64_t kImages[] = {0, 1, 2, 16};
  static constexpr uint64_t kImageBytes[] = {0, 3, 100, 8ULL << 20};
  static constexpr uint64_t kBudgets[] = {64ULL << 20, 64, 512, 4096};
  limits.max_images = kImages[mode & 3];
  limits.max_image_bytes = kImageBytes[(mode >> 2) & 3];
  const uint64_t budget = kBudgets[(mode >> 4) & 3];
  const int64_t cell = (mode & 0x40) != 0 ? 7 : 0;

  CellOutputs c(cell, limits, budget);
  uint64_t dropped_by_kiln = 0;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    if (!line.empty() && (line[0] == '\x01' || line[0] == '\x02')) {
      const char* name = line[0] == '\x01' ? "stdout" : "stderr";
      const std::string_view text = line.substr(1);
      c.AddStream(name, text);
      if (!text.empty()) {
        const json& last = c.outputs().back();
        FUZZ_CHECK(Member(last, "name") == name);
        const std::string merged = Member(last, "text").get<std::string>();
        FUZZ_CHECK(merged.size() >= text.size() &&
                   merged.compare(merged.size() - text.size(), text.size(), text) == 0);
      }
      CheckOutputs(c, limits);
      continue;
    }
    auto frame = kiln::ipc::ParseFrame(line);
    if (!frame.ok()) break;  // the supervisor's protocol_error
    if (Member(*frame, "type") == "sync" && !c.replied()) continue;
    const bool replied_before = c.replied();
    const size_t outputs_before = c.outputs().size();
    const json& type = Member(*frame, "type");
    const bool image = (type == "display_data" || type == "execute_result") &&
                       Member(*frame, "data").is_object() &&
                       Member(*frame, "data").contains("image/png");
    auto verdict = c.OnFrame(*frame, line.size() + 4);
    if (!verdict.ok()) {
      FUZZ_CHECK(verdict.error().code == kiln::Code::kInvalidArgument);
      break;
    }
    if (*verdict == CellOutputs::FrameVerdict::kOverBudget) break;
    FUZZ_CHECK(!replied_before);  // nothing is accepted after the reply
    if (image && c.outputs().size() == outputs_before) ++dropped_by_kiln;
    FUZZ_CHECK(c.dropped() >= dropped_by_kiln);
    CheckOutputs(c, limits);
  }
  CheckOutputs(c, limits);
  return 0;
}
