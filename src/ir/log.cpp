#include "tilus/ir/log.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace tilus {

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
