// The setup channel (docs/protocol.md section 1; src/child/sync_message.h):
// fixed-size SyncMessage records a sandbox's pid 1 and worker send to the
// supervisor over a SOCK_SEQPACKET socketpair, with an fd (SCM_RIGHTS) or the
// sender's pid (SCM_CREDENTIALS) attached. The supervisor reads them with
// supervisor::ReceiveSync (src/supervisor/sync_channel.h) and refuses
// anything that is not exactly one record.
//
// Input: byte 0 is how the record is sent (fds attached, credentials, a hang
// up after it: fuzz/record_channel.h); the rest is the record's bytes. Checked:
// a record is garbage exactly when it is not 16 bytes with at most one fd;
// the sender's pid arrives; the fields decode as the supervisor decodes them
// (sandbox.cc, OnSyncRecords and DescribeFailure); and no received fd stays
// open once the Received is gone, whatever was sent.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/setup_step.h"
#include "child/sync_message.h"
#include "fuzz_util.h"
#include "record_channel.h"
#include "supervisor/sync_channel.h"

namespace {

using kiln::child::SyncMessage;
using kiln::child::SyncTag;
using kiln::fuzz::OpenFds;
using kiln::fuzz::RecordChannel;
using kiln::fuzz::RecordShape;
using kiln::supervisor::Received;
using kiln::supervisor::ReceiveSync;

// The fields as the supervisor reads them.
void Decode(const Received& m) {
  switch (m.msg.tag) {
    case SyncTag::kFailure: {
      const std::string_view step = kiln::ToString(static_cast<kiln::SetupStep>(m.msg.step));
      FUZZ_CHECK(!step.empty());
      if (m.msg.err > 0) FUZZ_CHECK(std::strerror(m.msg.err) != nullptr);
      break;
    }
    case SyncTag::kWorkspaceFd:
    case SyncTag::kWorkerStarted:
    case SyncTag::kWorkerExited:
    case SyncTag::kMapsWritten:
    case SyncTag::kAttachMe:
    case SyncTag::kAttached:
    default: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  std::string_view payload = input.text();
  const RecordShape shape = RecordShape::From(kiln::fuzz::TakeByte(&payload));

  RecordChannel channel;
  const bool sent = channel.Send(payload, shape);
  const OpenFds before = OpenFds::Now();  // the fds in flight are not ours yet
  {
    Received m = ReceiveSync(channel.receiver());
    if (!sent) {
      FUZZ_CHECK(m.again || m.eof);
    } else if (payload.empty()) {
      // recvmsg(2) returns 0 for an empty record as at the end of the stream:
      // the supervisor stops reading the channel (the sandbox only stops its own setup).
      FUZZ_CHECK(m.eof);
    } else {
      FUZZ_CHECK(!m.eof && !m.again);
      FUZZ_CHECK(m.garbage == (payload.size() != sizeof(SyncMessage) || shape.fds > 1));
      FUZZ_CHECK(m.sender == ::getpid());  // SO_PASSCRED: the kernel says who sent it
      FUZZ_CHECK(m.fd.valid() == (shape.fds >= 1));
      if (!m.garbage) Decode(m);
    }
  }
  FUZZ_CHECK(OpenFds::Now() == before);  // nothing received stays open

  Received after = ReceiveSync(channel.receiver());
  FUZZ_CHECK(shape.close_after ? after.eof : after.again);
  return 0;
}
