// src/ipc/frame.h: the runtime channel as the supervisor reads it from a
// sandbox: FrameReader cuts the byte stream into frames (4-byte big-endian
// length, at most a maximum), ParseFrame makes each payload a JSON object with
// a string "type", and GetString/GetInt/GetStringMap read its members.
//
// Input: byte 0 picks the reader's maximum (low 6 bits), or (0xff) a 1 MiB
// frame first, so that later frames cross the buffer's compaction; byte 1 the
// size
// of the chunks the stream is fed in (as read(2) would cut it); the rest is
// the stream. Checked against a reference cut of the same bytes: the same
// payloads in the same order, the over-limit error exactly where a length is
// over the maximum, the same bytes pending at the end. Every parsed frame
// survives EncodeMessage and parsing again unchanged.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/json_depth.h"
#include "fuzz_util.h"
#include "ipc/frame.h"

namespace {

using kiln::ipc::FrameReader;

// The reference: payloads of `stream` under `max`, and whether it ended on a
// length over `max`; `rest` gets the bytes of an incomplete frame.
std::vector<std::string_view> Cut(std::string_view stream, size_t max, bool* over, size_t* rest) {
  std::vector<std::string_view> out;
  *over = false;
  size_t at = 0;
  while (stream.size() - at >= 4) {
    const auto b = [&](size_t i) {
      return static_cast<uint32_t>(static_cast<unsigned char>(stream[at + i]));
    };
    const uint32_t n = (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
    if (n > max) {
      *over = true;
      break;
    }
    if (stream.size() - at - 4 < n) break;
    out.push_back(stream.substr(at + 4, n));
    at += 4 + n;
  }
  *rest = stream.size() - at;
  return out;
}

void CheckFrame(const std::string& payload) {
  auto parsed = kiln::ipc::ParseFrame(payload);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.error().code == kiln::Code::kInvalidArgument);
    return;
  }
  const nlohmann::json& j = *parsed;
  FUZZ_CHECK(kiln::JsonDepthWithin(payload));
  // A raw NUL is never JSON text (RFC 8259); nlohmann stops reading at one.
  FUZZ_CHECK(payload.find('\0') == std::string::npos);
  FUZZ_CHECK(j.is_object());
  auto type = kiln::ipc::GetString(j, "type");
  FUZZ_CHECK(type.ok());
  // The typed accessors on the members the supervisor reads.
  for (const char* key : {"cell", "protocol", "exit_code", "execution_count", "line"}) {
    auto i = kiln::ipc::GetInt(j, key);
    FUZZ_CHECK(i.ok() == (j.contains(key) && j[key].is_number_integer()));
  }
  for (const char* key : {"ename", "evalue", "status", "module", "message"}) {
    auto s = kiln::ipc::GetString(j, key);
    FUZZ_CHECK(s.ok() == (j.contains(key) && j[key].is_string()));
  }
  for (const char* key : {"data", "metadata"}) {
    auto m = kiln::ipc::GetStringMap(j, key);
    if (m.ok()) {
      FUZZ_CHECK(m->is_object());
      for (const auto& [k, v] : m->items()) FUZZ_CHECK(v.is_string());
    }
  }
  // What the supervisor re-encodes (replies, events) decodes to the same value.
  const std::string wire = kiln::ipc::EncodeMessage(j);
  FrameReader again;
  again.Feed(wire.data(), wire.size());
  auto next = again.Next();
  FUZZ_CHECK(next.ok() && next->has_value() && again.pending() == 0);
  auto reparsed = kiln::ipc::ParseFrame(**next);
  FUZZ_CHECK(reparsed.ok() && *reparsed == j);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  std::string_view rest = input.text();
  const uint8_t mode = kiln::fuzz::TakeByte(&rest);
  const uint8_t chunk_byte = kiln::fuzz::TakeByte(&rest);
  // Small maxima reach the over-limit path with short inputs.
  const size_t max = (mode & 0x3f) == 0 ? kiln::ipc::kMaxFrameBytes : (mode & 0x3f) * 4u;
  const bool big_first = mode == 0xff;  // 16 ms of CPU a run under ASan: rare

  static const std::string kBigFrame =
      kiln::ipc::EncodeFrame("{\"type\":\"pad\",\"p\":\"" + std::string(1u << 20, 'x') + "\"}");
  // The big frame is fed from kBigFrame itself, in one piece, and the rest in
  // chunks: the reader sees the stream kBigFrame + rest as before, without a
  // copy of it that grew to 2 MiB (every fresh MiB is page faults under ASan:
  // 28 ms of CPU a run with the copies, most of this target's time).
  const std::string_view head = big_first ? std::string_view(kBigFrame) : std::string_view();
  const size_t chunk = chunk_byte == 0 ? head.size() + rest.size() + 1 : chunk_byte;
  const size_t reader_max = big_first ? kiln::ipc::kMaxFrameBytes : max;

  // The reference cut of head + rest: the big frame is one whole frame.
  bool over = false;
  size_t pending = 0;
  std::vector<std::string_view> expected;
  if (big_first) expected.push_back(head.substr(4));
  for (std::string_view p : Cut(rest, reader_max, &over, &pending)) expected.push_back(p);

  FrameReader reader(reader_max);
  size_t got = 0;
  bool failed = false;
  const auto feed = [&](std::string_view piece) {
    reader.Feed(piece.data(), piece.size());
    for (;;) {
      auto next = reader.Next();
      if (!next.ok()) {
        // Only a length over the maximum, and only where the reference cut stops.
        FUZZ_CHECK(next.error().code == kiln::Code::kResourceExhausted);
        FUZZ_CHECK(over && got == expected.size());
        failed = true;
        return;
      }
      if (!next->has_value()) return;
      FUZZ_CHECK(got < expected.size() && **next == expected[got]);
      ++got;
      if (!big_first || got > 1) CheckFrame(**next);
    }
  };
  if (!head.empty()) feed(head);
  for (size_t at = 0; at < rest.size() && !failed;) {
    const size_t n = std::min(chunk, rest.size() - at);
    feed(rest.substr(at, n));
    at += n;
  }
  FUZZ_CHECK(got == expected.size());
  if (!failed) {
    FUZZ_CHECK(!over);
    FUZZ_CHECK(reader.pending() == pending);
  }
  return 0;
}
