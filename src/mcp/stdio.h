// MCP's stdio transport: newline-delimited JSON-RPC messages on two file
// descriptors (the client's pipe to our stdin, ours to its stdout). Only
// JSON-RPC lines are written to `out_fd`; logs go to stderr.
//
// Lines are bounded (`max_line_bytes`): a longer one is skipped up to its
// newline and answered with an Invalid Request error (its id is unknown, so
// null). Blank lines are ignored; a trailing "\r" is dropped. The loop ends at
// EOF of `in_fd`, when `stop_fd` becomes readable (a signalfd: SIGTERM,
// SIGINT), or when the client stops reading our output; the engine is then
// shut down (running cells stopped, the kiln session deleted). At EOF, calls
// in flight finish and answer first, unless `stop_fd` fires meanwhile.
#pragma once

#include <cstddef>

#include "mcp/engine.h"

namespace kiln::mcp {

struct StdioOptions {
  size_t max_line_bytes = 96u << 20;  // an upload_file of 64 MiB, base64, with room
};

enum class StdioEnd { kEof, kStopped, kOutputClosed, kReadError };

StdioEnd RunStdio(Engine& engine, int in_fd, int out_fd, int stop_fd,
                  const StdioOptions& options = {});

}  // namespace kiln::mcp
