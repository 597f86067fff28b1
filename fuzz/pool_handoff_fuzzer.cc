// The pool's records (src/zygote/handoff.h): the warm pool process hands
// each ready sandbox to the spawner as one fixed-size record with six fds
// (SCM_RIGHTS) on a SOCK_SEQPACKET socket, and its status as another record
// without fds; zygote::ReceiveFromPool decodes them and refuses anything else.
//
// Input: byte 0 is how the record is sent (fds attached, credentials, a hang
// up after it: fuzz/record_channel.h); the rest is the record's bytes. Checked:
// a handoff is accepted only with exactly six fds, its names are C strings
// cut at their fields' sizes, a refused record is kInternal (malformed) or
// kUnavailable (the pool is gone), and no received fd stays open once the
// result is gone, accepted or not.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "record_channel.h"
#include "zygote/handoff.h"

namespace {

using kiln::fuzz::OpenFds;
using kiln::fuzz::RecordChannel;
using kiln::fuzz::RecordShape;

void CheckHandoff(const kiln::zygote::Handoff& h, size_t fds_sent) {
  FUZZ_CHECK(fds_sent == 6);
  const auto& a = h.sandbox;
  for (const kiln::UniqueFd* fd :
       {&a.init_pidfd, &a.sync, &a.runtime, &a.out, &a.err, &a.workspace}) {
    FUZZ_CHECK(fd->valid());
  }
  FUZZ_CHECK(h.profile.size() <= 64 && h.profile.find('\0') == std::string::npos);
  FUZZ_CHECK(h.cgroup_name.size() <= 96 && h.cgroup_name.find('\0') == std::string::npos);
  (void)h.alive();  // a poll on the pidfd (here /dev/null: readable, so not alive)
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  std::string_view payload = input.text();
  const RecordShape shape = RecordShape::From(kiln::fuzz::TakeByte(&payload));

  RecordChannel channel;
  const bool sent = channel.Send(payload, shape);
  const OpenFds before = OpenFds::Now();
  {
    auto got = kiln::zygote::ReceiveFromPool(channel.receiver());
    if (got.ok() && got->has_value()) {
      FUZZ_CHECK(sent && !payload.empty());
      const kiln::zygote::FromPool& from = **got;
      FUZZ_CHECK(from.handoff.has_value() != from.status.has_value());
      if (from.handoff) CheckHandoff(*from.handoff, shape.fds);
      if (from.status) {
        FUZZ_CHECK(shape.fds == 0);
        const auto& s = *from.status;
        FUZZ_CHECK(!s.profile.empty() && s.profile.size() <= 64 &&
                   s.profile.find('\0') == std::string::npos);
        FUZZ_CHECK(std::isfinite(s.refill_ms_total) && s.refill_ms_total >= 0);
        FUZZ_CHECK(std::isfinite(s.last_refill_ms) && s.last_refill_ms >= 0);
      }
    } else if (got.ok()) {
      FUZZ_CHECK(!sent);  // nothing waiting
    } else {
      FUZZ_CHECK(got.error().code == kiln::Code::kInternal ||
                 got.error().code == kiln::Code::kUnavailable);
    }
  }
  FUZZ_CHECK(OpenFds::Now() == before);  // nothing received stays open
  return 0;
}
