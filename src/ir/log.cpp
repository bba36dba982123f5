#include "tilus/ir/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace tilus {

namespace {

// tilus's messages are diagnostics: they go to stderr (spdlog's default logger writes to stdout,
// where they would mix with a program's output). Set when the library loads.
const bool stderr_logger = [] {
  auto logger = spdlog::stderr_color_mt("tilus");
  logger->set_level(spdlog::default_logger()->level());
  spdlog::set_default_logger(logger);
  return true;
}();

}  // namespace

void apply_log_level() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("TILUS_LOG_LEVEL");
    if (!env || !*env) {
      spdlog::set_level(spdlog::level::warn);  // the documented default (spdlog's own is info)
      return;
    }
    auto level = spdlog::level::from_str(env);
    if (level == spdlog::level::off && std::string(env) != "off")
      spdlog::warn("tilus: TILUS_LOG_LEVEL={} is not one of trace, debug, info, warn, error, critical, off", env);
    else spdlog::set_level(level);
  });
}

}  // namespace tilus
