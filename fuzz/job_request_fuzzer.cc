// The job channel's plan frame (docs/protocol.md section 5;
// src/spawner/spawner.h): the first frame a supervisor reads from its job
// socket, decoded by DecodePlan, or by DecodeSessionPlan when its type is
// "session_start" (as RunJob dispatches it), with its policy
// (policy::DecodePolicy). The far end is the server, but a malformed frame
// must be an error, never an exception (spawner/job_channel.cc). No fds come
// with it here, so a plan naming input files is refused.
//
// Input: the frame's payload. Checked: decoding returns (an error or a
// plan); a decoded plan goes through EncodePlan and the wire again and
// encodes to the same frame.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "ipc/frame.h"
#include "job_channel.h"
#include "spawner/spawner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  auto frame = kiln::ipc::ParseFrame(input.text());
  if (!frame.ok()) return 0;
  if (frame->value("type", "") == "session_start") {
    auto r = kiln::spawner::DecodeSessionPlan(*frame, {});
    if (r.ok()) kiln::fuzz::CheckRoundTrip(*r);
  } else {
    auto r = kiln::spawner::DecodePlan(*frame, {});
    if (r.ok()) kiln::fuzz::CheckRoundTrip(*r);
  }
  return 0;
}
