#include "supervisor/runtime_channel.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln::supervisor {
namespace {

using nlohmann::json;
using Kind = RuntimeChannel::EventKind;

std::string Frame(const json& j) { return ipc::EncodeMessage(j); }
std::string Hello() { return Frame({{"type", "hello"}, {"protocol", 2}, {"python", "3.11.2"}}); }
std::string Reply(int cell, const char* status = "ok") {
  return Frame({{"type", "execute_reply"}, {"cell", cell}, {"status", status}});
}
std::string Display(int cell) {
  return Frame({{"type", "display_data"},
                {"cell", cell},
                {"data", {{"text/plain", "x"}}},
                {"metadata", json::object()}});
}

// Feeds `bytes` and handles every complete frame; the kinds in order.
std::vector<Kind> Drain(RuntimeChannel& ch, const std::string& bytes, int* before = nullptr) {
  ch.Feed(bytes.data(), bytes.size());
  std::vector<Kind> kinds;
  for (;;) {
    auto ev = ch.Next([&] {
      if (before) ++*before;
    });
    if (ev.kind == Kind::kNone) return kinds;
    kinds.push_back(ev.kind);
    if (ev.kind == Kind::kProtocolError || ev.kind == Kind::kOutputLimit) return kinds;
  }
}

// Frames the supervisor queued, decoded.
std::vector<json> Sent(RuntimeChannel& ch) {
  ipc::FrameReader r;
  r.Feed(ch.outbox().data(), ch.outbox().size());
  ch.outbox().clear();
  std::vector<json> out;
  for (;;) {
    auto n = r.Next();
    if (!n.ok() || !n->has_value()) return out;
    out.push_back(json::parse(**n));
  }
}

TEST(RuntimeChannel, HelloThenACell) {
  RuntimeChannel ch;
  EXPECT_EQ(Drain(ch, Hello()), std::vector<Kind>{Kind::kHello});
  EXPECT_TRUE(ch.hello());
  ch.BeginCell(1, policy::DisplayLimits{}, false);
  policy::ImportPolicy imports;
  imports.mode = policy::ImportPolicy::Mode::kDenylist;
  imports.modules = {"socket"};
  ch.SendExecute("print(1)", "<cell>", imports, policy::DisplayLimits{});
  const auto sent = Sent(ch);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0]["type"], "execute");
  EXPECT_EQ(sent[0]["cell"], 1);
  EXPECT_EQ(sent[0]["code"], "print(1)");
  EXPECT_EQ(sent[0]["import_policy"]["modules"], json::array({"socket"}));
  int before = 0;
  EXPECT_EQ(Drain(ch, Display(1) + Reply(1), &before),
            (std::vector<Kind>{Kind::kOutput, Kind::kReplied}));
  EXPECT_EQ(before, 2);  // the pipes are drained before each frame
  EXPECT_TRUE(ch.replied());
  EXPECT_EQ(ch.outputs().outputs().size(), 1u);
  EXPECT_EQ(ch.outputs().reply_status(), "ok");
  EXPECT_TRUE(Sent(ch).empty());  // a session cell: no shutdown
}

TEST(RuntimeChannel, FrameSplitAcrossReads) {
  RuntimeChannel ch;
  const std::string wire = Hello();
  for (size_t i = 0; i + 1 < wire.size(); ++i) {
    EXPECT_TRUE(Drain(ch, wire.substr(i, 1)).empty()) << i;
    EXPECT_EQ(ch.pending(), i + 1);
  }
  EXPECT_EQ(Drain(ch, wire.substr(wire.size() - 1)), std::vector<Kind>{Kind::kHello});
  EXPECT_EQ(ch.pending(), 0u);
}

TEST(RuntimeChannel, SeveralFramesInOneRead) {
  RuntimeChannel ch;
  ch.Feed(Hello().data(), Hello().size());
  ASSERT_EQ(ch.Next().kind, Kind::kHello);
  ch.BeginCell(1, policy::DisplayLimits{}, true);
  const std::string wire = Display(1) + Display(1) + Reply(1) + Frame({{"type", "sync"}}) +
                           Frame({{"type", "exiting"}, {"exit_code", 3}});
  // A split in the middle of the third frame, and the rest in one read.
  const size_t cut = Display(1).size() * 2 + 5;
  EXPECT_EQ(Drain(ch, wire.substr(0, cut)), (std::vector<Kind>{Kind::kOutput, Kind::kOutput}));
  EXPECT_EQ(Drain(ch, wire.substr(cut)),
            (std::vector<Kind>{Kind::kReplied, Kind::kSynced, Kind::kExiting}));
  EXPECT_EQ(ch.exit_code(), 3);
  const auto sent = Sent(ch);  // one-shot: shutdown after the reply, then synced
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0]["type"], "shutdown");
  EXPECT_EQ(sent[1]["type"], "synced");
}

