#include "supervisor/cell_outputs.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace kiln::supervisor {
namespace {

using nlohmann::json;

// The runtime's "dropped" adds to the images kiln dropped itself, without
// wrapping (found by fuzz/cell_outputs_fuzzer.cc: 2^64 - 1 made the total 0).
TEST(CellOutputs, DroppedCountSaturates) {
  policy::DisplayLimits limits;
  limits.max_images = 0;
  CellOutputs c(0, limits, 1 << 20);
  const json image = {
      {"type", "display_data"}, {"cell", 0}, {"data", {{"image/png", "iVBORw0KGgo="}}}};
  ASSERT_TRUE(c.OnFrame(image, 64).ok());
  EXPECT_EQ(c.dropped(), 1u);
  const json reply = {{"type", "execute_reply"},
                      {"cell", 0},
                      {"status", "ok"},
                      {"dropped", std::numeric_limits<uint64_t>::max()}};
  ASSERT_TRUE(c.OnFrame(reply, 64).ok());
  EXPECT_EQ(c.dropped(), std::numeric_limits<uint64_t>::max());
}

// A command cell (E2B's commands.run): its start, then its exit code, each
// checked as hostile input.
TEST(CellOutputs, CommandStartedThenItsExitCode) {
  CellOutputs c(4, policy::DisplayLimits{}, 1 << 20);
  EXPECT_EQ(c.command_pid(), std::nullopt);
  ASSERT_TRUE(c.OnFrame({{"type", "command_started"}, {"cell", 4}, {"pid", 17}}, 64).ok());
  EXPECT_EQ(c.command_pid(), 17);
  ASSERT_TRUE(
      c.OnFrame({{"type", "execute_reply"}, {"cell", 4}, {"status", "command"}, {"exit_code", 3}},
                64)
          .ok());
  EXPECT_EQ(c.reply_status(), "command");
  EXPECT_EQ(c.exit_code(), 3);
  EXPECT_TRUE(c.outputs().empty());  // a command's output is its streams only
}

TEST(CellOutputs, MalformedCommandFramesAreRefused) {
  const json started = {{"type", "command_started"}, {"cell", 1}, {"pid", 5}};
  auto reply = [](json code) {
    return json{{"type", "execute_reply"}, {"cell", 1}, {"status", "command"}, {"exit_code", code}};
  };
  struct Case {
    const char* name;
    std::vector<json> frames;  // the last one is refused
  };
  const Case cases[] = {
      {"pid not an integer", {{{"type", "command_started"}, {"cell", 1}, {"pid", "5"}}}},
      {"pid 0", {{{"type", "command_started"}, {"cell", 1}, {"pid", 0}}}},
      {"pid out of range", {{{"type", "command_started"}, {"cell", 1}, {"pid", 1 << 23}}}},
      {"another cell's", {{{"type", "command_started"}, {"cell", 2}, {"pid", 5}}}},
      {"started twice", {started, started}},
      {"a reply without a start", {reply(0)}},
      {"an exit code over 255", {started, reply(256)}},
      {"a negative exit code", {started, reply(-1)}},
      {"no exit code", {started, {{"type", "execute_reply"}, {"cell", 1}, {"status", "command"}}}},
  };
  for (const auto& c : cases) {
    CellOutputs outputs(1, policy::DisplayLimits{}, 1 << 20);
    for (size_t i = 0; i + 1 < c.frames.size(); ++i)
      ASSERT_TRUE(outputs.OnFrame(c.frames[i], 64).ok()) << c.name;
    EXPECT_FALSE(outputs.OnFrame(c.frames.back(), 64).ok()) << c.name;
  }
}

}  // namespace
}  // namespace kiln::supervisor
