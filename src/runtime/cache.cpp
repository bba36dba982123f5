#include "tilus/runtime/cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <cerrno>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string_view>
#include <unordered_set>

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
  if (rest) std::memcpy(tail, data + full, rest);  // data may be null when n == 0
  tail[rest] = 0x80;
  size_t blocks = rest + 9 <= 64 ? 1 : 2;
  uint64_t bits = uint64_t(n) * 8;
  for (int i = 0; i < 8; ++i) tail[blocks * 64 - 1 - i] = uint8_t(bits >> (8 * i));
  for (size_t b = 0; b < blocks; ++b) compress(h, tail + 64 * b);
  std::string out;
  out.reserve(64);
  for (uint32_t v : h) out += fmt::format("{:08x}", v);
  return out;
}

}  // namespace

std::string sha256_hex(const std::string& data) {
  return sha256(reinterpret_cast<const uint8_t*>(data.data()), data.size());
}
std::string sha256_hex(const std::vector<char>& data) {
  return sha256(reinterpret_cast<const uint8_t*>(data.data()), data.size());
}

// --- the cache -----------------------------------------------------------------------------

namespace {

// Bumped whenever the key derivation or the entry layout changes, so that old entries are
// neither found nor misread.
constexpr const char* kFormat = "tilus-cubin-cache-1";

constexpr const char* kSource = "kernel.cu";
constexpr const char* kCubin = "kernel.cubin";
constexpr const char* kMeta = "meta.json";
constexpr const char* kChecksum = "checksum";

// Keys name directories, so only plain names are accepted: nothing that could climb out of
// the cache (".", "/") or collide with the temporaries (which start with '.').
bool valid_key(const std::string& key) {
  if (key.size() < 2) return false;
  for (char c : key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(s).str();
}

void write_file(const fs::path& p, const char* data, size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data, std::streamsize(n));
  out.close();
  if (!out) throw fs::filesystem_error("cannot write", p, std::make_error_code(std::errc::io_error));
}

// The checksum file: the format, then "<name> <bytes> <sha256>" for each file. Sizes are
// recorded as well as hashes so that a truncated file is reported as such.
std::string checksums(const CacheEntry& e) {
  return fmt::format("{}\n{} {} {}\n{} {} {}\n{} {} {}\n", kFormat, kSource, e.source.size(), sha256_hex(e.source),
                     kCubin, e.cubin.size(), sha256_hex(e.cubin), kMeta, e.meta.size(), sha256_hex(e.meta));
}

// Reads and validates the entry in dir; on failure, why says what was wrong.
std::optional<CacheEntry> read_entry(const fs::path& dir, std::string& why) {
  std::optional<std::string> files[4];
  const char* names[4] = {kChecksum, kSource, kCubin, kMeta};
  for (int i = 0; i < 4; ++i) {
    files[i] = read_file(dir / names[i]);
    if (!files[i]) {
      why = fmt::format("{} is missing", names[i]);
      return std::nullopt;
    }
  }
  auto& [sums, source, cubin, meta] = files;
  CacheEntry e{std::move(*source), std::vector<char>(cubin->begin(), cubin->end()), std::move(*meta)};
  std::string expected = checksums(e);
  if (expected != *sums) {
    // Name the first line that differs, for the log; the comparison above is what decides.
    std::istringstream want(expected), got(*sums);
    std::string w, g;
    while (std::getline(want, w)) {
      if (!std::getline(got, g)) g = "<nothing>";
      if (w != g) break;
    }
    why = fmt::format("checksums do not match (now '{}', recorded '{}')", w, g);
    return std::nullopt;
  }
  return e;
}

bool is_valid_entry(const fs::path& dir) {
  std::string why;
  return read_entry(dir, why).has_value();
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  // The pid keeps forked children apart even though they inherit the generator's state.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{}-{:016x}", getpid(), counter++, rng());
}

void warn_unwritable(const std::string& dir, const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    spdlog::warn(
        "tilus: cannot write the kernel cache directory {} ({}); caching is disabled and kernels will be "
        "recompiled. Set TILUS_CACHE_DIR to a writable directory.",
        dir, why);
  });
}

// A corrupt entry is reported once per key; it stays corrupt until the caller stores it again,
// and repeating the message on every load would only be noise.
void note_corrupt(const std::string& key, const fs::path& dir, const std::string& why) {
  static std::mutex mutex;
  static std::unordered_set<std::string> reported;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!reported.insert(key).second) return;
  }
  spdlog::debug("tilus: ignoring the corrupt cache entry {}: {}", dir.string(), why);
}

}  // namespace

DiskCache::DiskCache(std::string dir) : dir_(std::move(dir)) {
  if (!dir_.empty()) return;
  if (const char* env = std::getenv("TILUS_CACHE_DIR"); env && *env)
    dir_ = env;
  else if (const char* home = std::getenv("HOME"); home && *home)
    dir_ = (fs::path(home) / ".cache" / "tilus").string();
  else
    dir_ = "/tmp/tilus-cache";
}

