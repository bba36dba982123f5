// Logging: spdlog, its level from TILUS_LOG_LEVEL (trace, debug, info, warn, error, critical,
// off), applied once, at the first compile of either backend. Messages go to stderr.
#pragma once

namespace tilus {

void apply_log_level();

}  // namespace tilus
