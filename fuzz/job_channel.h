// The job channel between the server and a supervisor (docs/protocol.md
// section 5) as the fuzz targets use it: a request through the same encoding
// and decoding as a real one (EncodeRequest, a frame, FrameReader, ParseFrame,
// DecodeRequest), and field-by-field comparison of what arrives.
#pragma once

#include <optional>
#include <string>

#include "fuzz_util.h"
#include "ipc/frame.h"
#include "spawner/spawner.h"

namespace kiln::fuzz {

// The bytes of `message` on the job socket and back: the frame the far end reads.
inline nlohmann::json OverTheWire(const nlohmann::json& message) {
  const std::string wire = ipc::EncodeMessage(message);
  ipc::FrameReader reader;
  reader.Feed(wire.data(), wire.size());
  auto next = reader.Next();
  FUZZ_CHECK(next.ok() && next->has_value() && reader.pending() == 0);
  auto frame = ipc::ParseFrame(**next);
  FUZZ_CHECK(frame.ok());
  return *frame;
}

template <typename T>
bool SameOptional(const std::optional<T>& a, const std::optional<T>& b) {
  return a.has_value() == b.has_value() && (!a || *a == *b);
}

inline bool SameLimits(const config::LimitSpec& a, const config::LimitSpec& b) {
  return SameOptional(a.timeout_s, b.timeout_s) && SameOptional(a.cpu_time_s, b.cpu_time_s) &&
         SameOptional(a.memory_bytes, b.memory_bytes) && SameOptional(a.cpus, b.cpus) &&
         SameOptional(a.pids, b.pids) && SameOptional(a.output_bytes, b.output_bytes) &&
         SameOptional(a.disk_bytes, b.disk_bytes);
}

inline bool SameRequest(const spawner::ExecRequest& a, const spawner::ExecRequest& b) {
  return a.id == b.id && a.profile == b.profile && SameLimits(a.limits, b.limits) &&
         a.code == b.code && a.filename == b.filename && a.files == b.files &&
         a.return_files == b.return_files && a.env == b.env && a.stream == b.stream;
}

inline bool SameSessionRequest(const spawner::SessionRequest& a, const spawner::SessionRequest& b) {
  return a.id == b.id && a.profile == b.profile && SameLimits(a.limits, b.limits) &&
         a.env == b.env && a.max_lifetime_s == b.max_lifetime_s &&
         a.interrupt_grace_s == b.interrupt_grace_s && a.max_file_bytes == b.max_file_bytes;
}

// What the supervisor decodes of `r` as the server sends it; must be `r`.
inline void CheckRoundTrip(const spawner::ExecRequest& r) {
  auto back = spawner::DecodeRequest(OverTheWire(spawner::EncodeRequest(r)));
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(SameRequest(*back, r));
}

inline void CheckRoundTrip(const spawner::SessionRequest& r) {
  const nlohmann::json frame = OverTheWire(spawner::EncodeSessionRequest(r));
  FUZZ_CHECK(frame.value("type", "") == "session_start");
  auto back = spawner::DecodeSessionRequest(frame);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(SameSessionRequest(*back, r));
}

}  // namespace kiln::fuzz
