// The on-disk cubin cache: hashing, keys, hits, corrupt entries, concurrent writers from
// several processes and threads, an unwritable directory, and the default location.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "captured_log.h"
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "temp_dir.h"
#include "tilus/runtime/cache.h"

using namespace tilus;
namespace fs = std::filesystem;

namespace {



// A cubin-like blob with NUL bytes in it, distinct per tag.
CacheEntry entry(const std::string& tag) {
  std::vector<char> cubin = {'\x7f', 'E', 'L', 'F', '\0', '\1', '\0'};
  for (char c : tag) cubin.push_back(c);
  cubin.resize(4096 + tag.size(), '\xab');
  cubin.push_back('\0');
  return CacheEntry{"// source " + tag + "\n", cubin, "{\"kernel\": \"" + tag + "\"}\n"};
}

bool same(const std::optional<CacheEntry>& a, const CacheEntry& b) {
  return a && a->source == b.source && a->cubin == b.cubin && a->meta == b.meta;
}

fs::path entry_dir(const DiskCache& c, const std::string& key) {
  return fs::path(c.dir()) / "kernels" / key.substr(0, 2) / key;
}

int leftover_temporaries(const fs::path& root) {
  int n = 0;
  for (auto& e : fs::recursive_directory_iterator(root)) n += e.path().filename().string().rfind(".tmp-", 0) == 0;
  return n;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void flip_byte(const fs::path& p, std::streamoff at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = char(f.get());
  f.seekp(at);
  f.put(char(c ^ 0x01));
}

}  // namespace

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(std::string()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(std::string("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                                   "klmnopqrlmnopqrsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding boundaries (55/56 bytes: one or two final blocks; 63/64).
  EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  std::vector<char> bytes = {'a', 'b', 'c'};
  EXPECT_EQ(sha256_hex(bytes), sha256_hex(std::string("abc")));
  EXPECT_EQ(sha256_hex(std::vector<char>()), sha256_hex(std::string()));
}

TEST(DiskCache, KeyCoversEveryInput) {
  std::string base = DiskCache::key("src", "sm_90a", 13000, {"-lineinfo"});
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base.find_first_not_of("0123456789abcdef"), std::string::npos) << base;
  EXPECT_EQ(base, DiskCache::key("src", "sm_90a", 13000, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src2", "sm_90a", 13000, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_80", 13000, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_90a", 12080, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_90a", 13000, {"-G"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_90a", 13000, {"-lineinfo", "-G"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_90a", 13000, {}));
  // Fields are delimited: moving text from one field or option to the next changes the key.
  EXPECT_NE(DiskCache::key("ab", "sm_80", 1, {"c"}), DiskCache::key("a", "sm_80", 1, {"bc"}));
  EXPECT_NE(DiskCache::key("a", "sm_80", 1, {"b", "c"}), DiskCache::key("a", "sm_80", 1, {"bc"}));
  EXPECT_NE(DiskCache::key("a", "sm_80", 1, {"", ""}), DiskCache::key("a", "sm_80", 1, {""}));
}

TEST(DiskCache, MissStoreHitAndLayout) {
  TempDir dir("cache");
  DiskCache cache(dir.path.string());
  EXPECT_FALSE(fs::exists(dir.path)) << "the constructor must not create directories";
  std::string key = DiskCache::key("k1", "sm_80", 1, {});
  EXPECT_FALSE(cache.load(key));
  EXPECT_FALSE(fs::exists(dir.path)) << "a load must not create directories";
  CacheEntry one = entry("one");
  ASSERT_TRUE(cache.store(key, one));
  auto hit = cache.load(key);
  ASSERT_TRUE(same(hit, one));
  EXPECT_EQ(hit->cubin[4], '\0');

  // <dir>/kernels/<key[0:2]>/<key>/ with the three documented files and the checksums.
  fs::path d = dir.path / "kernels" / key.substr(0, 2) / key;
  ASSERT_TRUE(fs::is_directory(d));
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(d)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"checksum", "kernel.cu", "kernel.cubin", "meta.json"}));
  EXPECT_EQ(slurp(d / "kernel.cu"), one.source);
  EXPECT_EQ(slurp(d / "kernel.cubin"), std::string(one.cubin.begin(), one.cubin.end()));
  EXPECT_EQ(slurp(d / "meta.json"), one.meta);
  std::string sums = slurp(d / "checksum");
  EXPECT_NE(sums.find(sha256_hex(one.cubin)), std::string::npos) << sums;
  EXPECT_NE(sums.find(sha256_hex(one.source)), std::string::npos) << sums;
  EXPECT_NE(sums.find(sha256_hex(one.meta)), std::string::npos) << sums;

