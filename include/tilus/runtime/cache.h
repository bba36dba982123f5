// The on-disk cubin cache (and the CPU backend's object files, under the same layout: an empty
// kernel.cu, the object as kernel.cubin; runtime/cpu.cpp).
//
// Layout: $TILUS_CACHE_DIR (default ~/.cache/tilus)/pch/ holds each compiling process's
// precompiled device headers (removed when it exits), and kernels/<key[0:2]>/<key>/ with
//   kernel.cu     the generated source
//   kernel.cubin  the compiled code
//   meta.json     format version, kernel name, arch, NVRTC version, options, params (pointers
//                 with their argument contract), grid expressions, cluster shape, block
//                 threads, shared bytes (a record: launches read the in-memory KernelSource)
// An entry is written into a temporary directory and renamed into place, so readers never
// see half of one; an entry whose checksum or metadata does not match is ignored (and
// rebuilt by the caller). A cache directory that cannot be written degrades to no caching
// with one warning.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tilus {

// SHA-256 of data, as 64 hex digits.
std::string sha256_hex(const std::string& data);
std::string sha256_hex(const std::vector<char>& data);

struct CacheEntry {
  std::string source;
  std::vector<char> cubin;
  std::string meta;  // the metadata text (JSON), as the caller serialized it
};

class DiskCache {
 public:
  // dir: the cache root; empty: $TILUS_CACHE_DIR or ~/.cache/tilus.
  explicit DiskCache(std::string dir = "");
  const std::string& dir() const { return dir_; }
  // <dir>/pch: the precompiled device headers of the processes compiling into this cache
  // (nvrtc.h, NvrtcCompileOptions::pch_dir).
  std::string pch_dir() const;
  bool writable() const;
  // The key of a compilation: hash of the source, arch, NVRTC version, options and the
  // tilus version.
  static std::string key(const std::string& source, const std::string& arch, int nvrtc_version,
                         const std::vector<std::string>& options);
  std::optional<CacheEntry> load(const std::string& key) const;
  // Returns false (after the one-time warning) when the entry could not be written.
  bool store(const std::string& key, const CacheEntry& entry) const;
  // Holds the cross-process lock of one key's entry (flock on <dir>/locks/<key>.lock) until it
  // goes: the process that holds it compiles the entry while others wait for it, then load what
  // it stored. The kernel releases a flock when its process dies, so a crashed holder leaves no
  // stale lock. Null when the cache cannot hold lock files (read-only): then nothing waits.
  class Lock {
   public:
    explicit Lock(int fd) : fd_(fd) {}
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
    ~Lock();

   private:
    int fd_;
  };
  std::unique_ptr<Lock> lock(const std::string& key) const;

 private:
  std::string dir_;
};

// The process-wide cache ($TILUS_CACHE_DIR or ~/.cache/tilus).
DiskCache& default_cache();
// Moves the process-wide cache to `dir` (empty: back to $TILUS_CACHE_DIR or ~/.cache/tilus), for
// the compiles and autotuning runs that start after the call (Python: tilus.option.cache_dir).
void set_default_cache_dir(const std::string& dir);

}  // namespace tilus
