#include "supervisor/cell_outputs.h"

#include <gtest/gtest.h>

#include <limits>

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

}  // namespace
}  // namespace kiln::supervisor