  // Storing a valid entry again keeps it; nothing temporary is left behind.
  EXPECT_TRUE(cache.store(key, one));
  EXPECT_TRUE(same(cache.load(key), one));
  EXPECT_EQ(leftover_temporaries(dir.path), 0);

  // Another key in the same cache is independent; malformed keys are refused, not followed.
  std::string other = DiskCache::key("k2", "sm_80", 1, {});
  EXPECT_FALSE(cache.load(other));
  EXPECT_FALSE(cache.store("../escape", one));
  EXPECT_FALSE(cache.store("", one));
  EXPECT_FALSE(cache.load("../escape"));
  EXPECT_FALSE(fs::exists(dir.path / "escape"));
}

TEST(DiskCache, CorruptEntriesAreIgnoredAndReplaced) {
  TempDir dir("cache");
  DiskCache cache(dir.path.string());
  std::string key = DiskCache::key("k2", "sm_80", 1, {});
  fs::path d = entry_dir(cache, key);
  auto damage = [&](const char* what, const std::function<void()>& how) {
    SCOPED_TRACE(what);
    std::error_code ec;
    fs::remove_all(d, ec);
    ASSERT_TRUE(cache.store(key, entry("old")));
    ASSERT_TRUE(same(cache.load(key), entry("old")));
    how();
    EXPECT_FALSE(cache.load(key));
    EXPECT_FALSE(cache.load(key));
    ASSERT_TRUE(cache.store(key, entry("new")));
    EXPECT_TRUE(same(cache.load(key), entry("new")));
  };
  damage("truncated cubin", [&] { fs::resize_file(d / "kernel.cubin", 100); });
  damage("empty cubin", [&] { fs::resize_file(d / "kernel.cubin", 0); });
  damage("flipped cubin byte", [&] { flip_byte(d / "kernel.cubin", 2000); });
  damage("flipped NUL byte", [&] { flip_byte(d / "kernel.cubin", 4); });
  damage("missing meta.json", [&] { fs::remove(d / "meta.json"); });
  damage("missing kernel.cubin", [&] { fs::remove(d / "kernel.cubin"); });
  damage("missing checksum", [&] { fs::remove(d / "checksum"); });
  damage("edited source", [&] { std::ofstream(d / "kernel.cu") << "// edited by hand\n"; });
  damage("edited meta", [&] { std::ofstream(d / "meta.json", std::ios::app) << " "; });
  damage("truncated checksum", [&] { fs::resize_file(d / "checksum", 10); });
  damage("empty directory", [&] {
    fs::remove_all(d);
    fs::create_directories(d);
  });
  damage("a file in place of the entry", [&] {
    fs::remove_all(d);
    std::ofstream(d) << "junk";
  });
  EXPECT_EQ(leftover_temporaries(dir.path), 0);
}

TEST(DiskCache, CorruptEntryIsLoggedOncePerKey) {
  TempDir dir("cache");
  DiskCache cache(dir.path.string());
  // Fresh keys on every run: the record of reported keys lives as long as the process.
  static int run = 0;
  ++run;
  std::string a = DiskCache::key(fmt::format("logged-a-{}", run), "sm_80", 1, {});
  std::string b = DiskCache::key(fmt::format("logged-b-{}", run), "sm_80", 1, {});
  ASSERT_TRUE(cache.store(a, entry("a")));
  ASSERT_TRUE(cache.store(b, entry("b")));
  fs::resize_file(entry_dir(cache, a) / "kernel.cubin", 1);
  fs::resize_file(entry_dir(cache, b) / "kernel.cubin", 1);
  CapturedLog log(spdlog::level::debug);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(cache.load(a));
    EXPECT_FALSE(cache.load(b));
  }
  EXPECT_EQ(log.count("corrupt cache entry"), 2) << log.text.str();
  EXPECT_EQ(log.count(a), 1) << log.text.str();
}

// Eight processes store the same key over and over while loading it, first over a corrupt
// entry, so installing, losing the race and replacing all happen under contention.
TEST(DiskCache, ConcurrentWritersFromSeveralProcesses) {
  TempDir dir("cache");
  std::string key = DiskCache::key("shared", "sm_90a", 1, {});
  {
    DiskCache cache(dir.path.string());
    ASSERT_TRUE(cache.store(key, entry("shared")));
    fs::resize_file(entry_dir(cache, key) / "kernel.cubin", 10);
  }
  std::vector<pid_t> children;
  for (int c = 0; c < 8; ++c) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // A reader never sees a partial entry: each load is a miss or the whole entry.
      DiskCache cache(dir.path.string());
      int bad = 0;
      for (int i = 0; i < 20; ++i) {
        auto e = cache.load(key);
        if (e && !same(e, entry("shared"))) ++bad;
        if (!cache.store(key, entry("shared"))) ++bad;
        e = cache.load(key);
        if (e && !same(e, entry("shared"))) ++bad;
        std::string own = DiskCache::key(fmt::format("child{}-{}", c, i), "sm_90a", 1, {});
        if (!cache.store(own, entry(own)) || !same(cache.load(own), entry(own))) ++bad;
      }
      _exit(bad == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " saw a broken entry";
  }
  DiskCache cache(dir.path.string());
  EXPECT_TRUE(same(cache.load(key), entry("shared")));
  for (int c = 0; c < 8; ++c) {
    std::string own = DiskCache::key(fmt::format("child{}-19", c), "sm_90a", 1, {});
    EXPECT_TRUE(same(cache.load(own), entry(own)));
  }
  EXPECT_EQ(leftover_temporaries(dir.path), 0);
}

