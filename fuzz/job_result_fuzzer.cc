// The job channel's result frame (docs/protocol.md section 5;
// src/spawner/spawner.h): what the server reads back from a supervisor,
// which built it from hostile frames. DecodeResult reads the result typed
// (supervisor::FromJson) and the returned files from the one sealed memfd
// beside it; a malformed frame or a memfd that does not match must be an
// error, never an exception or a read past the memfd.
//
// Input: a mode byte, then the frame's payload, a NUL, and the memfd's bytes.
// Mode bit 0: send the memfd; bit 1: leave it unsealed (which must be
// refused). Checked: decoding returns (an error or a response); a decoded
// response's files add up to the memfd, and through EncodeResult and the wire
// again it decodes to the same result and the same files.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/unique_fd.h"
#include "fuzz_util.h"
#include "ipc/frame.h"
#include "job_channel.h"
#include "policy/policy_codec.h"
#include "spawner/spawner.h"
#include "supervisor/execution_result.h"

namespace {

kiln::UniqueFd Memfd(std::string_view bytes, bool sealed) {
  if (sealed) {
    auto fd = kiln::policy::SealedMemfd("kiln-fuzz-files", std::vector<std::string_view>{bytes});
    FUZZ_CHECK(fd.ok());
    return std::move(*fd);
  }
  kiln::UniqueFd fd(::memfd_create("kiln-fuzz-files", MFD_CLOEXEC));
  FUZZ_CHECK(fd);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    FUZZ_CHECK(n > 0);
    done += static_cast<size_t>(n);
  }
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  std::string_view text = input.text();
  const uint8_t mode = kiln::fuzz::TakeByte(&text);
  const size_t nul = text.find('\0');
  const std::string_view payload = text.substr(0, nul);
  const std::string_view bytes = nul == std::string_view::npos ? "" : text.substr(nul + 1);
  auto frame = kiln::ipc::ParseFrame(payload);
  if (!frame.ok()) return 0;
  kiln::spawner::SharedFds fds;
  if (mode & 1) {
    fds.push_back(std::make_shared<const kiln::UniqueFd>(Memfd(bytes, !(mode & 2))));
  }
  auto r = kiln::spawner::DecodeResult(*frame, fds);
  if (!r.ok()) return 0;
  FUZZ_CHECK(!(mode & 2) || r->result.returned_files.empty());
  size_t total = 0;
  for (const auto& f : r->result.returned_files) total += f.content.size();
  FUZZ_CHECK(fds.empty() ? total == 0 : total == bytes.size());

  kiln::spawner::SharedFds again;
  auto encoded = kiln::spawner::EncodeResult(r->result, &again);
  FUZZ_CHECK(encoded.ok());
  auto back = kiln::spawner::DecodeResult(kiln::fuzz::OverTheWire(*encoded), again);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(kiln::supervisor::ToJson(back->result, false) ==
             kiln::supervisor::ToJson(r->result, false));
  FUZZ_CHECK(back->result.returned_files.size() == r->result.returned_files.size());
  for (size_t i = 0; i < r->result.returned_files.size(); ++i) {
    FUZZ_CHECK(back->result.returned_files[i].path == r->result.returned_files[i].path);
    FUZZ_CHECK(back->result.returned_files[i].content == r->result.returned_files[i].content);
  }
  return 0;
}
