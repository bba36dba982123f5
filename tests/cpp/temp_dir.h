// A fresh directory under the system temp directory, removed with everything in it when
// the object goes away. For tests that write files (cache, runtime).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string>

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() / fmt::format("tilus-test-{}-{}-{}", tag, getpid(), counter++);
    std::filesystem::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};