TEST(DiskCache, ConcurrentWritersFromSeveralThreads) {
  TempDir dir("cache");
  DiskCache cache(dir.path.string());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        // Odd rounds share one key; even rounds use a key of their own.
        std::string key = DiskCache::key(i % 2 ? "common" : fmt::format("t{}-{}", t, i), "sm_80", 1, {});
        CacheEntry e = entry(i % 2 ? "common" : key);
        auto before = cache.load(key);
        if (before && !same(before, e)) ++bad;
        if (!cache.store(key, e)) ++bad;
        if (!same(cache.load(key), e)) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(leftover_temporaries(dir.path), 0);
}

// One test, because the warning is once per process: this must be the first failing store.
// Under --gtest_repeat the later runs expect no warning at all.
TEST(DiskCache, UnwritableDirectoryDisablesCachingWithOneWarning) {
  static int run = 0;
  const int warnings = ++run == 1 ? 1 : 0;
  TempDir dir("cache");
  fs::create_directories(dir.path);
  EXPECT_TRUE(DiskCache(dir.path.string()).writable());
  std::ofstream(dir.path / "file") << "not a directory";
  // A path through a regular file cannot be created, even by root.
  DiskCache cache((dir.path / "file" / "cache").string());
  EXPECT_FALSE(cache.writable());

  std::string key = DiskCache::key("x", "sm_80", 1, {});
  CapturedLog log(spdlog::level::info);
  EXPECT_NO_THROW({
    EXPECT_FALSE(cache.store(key, entry("x")));
    EXPECT_FALSE(cache.store(key, entry("x")));
    EXPECT_FALSE(cache.load(key));
    EXPECT_FALSE(cache.writable());
  });
  EXPECT_EQ(log.count("caching is disabled"), warnings) << log.text.str();
  EXPECT_EQ(log.count("TILUS_CACHE_DIR"), warnings) << log.text.str();
  EXPECT_EQ(log.count(cache.dir()), warnings) << log.text.str();
  EXPECT_EQ(log.count("[warning]"), warnings) << log.text.str();

  if (geteuid() != 0) {  // permissions bind only non-root users
    fs::create_directories(dir.path / "ro");
    fs::permissions(dir.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    DiskCache ro((dir.path / "ro").string());
    EXPECT_FALSE(ro.writable());
    EXPECT_NO_THROW({
      EXPECT_FALSE(ro.store(key, entry("x")));
      EXPECT_FALSE(ro.load(key));
    });
    EXPECT_EQ(log.count("caching is disabled"), warnings) << log.text.str();
    fs::permissions(dir.path / "ro", fs::perms::owner_all);
  }
}

TEST(DiskCache, DefaultDirectory) {
  auto saved = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto restore = [](const char* name, const std::optional<std::string>& v) {
    if (v)
      setenv(name, v->c_str(), 1);
    else
      unsetenv(name);
  };
  auto old_dir = saved("TILUS_CACHE_DIR"), old_home = saved("HOME");

  setenv("TILUS_CACHE_DIR", "/tmp/tilus-elsewhere", 1);
  EXPECT_EQ(DiskCache().dir(), "/tmp/tilus-elsewhere");
  EXPECT_EQ(DiskCache("/explicit").dir(), "/explicit");
  setenv("TILUS_CACHE_DIR", "", 1);  // empty counts as unset
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(DiskCache().dir(), "/home/someone/.cache/tilus");
  unsetenv("TILUS_CACHE_DIR");
  EXPECT_EQ(DiskCache().dir(), "/home/someone/.cache/tilus");
  unsetenv("HOME");
  EXPECT_EQ(DiskCache().dir(), "/tmp/tilus-cache");
  EXPECT_FALSE(fs::exists("/home/someone/.cache/tilus")) << "the constructor must not create directories";

  restore("TILUS_CACHE_DIR", old_dir);
  restore("HOME", old_home);
}
