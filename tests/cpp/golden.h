// Golden-text comparison for IR tests. TILUS_UPDATE_GOLDEN=1 rewrites the files instead of
// comparing (review the diff before committing).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

inline ::testing::AssertionResult matches_golden(const std::string& name, const std::string& actual,
                                                 const std::string& ext = ".tir") {
  namespace fs = std::filesystem;
  fs::path file = fs::path(TILUS_SOURCE_DIR) / "tests" / "cpp" / "golden" / (name + ext);
  const char* update = std::getenv("TILUS_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << actual;
    return ::testing::AssertionSuccess();
  }
  std::ifstream in(file);
  if (!in) return ::testing::AssertionFailure() << "missing golden file " << file << " (run with TILUS_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str() == actual) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "IR differs from " << file << "\n--- expected ---\n"
                                       << ss.str() << "--- actual ---\n"
                                       << actual;
}
