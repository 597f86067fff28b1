#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstring>

namespace kiln::log {

void Init(const char* level) {
  // _mt: the server logs from many threads.
  auto logger = spdlog::stderr_logger_mt("kiln");
  logger->set_pattern("kiln: %l: %v");
  spdlog::set_default_logger(logger);
  spdlog::level::level_enum lvl = spdlog::level::warn;
  if (level != nullptr && *level != '\0') lvl = spdlog::level::from_str(level);
  spdlog::set_level(lvl);
}

}  // namespace kiln::log
