// Supervisor-side logging: spdlog, structured key=value context, to stderr.
// The child never uses this (it cannot allocate or lock): see child/raw_log.h.
// User code and user output are never logged at info or above.
#pragma once

#include <spdlog/spdlog.h>

namespace kiln::log {

// Level from "debug", "info", "warn", "error", "off"; unknown levels are ignored.
void Init(const char* level);

}  // namespace kiln::log

#define KILN_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define KILN_LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define KILN_LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define KILN_LOG_ERROR(...) spdlog::error(__VA_ARGS__)