std::string DiskCache::pch_dir() const { return (fs::path(dir_) / "pch").string(); }

bool DiskCache::writable() const {
  try {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_, ec)) return false;
    fs::path probe = fs::path(dir_) / (".probe-" + unique_suffix());
    write_file(probe, "", 0);
    return fs::remove(probe, ec) && !ec;
  } catch (const std::exception&) {
    return false;
  }
}

std::string DiskCache::key(const std::string& source, const std::string& arch, int nvrtc_version,
                           const std::vector<std::string>& options) {
  // Every field is length-prefixed and the options are counted, so no two different inputs
  // serialize alike (moving text between fields, or between options, changes the key).
  std::string s;
  auto field = [&](std::string_view f) { s += fmt::format("{}:{};", f.size(), f); };
  field(kFormat);
  field(source);
  field(arch);
  field(std::to_string(nvrtc_version));
  field(std::to_string(options.size()));
  for (const auto& o : options) field(o);
  field(TILUS_VERSION);
  return sha256_hex(s);
}

std::optional<CacheEntry> DiskCache::load(const std::string& key) const {
  if (!valid_key(key)) return std::nullopt;
  try {
    fs::path dir = fs::path(dir_) / "kernels" / key.substr(0, 2) / key;
    std::error_code ec;
    if (!fs::exists(dir, ec)) return std::nullopt;  // a plain miss, not worth a message
    std::string why;
    auto e = read_entry(dir, why);
    if (!e) note_corrupt(key, dir, why);
    return e;
  } catch (const std::exception& e) {
    spdlog::debug("tilus: cannot read the cache entry {}: {}", key, e.what());
    return std::nullopt;
  }
}

DiskCache::Lock::~Lock() {
  if (fd_ >= 0) {
    flock(fd_, LOCK_UN);
    close(fd_);
  }
}

std::unique_ptr<DiskCache::Lock> DiskCache::lock(const std::string& key) const {
  if (!valid_key(key)) return nullptr;
  std::error_code ec;
  fs::path dir = fs::path(dir_) / "locks";
  fs::create_directories(dir, ec);
  int fd = open((dir / (key + ".lock")).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  int r;
  while ((r = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (r != 0) {
    close(fd);
    return nullptr;
  }
  return std::make_unique<Lock>(fd);
}

bool DiskCache::store(const std::string& key, const CacheEntry& entry) const {
  if (!valid_key(key)) {
    spdlog::debug("tilus: not caching under the malformed key '{}'", key);
    return false;
  }
  fs::path parent = fs::path(dir_) / "kernels" / key.substr(0, 2);
  fs::path final_dir = parent / key;
  fs::path tmp;
  std::error_code ec;
  try {
    fs::create_directories(parent);
    tmp = parent / (".tmp-" + key + "-" + unique_suffix());
    if (!fs::create_directory(tmp))  // only on a name clash, which the suffix rules out
      throw fs::filesystem_error("temporary already exists", tmp, std::make_error_code(std::errc::file_exists));
    write_file(tmp / kSource, entry.source.data(), entry.source.size());
    write_file(tmp / kCubin, entry.cubin.data(), entry.cubin.size());
    write_file(tmp / kMeta, entry.meta.data(), entry.meta.size());
    std::string sums = checksums(entry);
    // Written last: an entry whose checksum file exists was otherwise complete.
    write_file(tmp / kChecksum, sums.data(), sums.size());
  } catch (const std::exception& e) {
    if (!tmp.empty()) fs::remove_all(tmp, ec);
    auto* fe = dynamic_cast<const fs::filesystem_error*>(&e);
    warn_unwritable(dir_, fe ? fe->code().message() : e.what());
    return false;
  }

  // rename() cannot replace a non-empty directory, so a complete entry is never swapped out
  // from under a reader. A corrupt one is first moved aside under a temporary name (readers
  // then see a miss) and removed; a few rounds absorb other writers doing the same.
  try {
    for (int attempt = 0; attempt < 8; ++attempt) {
      fs::rename(tmp, final_dir, ec);
      if (!ec) return true;
      if (is_valid_entry(final_dir)) {  // another writer got there first
        fs::remove_all(tmp, ec);
        return true;
      }
      fs::path aside = parent / (".tmp-corrupt-" + key + "-" + unique_suffix());
      fs::rename(final_dir, aside, ec);
      if (!ec) fs::remove_all(aside, ec);
    }
  } catch (const std::exception& e) {
    spdlog::debug("tilus: installing the cache entry {} failed: {}", final_dir.string(), e.what());
  }
  fs::remove_all(tmp, ec);
  spdlog::debug("tilus: could not install the cache entry {}", final_dir.string());
  return false;
}

DiskCache& default_cache() {
  static DiskCache cache;
  return cache;
}

void set_default_cache_dir(const std::string& dir) { default_cache() = DiskCache(dir); }

}  // namespace tilus
