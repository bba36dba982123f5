// Golden-text comparison for IR tests. TILUS_UPDATE_GOLDEN=1 rewrites the files instead of
// comparing (review the diff before committing). A location in a test's own .cpp file
// (`test_codegen.cpp:446`, where a Script is written in the test) is kept as `test_codegen.cpp:N`
// on both sides, so editing the test above a Script does not change the golden; locations in the
// Scripts' headers (builtins_scripts.h, ...) keep their numbers.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

inline std::string without_test_lines(const std::string& text) {
  static const std::regex line(R"((\btest_\w+\.cpp):\d+)");
  return std::regex_replace(text, line, "$1:N");
}

inline ::testing::AssertionResult matches_golden(const std::string& name, const std::string& raw,
                                                 const std::string& ext = ".tir") {
  namespace fs = std::filesystem;
  const std::string actual = without_test_lines(raw);
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
