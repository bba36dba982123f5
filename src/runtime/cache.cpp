#include "tilus/runtime/cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace tilus {

namespace fs = std::filesystem;

// --- SHA-256 (FIPS 180-4) ------------------------------------------------------------------

namespace {

constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(std::array<uint32_t, 8>& h, const uint8_t* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 | uint32_t(block[4 * i + 2]) << 8 |
           uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

std::string sha256(const uint8_t* data, size_t n) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  size_t full = n / 64 * 64;
  for (size_t i = 0; i < full; i += 64) compress(h, data + i);
  // The tail, a 1 bit, zeros, and the length in bits (big-endian) fill one or two blocks.
  uint8_t tail[128] = {};
  size_t rest = n - full;
  std::memcpy(tail, data + full, rest);
  tail[rest] = 0x80;
  size_t blocks = rest + 9 <= 64 ? 1 : 2;
  uint64_t bits = uint64_t(n) * 8;
  for (int i = 0; i < 8; ++i) tail[blocks * 64 - 1 - i] = uint8_t(bits >> (8 * i));
  for (size_t b = 0; b < blocks; ++b) compress(h, tail + 64 * b);
  std::string out;
  for (uint32_t v : h) out += fmt::format("{:08x}", v);
  return out;
}

constexpr const char* kFormat = "tilus-cubin-cache-1";

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return s.str();
}

void write_file(const fs::path& p, const char* data, size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data, std::streamsize(n));
  out.close();
  if (!out) throw fs::filesystem_error("cannot write", p, std::make_error_code(std::errc::io_error));
}

// The checksum file: one line per file, "<name> <bytes> <sha256>".
std::string checksums(const CacheEntry& e) {
  std::string cubin(e.cubin.begin(), e.cubin.end());
  return fmt::format("{}\nkernel.cu {} {}\nkernel.cubin {} {}\nmeta.json {} {}\n", kFormat, e.source.size(),
                     sha256_hex(e.source), cubin.size(), sha256_hex(cubin), e.meta.size(), sha256_hex(e.meta));
}

std::optional<CacheEntry> read_entry(const fs::path& dir) {
  auto source = read_file(dir / "kernel.cu");
  auto cubin = read_file(dir / "kernel.cubin");
  auto meta = read_file(dir / "meta.json");
  auto sums = read_file(dir / "checksum");
  if (!source || !cubin || !meta || !sums) return std::nullopt;
  CacheEntry e{*source, std::vector<char>(cubin->begin(), cubin->end()), *meta};
  if (checksums(e) != *sums) return std::nullopt;
  return e;
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{}-{:x}", getpid(), counter++, rng());
}

void warn_once(const std::string& dir, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    spdlog::warn("tilus: the kernel cache directory {} cannot be written ({}); kernels will be compiled without "
                 "caching. Set TILUS_CACHE_DIR to a writable directory.",
                 dir, why);
}

}  // namespace

std::string sha256_hex(const std::string& data) { return sha256(reinterpret_cast<const uint8_t*>(data.data()), data.size()); }
std::string sha256_hex(const std::vector<char>& data) {
  return sha256(reinterpret_cast<const uint8_t*>(data.data()), data.size());
}

// --- the cache -----------------------------------------------------------------------------

DiskCache::DiskCache(std::string dir) : dir_(std::move(dir)) {
  if (!dir_.empty()) return;
  if (const char* env = std::getenv("TILUS_CACHE_DIR"); env && *env) dir_ = env;
  else if (const char* home = std::getenv("HOME"); home && *home) dir_ = std::string(home) + "/.cache/tilus";
  else dir_ = "/tmp/tilus-cache";
}

bool DiskCache::writable() const {
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "kernels", ec);
  if (ec) return false;
  fs::path probe = fs::path(dir_) / "kernels" / (".probe-" + unique_suffix());
  try {
    write_file(probe, "", 0);
  } catch (const fs::filesystem_error&) {
    return false;
  }
  fs::remove(probe, ec);
  return true;
}

std::string DiskCache::key(const std::string& source, const std::string& arch, int nvrtc_version,
                           const std::vector<std::string>& options) {
  // Length-prefixed fields: no two different inputs serialize alike.
  std::string s;
  auto field = [&](const std::string& f) { s += fmt::format("{}:{};", f.size(), f); };
  field(kFormat);
  field(TILUS_VERSION);
  field(arch);
  field(std::to_string(nvrtc_version));
  field(std::to_string(options.size()));
  for (auto& o : options) field(o);
  field(source);
  return sha256_hex(s);
}

std::optional<CacheEntry> DiskCache::load(const std::string& key) const {
  fs::path dir = fs::path(dir_) / "kernels" / key.substr(0, 2) / key;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  auto e = read_entry(dir);
  if (!e) spdlog::debug("tilus: ignoring the corrupt cache entry {}", dir.string());
  return e;
}

bool DiskCache::store(const std::string& key, const CacheEntry& entry) const {
  fs::path parent = fs::path(dir_) / "kernels" / key.substr(0, 2);
  fs::path final_dir = parent / key;
  fs::path tmp = parent / (".tmp-" + key + "-" + unique_suffix());
  std::error_code ec;
  try {
    fs::create_directories(parent);
    fs::create_directory(tmp);
    write_file(tmp / "kernel.cu", entry.source.data(), entry.source.size());
    write_file(tmp / "kernel.cubin", entry.cubin.data(), entry.cubin.size());
    write_file(tmp / "meta.json", entry.meta.data(), entry.meta.size());
    std::string sums = checksums(entry);
    write_file(tmp / "checksum", sums.data(), sums.size());
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    warn_once(dir_, e.code().message());
    return false;
  }
  // rename() of a directory onto a non-empty one fails, so a complete entry is never
  // replaced under a reader; a corrupt one is first moved aside, then removed.
  for (int attempt = 0; attempt < 8; ++attempt) {
    fs::rename(tmp, final_dir, ec);
    if (!ec) return true;
    if (fs::is_directory(final_dir) && read_entry(final_dir)) {  // another writer won the race
      fs::remove_all(tmp, ec);
      return true;
    }
    fs::path aside = parent / (".tmp-corrupt-" + key + "-" + unique_suffix());
    fs::rename(final_dir, aside, ec);
    fs::remove_all(aside, ec);
  }
  fs::remove_all(tmp, ec);
  spdlog::debug("tilus: could not install cache entry {}", final_dir.string());
  return false;
}

DiskCache& default_cache() {
  static DiskCache cache;
  return cache;
}

}  // namespace tilus
