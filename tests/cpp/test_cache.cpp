// The on-disk cubin cache: hashing, keys, hits, corrupt entries, concurrent writers from
// several processes and threads, and an unwritable directory.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tilus/runtime/cache.h"

using namespace tilus;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / fmt::format("tilus-test-cache-{}-{}", getpid(), counter++);
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

CacheEntry entry(const std::string& tag) {
  std::vector<char> cubin = {'\x7f', 'E', 'L', 'F', '\0', '\1', '\0'};
  for (char c : tag) cubin.push_back(c);
  cubin.resize(4096 + tag.size(), '\xab');
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
  // Lengths around the padding boundary (55, 56, 64 bytes) hash without crashing and differ.
  EXPECT_NE(sha256_hex(std::string(55, 'x')), sha256_hex(std::string(56, 'x')));
  EXPECT_NE(sha256_hex(std::string(63, 'x')), sha256_hex(std::string(64, 'x')));
  std::vector<char> bytes = {'a', 'b', 'c'};
  EXPECT_EQ(sha256_hex(bytes), sha256_hex(std::string("abc")));
}

TEST(DiskCache, KeyCoversEveryInput) {
  std::string base = DiskCache::key("src", "sm_90a", 13000, {"-lineinfo"});
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base, DiskCache::key("src", "sm_90a", 13000, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src2", "sm_90a", 13000, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_80", 13000, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_90a", 12080, {"-lineinfo"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_90a", 13000, {"-lineinfo", "-G"}));
  EXPECT_NE(base, DiskCache::key("src", "sm_90a", 13000, {}));
  // Fields are delimited: moving text from one field to the next changes the key.
  EXPECT_NE(DiskCache::key("ab", "sm_80", 1, {"c"}), DiskCache::key("a", "sm_80", 1, {"bc"}));
}

TEST(DiskCache, MissStoreHit) {
  TempDir dir;
  DiskCache cache(dir.path.string());
  std::string key = DiskCache::key("k1", "sm_80", 1, {});
  EXPECT_FALSE(cache.load(key));
  ASSERT_TRUE(cache.store(key, entry("one")));
  EXPECT_TRUE(same(cache.load(key), entry("one")));
  // The documented layout.
  fs::path d = entry_dir(cache, key);
  for (const char* f : {"kernel.cu", "kernel.cubin", "meta.json"}) EXPECT_TRUE(fs::is_regular_file(d / f)) << f;
  EXPECT_EQ(fs::file_size(d / "kernel.cubin"), entry("one").cubin.size());
  // A second store of a valid entry keeps it.
  EXPECT_TRUE(cache.store(key, entry("one")));
  EXPECT_TRUE(same(cache.load(key), entry("one")));
  EXPECT_EQ(leftover_temporaries(dir.path), 0);
}

TEST(DiskCache, CorruptEntriesAreIgnoredAndReplaced) {
  TempDir dir;
  DiskCache cache(dir.path.string());
  std::string key = DiskCache::key("k2", "sm_80", 1, {});
  fs::path d = entry_dir(cache, key);
  auto damage = [&](const std::function<void()>& how) {
    fs::remove_all(d);
    ASSERT_TRUE(cache.store(key, entry("old")));
    how();
    EXPECT_FALSE(cache.load(key));
    ASSERT_TRUE(cache.store(key, entry("new")));
    EXPECT_TRUE(same(cache.load(key), entry("new")));
  };
  damage([&] { fs::resize_file(d / "kernel.cubin", 100); });  // truncated
  damage([&] {                                                // one flipped byte
    std::fstream f(d / "kernel.cubin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x00');
  });
  damage([&] { fs::remove(d / "meta.json"); });  // a missing file
  damage([&] { std::ofstream(d / "kernel.cu") << "// edited by hand\n"; });
  EXPECT_EQ(leftover_temporaries(dir.path), 0);
}

TEST(DiskCache, ConcurrentWritersFromSeveralProcesses) {
  TempDir dir;
  std::string key = DiskCache::key("shared", "sm_90a", 1, {});
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
  EXPECT_EQ(leftover_temporaries(dir.path), 0);
}

TEST(DiskCache, ConcurrentWritersFromSeveralThreads) {
  TempDir dir;
  DiskCache cache(dir.path.string());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        std::string key = DiskCache::key(i % 2 ? "common" : fmt::format("t{}-{}", t, i), "sm_80", 1, {});
        CacheEntry e = entry(i % 2 ? "common" : key);
        if (!cache.store(key, e)) ++bad;
        if (!same(cache.load(key), e)) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(leftover_temporaries(dir.path), 0);
}

// One test, because the warning is once per process.
TEST(DiskCache, UnwritableDirectoryDisablesCachingWithOneWarning) {
  TempDir dir;
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "file") << "not a directory";
  // A path through a regular file cannot be created, even by root.
  DiskCache cache((dir.path / "file" / "cache").string());
  EXPECT_FALSE(cache.writable());

  std::ostringstream captured;
  auto logger = spdlog::default_logger();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  logger->sinks().push_back(sink);
  std::string key = DiskCache::key("x", "sm_80", 1, {});
  EXPECT_FALSE(cache.store(key, entry("x")));
  EXPECT_FALSE(cache.store(key, entry("x")));
  EXPECT_FALSE(cache.load(key));
  logger->sinks().pop_back();
  std::string log = captured.str();
  size_t first = log.find("cannot be written");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("cannot be written", first + 1), std::string::npos) << "warned twice:\n" << log;
  EXPECT_NE(log.find("TILUS_CACHE_DIR"), std::string::npos) << log;

  if (geteuid() != 0) {  // permissions only bind non-root users
    fs::create_directories(dir.path / "ro");
    fs::permissions(dir.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    DiskCache ro((dir.path / "ro").string());
    EXPECT_FALSE(ro.writable());
    EXPECT_FALSE(ro.store(key, entry("x")));
    fs::permissions(dir.path / "ro", fs::perms::owner_all);
  }
}

TEST(DiskCache, DefaultDirectory) {
  const char* old = std::getenv("TILUS_CACHE_DIR");
  std::string saved = old ? old : "";
  setenv("TILUS_CACHE_DIR", "/tmp/tilus-elsewhere", 1);
  EXPECT_EQ(DiskCache().dir(), "/tmp/tilus-elsewhere");
  unsetenv("TILUS_CACHE_DIR");
  if (const char* home = std::getenv("HOME")) EXPECT_EQ(DiskCache().dir(), std::string(home) + "/.cache/tilus");
  if (old) setenv("TILUS_CACHE_DIR", saved.c_str(), 1);
}
