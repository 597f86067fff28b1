// The job channel's request frame (docs/protocol.md section 5;
// src/spawner/spawner.h): the first frame a supervisor reads from its job
// socket, decoded by DecodeRequest, or by DecodeSessionRequest when its type
// is "session_start" (as RunJob dispatches it). The far end is the server,
// but a malformed frame must be an error, never an exception (spawner/job_channel.cc).
//
// Input: the frame's payload. Checked: decoding returns (an error or a
// request); a decoded request goes through EncodeRequest and the wire again
// and decodes to the same request, field by field.
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
    auto r = kiln::spawner::DecodeSessionRequest(*frame);
    if (r.ok()) kiln::fuzz::CheckRoundTrip(*r);
  } else {
    auto r = kiln::spawner::DecodeRequest(*frame);
    if (r.ok()) kiln::fuzz::CheckRoundTrip(*r);
  }
  return 0;
}