TEST(RuntimeChannel, OversizedFrameIsAProtocolError) {
  RuntimeChannel::Limits limits;
  limits.max_frame = 1024;
  RuntimeChannel ch(limits);
  const std::string big = ipc::EncodeFrame(std::string(2000, 'x'));
  int before = 0;
  // Only the length prefix is needed to refuse it.
  ch.Feed(big.data(), 4);
  auto ev = ch.Next([&] { ++before; });
  EXPECT_EQ(ev.kind, Kind::kProtocolError);
  EXPECT_NE(ev.reason.find("oversized frame"), std::string::npos) << ev.reason;
  EXPECT_EQ(before, 0);
}

TEST(RuntimeChannel, DefaultMaximumIs32MiB) {
  RuntimeChannel ch;
  const uint32_t n = (32u << 20) + 1;
  const char prefix[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  ch.Feed(prefix, 4);
  EXPECT_EQ(ch.Next().kind, Kind::kProtocolError);
}

TEST(RuntimeChannel, MalformedFrames) {
  struct Case {
    const char* name;
    std::string wire;
    const char* reason;  // a substring
  };
  const std::vector<Case> cases = {
      {"not JSON", ipc::EncodeFrame(std::string_view("{nope")), "malformed frame"},
      {"not an object", ipc::EncodeFrame(std::string_view("[1]")), "malformed frame"},
      {"no type", ipc::EncodeFrame(std::string_view("{\"x\":1}")), "malformed frame"},
      {"a frame before hello and any cell", Display(1), "before any cell"},
      {"unknown type in a cell", Hello() + Frame({{"type", "bogus"}, {"cell", 1}}),
       "broke the protocol"},
      {"wrong member type", Hello() + Frame({{"type", "execute_reply"}, {"cell", "1"}}),
       "broke the protocol"},
      {"another cell's frame", Hello() + Reply(2), "broke the protocol"},
      {"after the reply", Hello() + Reply(1) + Display(1), "after the cell's execute_reply"},
      {"malformed exiting", Hello() + Reply(1) + Frame({{"type", "exiting"}, {"exit_code", 256}}),
       "malformed 'exiting'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RuntimeChannel ch;
    // Cells begin once hello was handled, as the supervisor does.
    const bool with_hello = c.wire.rfind(Hello(), 0) == 0;
    if (with_hello) {
      EXPECT_EQ(Drain(ch, Hello()), std::vector<Kind>{Kind::kHello});
      ch.BeginCell(1, policy::DisplayLimits{}, std::string(c.name) == "malformed exiting");
    }
    const std::string rest = with_hello ? c.wire.substr(Hello().size()) : c.wire;
    ch.Feed(rest.data(), rest.size());
    RuntimeChannel::Event ev;
    do {
      ev = ch.Next();
    } while (ev.kind != Kind::kNone && ev.kind != Kind::kProtocolError);
    ASSERT_EQ(ev.kind, Kind::kProtocolError);
    EXPECT_NE(ev.reason.find(c.reason), std::string::npos) << ev.reason;
  }
}

TEST(RuntimeChannel, HelloTwiceOrAnotherVersion) {
  RuntimeChannel ch;
  auto kinds = Drain(ch, Hello() + Hello() + Hello());
  EXPECT_EQ(kinds, (std::vector<Kind>{Kind::kHello, Kind::kBadHello, Kind::kBadHello}));
  RuntimeChannel other;
  // Version 1 had no commands or code contexts: its runtime would run a
  // command's execute as an empty Python cell.
  const std::string v1 = Frame({{"type", "hello"}, {"protocol", 1}});
  other.Feed(v1.data(), v1.size());
  auto ev = other.Next();
  EXPECT_EQ(ev.kind, Kind::kBadHello);
  EXPECT_EQ(ev.reason, "the runtime speaks protocol 1, kiln speaks 2");
  EXPECT_FALSE(other.hello());
  RuntimeChannel in_cell;
  ASSERT_EQ(Drain(in_cell, Hello()), std::vector<Kind>{Kind::kHello});
  in_cell.BeginCell(1, policy::DisplayLimits{}, false);
  EXPECT_EQ(Drain(in_cell, Hello()), std::vector<Kind>{Kind::kBadHello});
}

TEST(RuntimeChannel, EofMidFrame) {
  RuntimeChannel ch;
  EXPECT_EQ(ch.TruncatedFrame(), std::nullopt);
  const std::string wire = Hello() + Display(1);
  ch.Feed(wire.data(), Hello().size() + 7);
  EXPECT_EQ(ch.Next().kind, Kind::kHello);
  EXPECT_EQ(ch.Next().kind, Kind::kNone);
  EXPECT_EQ(ch.TruncatedFrame(),
            "the runtime's channel ended inside a frame (7 bytes of a truncated frame)");
}

TEST(RuntimeChannel, SyncsAreAnsweredAndCapped) {
  RuntimeChannel::Limits limits;
  limits.max_syncs_per_cell = 2;
  RuntimeChannel ch(limits);
  ASSERT_EQ(Drain(ch, Hello()), std::vector<Kind>{Kind::kHello});
  ch.BeginCell(1, policy::DisplayLimits{}, false);
  const std::string sync = Frame({{"type", "sync"}});
  EXPECT_EQ(Drain(ch, sync + sync), (std::vector<Kind>{Kind::kSynced, Kind::kSynced}));
  EXPECT_EQ(Sent(ch).size(), 2u);
  EXPECT_EQ(Drain(ch, sync), std::vector<Kind>{Kind::kOutputLimit});
  EXPECT_TRUE(Sent(ch).empty());
}

TEST(RuntimeChannel, FramesOverTheCellsBudget) {
  RuntimeChannel::Limits limits;
  limits.cell_frame_budget = Display(1).size() + 1;
  RuntimeChannel ch(limits);
  ASSERT_EQ(Drain(ch, Hello()), std::vector<Kind>{Kind::kHello});
  ch.BeginCell(1, policy::DisplayLimits{}, false);
  EXPECT_EQ(Drain(ch, Display(1) + Display(1)),
            (std::vector<Kind>{Kind::kOutput, Kind::kOutputLimit}));
}

TEST(RuntimeChannel, StreamsAddedBeforeAFrameKeepTheirOrder) {
  RuntimeChannel ch;
  ASSERT_EQ(Drain(ch, Hello()), std::vector<Kind>{Kind::kHello});
  ch.BeginCell(1, policy::DisplayLimits{}, false);
  const std::string wire = Display(1);
  ch.Feed(wire.data(), wire.size());
  auto ev = ch.Next([&] { ch.outputs().AddStream("stdout", "before\n"); });
  EXPECT_EQ(ev.kind, Kind::kOutput);
  const auto& outs = ch.outputs().outputs();
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0]["output_type"], "stream");
  EXPECT_EQ(outs[1]["output_type"], "display_data");
}

