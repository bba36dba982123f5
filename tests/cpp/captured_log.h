// Routes spdlog's default logger into a string while the object lives (for tests of warnings).
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
  spdlog::level::level_enum old_level = logger->level();
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  explicit CapturedLog(spdlog::level::level_enum level = spdlog::level::warn) {
    logger->sinks().push_back(sink);
    logger->set_level(level);
  }
  ~CapturedLog() {
    logger->set_level(old_level);
    auto& sinks = logger->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  }
  // How many times `needle` was logged.
  int count(const std::string& needle) {
    std::string s = text.str();
    int n = 0;
    for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
    return n;
  }
};
