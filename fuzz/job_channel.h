// The job channel between the server and a supervisor (docs/protocol.md
// section 5) as the fuzz targets use it: a request planned as the server
// plans it (PlanExecution), through the same encoding and decoding as a real
// one (EncodePlan, a frame, FrameReader, ParseFrame, DecodePlan), and a
// comparison of what arrives.
#pragma once

#include <optional>
#include <string>

#include "fuzz_util.h"
#include "ipc/frame.h"
#include "spawner/job_channel.h"
#include "spawner/spawner.h"
#include "supervisor/input_files.h"

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

// A plan through the wire and back encodes to the same frame (policy
// included) with the same open files.
template <typename Plan, typename Encode, typename Decode>
void CheckPlanRoundTrip(const Plan& plan, Encode encode, Decode decode) {
  spawner::SharedFds fds;
  auto frame = encode(plan, &fds);
  FUZZ_CHECK(frame.ok());
  auto back = decode(OverTheWire(*frame), fds);
  FUZZ_CHECK(back.ok());
  spawner::SharedFds again;
  auto frame2 = encode(*back, &again);
  FUZZ_CHECK(frame2.ok());
  FUZZ_CHECK(*frame2 == *frame);
  FUZZ_CHECK(again.size() == fds.size());
  for (size_t i = 0; i < fds.size(); ++i) FUZZ_CHECK(again[i]->get() == fds[i]->get());
}

inline void CheckRoundTrip(const spawner::ExecPlan& p) {
  CheckPlanRoundTrip(p, spawner::EncodePlan, spawner::DecodePlan);
}
inline void CheckRoundTrip(const spawner::SessionPlan& p) {
  CheckPlanRoundTrip(p, spawner::EncodeSessionPlan, spawner::DecodeSessionPlan);
}

// What the server accepted reaches the supervisor unchanged: its plan (with
// the built-in profiles; a request a profile refuses stops there) round
// trips, and carries the request's code, environment and files.
inline void CheckRoundTrip(spawner::ExecRequest r) {
  const spawner::ExecRequest asked = r;
  auto plan = spawner::PlanExecution(config::BuiltinConfig(), {}, r);
  if (!plan.ok()) return;
  FUZZ_CHECK(plan->code == asked.code && plan->filename == asked.filename &&
             plan->env == asked.env && plan->return_files == asked.return_files);
  const auto& files = plan->policy->input_files();
  FUZZ_CHECK(files.size() == asked.files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    FUZZ_CHECK(files[i].name == asked.files[i].first);
    auto bytes = supervisor::ReadInput({files[i].fd->get(), files[i].name, files[i].size});
    FUZZ_CHECK(bytes.ok() && *bytes == asked.files[i].second);
  }
  CheckRoundTrip(*plan);
}

inline void CheckRoundTrip(const spawner::SessionRequest& r) {
  auto plan = spawner::PlanSession(config::BuiltinConfig(), {}, r);
  if (!plan.ok()) return;
  FUZZ_CHECK(plan->env == r.env && plan->max_file_bytes == r.max_file_bytes);
  CheckRoundTrip(*plan);
}

}  // namespace kiln::fuzz