TEST(RuntimeChannel, OneShotAfterTheReplyOnlySyncAndExiting) {
  RuntimeChannel ch;
  ASSERT_EQ(Drain(ch, Hello()), std::vector<Kind>{Kind::kHello});
  ch.BeginCell(1, policy::DisplayLimits{}, true);
  EXPECT_EQ(Drain(ch, Reply(1)), std::vector<Kind>{Kind::kReplied});
  EXPECT_EQ(Drain(ch, Frame({{"type", "exiting"}, {"exit_code", 0}})),
            std::vector<Kind>{Kind::kExiting});
  // Once exiting was reported, even a sync is out of place.
  EXPECT_EQ(Drain(ch, Frame({{"type", "sync"}})), std::vector<Kind>{Kind::kProtocolError});
}

TEST(RuntimeChannel, EndCell) {
  RuntimeChannel ch;
  ASSERT_EQ(Drain(ch, Hello()), std::vector<Kind>{Kind::kHello});
  ch.BeginCell(1, policy::DisplayLimits{}, false);
  EXPECT_TRUE(ch.has_cell());
  ch.EndCell();
  EXPECT_FALSE(ch.has_cell());
  EXPECT_FALSE(ch.replied());
  EXPECT_EQ(Drain(ch, Display(1)), std::vector<Kind>{Kind::kProtocolError});
}

}  // namespace
}  // namespace kiln::supervisor
