#include "tilus/ir/error.h"

#include <fmt/format.h>

namespace tilus {

std::string SourceLoc::str() const {
  if (!valid()) return "<unknown>";
  return fmt::format("{}:{}", file, line);
}

SourceLoc SourceLoc::from(const std::source_location& loc) {
  return SourceLoc{loc.file_name(), static_cast<int>(loc.line()), static_cast<int>(loc.column()),
                   loc.function_name()};
}

static std::string with_location(const std::string& message, const SourceLoc& loc) {
  if (!loc.valid()) return message;
  return fmt::format("{}: error: {}", loc.str(), message);
}

Error::Error(const std::string& message, SourceLoc loc)
    : std::runtime_error(with_location(message, loc)), loc_(std::move(loc)), message_(message) {}

}  // namespace tilus
