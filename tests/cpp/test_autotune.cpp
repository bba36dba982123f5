// Autotuning from C++ without a GPU: spaces and their errors, config values (integers and the
// text of any literal), buckets, keys, the persisted format (round trip, stale, corrupt and
// malformed entries), a parallel compile-only tuning of the pipelined matmul space with a fake
// timer, and a real tuning on the CPU backend. GPU runs: the last test here,
// examples/python/matmul_autotune.py and bench/autotune_bench.py (Python drives this tuner).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../../examples/cpp/matmul_pipelined.h"
#include "temp_dir.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/runtime/autotune.h"

using namespace tilus;

namespace {

// The pipelined matmul of a config; what the config does not name keeps `base`'s value.
auto matmul_of(examples::MatmulPipelined base = {}) {
  return [base](const TuneConfig& c) {
    examples::MatmulPipelined k = base;
    using Field = std::pair<const char*, int64_t*>;
    for (auto [name, field] : {Field{"block_m", &k.block_m}, Field{"block_n", &k.block_n},
                               Field{"block_k", &k.block_k}, Field{"warps", &k.warps}, Field{"stages", &k.stages}})
      if (c.count(name)) *field = c.at(name);
    return k;
  };
}

// A ragged f16 matmul's buffers on a backend, and a check of c against a float64 reference.
struct MatmulProblem {
  int64_t m, n, k;
  DeviceBuffer a, b, c;
  std::vector<double> ha, hb;

  MatmulProblem(int64_t m, int64_t n, int64_t k, Backend backend)
      : m(m), n(n), k(k), a(dtypes::float16, m * k, backend), b(dtypes::float16, k * n, backend),
        c(dtypes::float16, m * n, backend), ha(m * k), hb(k * n) {
    for (size_t i = 0; i < ha.size(); ++i) ha[i] = double(int(i * 7 % 11) - 5) / 8;
    for (size_t i = 0; i < hb.size(); ++i) hb[i] = double(int(i * 5 % 13) - 6) / 8;
    a.upload(ha);
    b.upload(hb);
  }
  std::vector<KernelArg> args() const { return {m, n, k, a.arg(), b.arg(), c.arg()}; }
  void check(int64_t step) const {
    auto got = c.download();
    for (int64_t i = 0; i < m; i += step)
      for (int64_t j = 0; j < n; j += step) {
        double want = 0;
        for (int64_t kk = 0; kk < k; ++kk) want += ha[i * k + kk] * hb[kk * n + j];
        ASSERT_NEAR(got[i * n + j], want, 0.05 + 0.01 * std::abs(want)) << i << "," << j;
      }
  }
};

}  // namespace

TEST(Autotune, SpacesAreProductsWithFixedNamesProjectedOut) {
  TuneSpace s;
  s.add("block_m, block_n", {{64, 64}, {64, 128}, {128, 128}, {128, 256}}).add("warps", {{4}, {8}}).add("stages", {{2}, {3}});
  EXPECT_EQ(s.configs().size(), 16u);
  auto fixed = s.configs({{"stages", 3}});
  EXPECT_EQ(fixed.size(), 8u);
  for (auto& c : fixed) EXPECT_EQ(c.at("stages"), 3);
  EXPECT_EQ(s.configs({{"block_m", 64}}).size(), 12u);  // block_n keeps its 3 distinct values
}

TEST(Autotune, BadSpacesNameTheLine) {
  TuneSpace s;
  s.add("a", {{1}});
  EXPECT_THROW(s.add("b, c", {{1, 2, 3}}), CompileError);
  EXPECT_THROW(s.add("b", {}), CompileError);
  try {
    s.add("a", {{2}});  // BAD-SPACE
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("already tuned"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("test_autotune.cpp"), std::string::npos);
  }
}

TEST(Autotune, ValuesAreTextThatIntegersConvertBackFrom) {
  TuneValue i = 64, t = TuneValue::from_text("('row', 2)");
  EXPECT_EQ(i.text(), "64");
  EXPECT_EQ(i, 64);
  EXPECT_EQ(i.as_int() * 2, 128);
  int64_t back = i;
  EXPECT_EQ(back, 64);
  EXPECT_NE(i, TuneValue::from_text("'64'"));
  EXPECT_THROW(t.as_int(), CompileError);
  TuneSpace s;
  s.add("layout, block", {{TuneValue::from_text("'row'"), 64}, {TuneValue::from_text("'col'"), 64}});
  auto configs = s.configs({{"block", 64}});
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(to_string(configs[1]), "block=64 layout='col'");
  EXPECT_THROW(TuneSpace().add("a, a", {{1, 2}}), CompileError);  // a repeated name
}

TEST(Autotune, BucketsAndKeys) {
  std::vector<int64_t> in = {0, 1, 2, 3, 100, 128, 129, 4096}, want = {0, 1, 2, 4, 128, 128, 256, 4096};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(tune_bucket(in[i]), want[i]);
  std::string k1 = tune_key("M", {100, 200, KernelArg::pointer(256)}, "sm_90a");
  std::string k2 = tune_key("M", {120, 129, KernelArg::pointer(512)}, "sm_90a");  // same buckets and facts
  EXPECT_EQ(k1, k2);
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(257)}, "sm_90a"));  // alignment differs
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(256)}, "sm_80"));
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(256)}, "cpu"));
  TuneSpace s;
  s.add("bm", {{64}, {128}});
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(256)}, "sm_90a", tune_space_id(s.configs())));  // a space
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(256)}, "sm_90a", {}, {{"bk", 32}}));  // fixed
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(256)}, "sm_90a", {}, {},
                         {{"mode", TuneValue::from_text("'x'")}}));  // constants
  EXPECT_NE(k1.find("tilus="), std::string::npos);
  EXPECT_NE(k1.find("nvrtc="), std::string::npos);
}

TEST(Autotune, PersistenceRoundTripStaleAndCorruptEntries) {
  TempDir dir("autotune");
  TuneEntry e;
  e.key = "script=M sizes=[128] gpu=X";
  e.winner = {{"bm", 64}};
  e.results = {{{{"bm", 64}}, 1.5, ""}, {{{"bm", 128}}, std::nullopt, "too much shared memory"}};
  e.tuning_s = 2.5;
  store_tune_entry(e, dir.path.string());
  auto back = load_tune_entry(e.key, dir.path.string());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->winner, e.winner);
  ASSERT_EQ(back->results.size(), 2u);
  EXPECT_DOUBLE_EQ(*back->results[0].ms, 1.5);
  EXPECT_FALSE(back->results[1].ms);
  EXPECT_FALSE(load_tune_entry(e.key + " driver=2", dir.path.string()));  // another key: retune
  for (auto& f : std::filesystem::directory_iterator(std::filesystem::path(dir.path.string()) / "autotune")) {
    EXPECT_EQ(f.path().filename().string()[0] != '.', true);  // no temporaries left
    std::ofstream(f.path()) << "tilus-autotune 3\nkey " << e.key << "\nwinner bm=";  // truncated
  }
  EXPECT_FALSE(load_tune_entry(e.key, dir.path.string()));
  EXPECT_NE(tune_report(e).find("* bm=64  1.5000 ms"), std::string::npos) << tune_report(e);
}

TEST(Autotune, TextValuesAndErrorsSurviveTheFileAndMalformedEntriesAreIgnored) {
  TempDir dir("autotune-text");
  TuneEntry e;
  e.key = "script=m.K fixed={tag='a b'}\nsecond line \\ backslash";
  TuneConfig odd = {{"shape", TuneValue::from_text("(1, 2)")}, {"name", TuneValue::from_text("'tab\there\nnewline\\'")}};
  e.winner = odd;
  e.results = {{odd, 0.25, ""}, {{{"shape", TuneValue::from_text("()")}}, std::nullopt, "error:\tshared memory"}};
  e.compile_s = 1.25;
  store_tune_entry(e, dir.path.string());
  auto back = load_tune_entry(e.key, dir.path.string());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->winner, odd);
  EXPECT_EQ(back->results[1].error, "error:\tshared memory");
  EXPECT_EQ(back->results[1].config.at("shape").text(), "()");
  EXPECT_DOUBLE_EQ(back->compile_s, 1.25);
  // Entries no tuning writes: a winner that never ran, an unknown line.
  std::filesystem::path file = *std::filesystem::directory_iterator(dir.path / "autotune");
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto rewritten = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    std::ofstream(file) << t;
    return load_tune_entry(e.key, dir.path.string());
  };
  EXPECT_TRUE(rewritten("end", "end"));
  EXPECT_FALSE(rewritten("winner name", "winner x=1 name"));
  EXPECT_FALSE(rewritten("compile_s", "bogus 1\ncompile_s"));
  EXPECT_FALSE(rewritten("tilus-autotune 3", "tilus-autotune 2"));
}

TEST(Autotune, ParallelCompileOnlyTuningWithAFakeTimer) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not available";
  TempDir dir("autotune");
  TuneSpace space;
  space.add("block_m, block_n", {{64, 64}, {64, 128}, {128, 128}, {128, 256}}).add("warps", {{4}, {8}}).add("stages", {{2}, {3}});
  int timed = 0;
  TuneOptions opts;
  opts.arch = "sm_90a";
  opts.cache_dir = dir.path.string();
  opts.timer = [&](const TuneConfig& c) {
    ++timed;
    return double(c.at("block_m") * 100 + c.at("stages") * 10 + c.at("warps"));
  };
  auto make = matmul_of();
  std::vector<KernelArg> args = {1000, 1000, 1000, KernelArg::pointer(256), KernelArg::pointer(512), KernelArg::pointer(1024)};
  Autotuned<examples::MatmulPipelined> kernel("MatmulPipelined", space, make, opts);
  kernel(args);
  EXPECT_EQ(timed, 16);
  const TuneEntry* e = kernel.entry(args);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->winner, (TuneConfig{{"block_m", 64}, {"block_n", 64}, {"stages", 2}, {"warps", 4}}));
  EXPECT_EQ(e->results.size(), 16u);
  // A second tuner (as in a second process) with sizes in the same buckets: no tuning.
  Autotuned<examples::MatmulPipelined> again("MatmulPipelined", space, make, opts);
  again({1020, 999, 1001, KernelArg::pointer(256), KernelArg::pointer(512), KernelArg::pointer(1024)});
  EXPECT_EQ(timed, 16);
}

TEST(Autotune, TunesOnTheCpuBackendWithTheWallClock) {
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason();
  TempDir dir("autotune-cpu");
  TuneSpace space;
  space.add("block_m, block_n", {{16, 16}, {32, 16}}).add("stages", {{2}, {256}});  // 256: too much shared memory
  TuneOptions opts;
  opts.arch = "cpu";
  opts.cache_dir = dir.path.string();
  opts.repeat = 2;
  examples::MatmulPipelined base;
  base.block_k = 16;
  base.warps = 1;
  MatmulProblem p(40, 24, 20, Backend::Cpu);
  std::vector<KernelArg> args = p.args();
  Autotuned<examples::MatmulPipelined> kernel("MatmulPipelined", space, matmul_of(base), opts);
  kernel(args);
  p.check(1);
  const TuneEntry* e = kernel.entry(args);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->results.size(), 4u);
  int timed = 0;
  for (auto& r : e->results) {
    timed += r.ms.has_value();
    if (r.config.at("stages") == 2) {
      EXPECT_TRUE(r.ms && *r.ms > 0) << r.error;
    } else {
      EXPECT_FALSE(r.error.empty());  // skipped, with why
    }
  }
  EXPECT_EQ(timed, 2);
  EXPECT_NE(e->key.find("device=cpu"), std::string::npos);
}

// y = 10 y + digit over 32 elements: the launches of a tuning leave their order in y's digits
// when y is passed with an unknown size (not copied, so every launch writes the caller's array).
struct AppendDigit : Script {
  static constexpr const char* param_names = "y";
  int64_t digit = 1;
  void operator()(Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto gy = global_view(y, {32});
    auto v = load_global(gy, {.offsets = {0}, .shape = {32}});
    store_global(gy, v * 10.0f + float(digit), {.offsets = {0}});
  }
};

TEST(Autotune, ConfigsAreTimedInRoundsEachAfterAWarmUp) {
  // A config timed in a row of its own runs would be favoured or hurt by the GPU's clock
  // following its recent load: every config runs once (untimed), then once a round.
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason();
  TempDir dir("autotune-rounds");
  TuneSpace space;
  space.add("digit", {{1}, {2}});
  TuneOptions opts;
  opts.arch = "cpu";
  opts.cache_dir = dir.path.string();
  opts.repeat = 2;
  DeviceBuffer y(dtypes::float32, 32, Backend::Cpu);
  y.upload(std::vector<double>(32, 0.0));
  KernelArg arg = y.arg();
  arg.bytes = -1;  // unknown size: not copied, so the candidates' launches show
  Autotuned<AppendDigit> kernel(
      "AppendDigit", space,
      [](const TuneConfig& c) {
        AppendDigit k;
        k.digit = c.at("digit");
        return k;
      },
      opts);
  std::vector<KernelArg> args = {arg};
  kernel(args);
  const TuneEntry* e = kernel.entry(args);
  ASSERT_TRUE(e);
  int64_t winner = e->winner.at("digit");
  // warm-ups 1 2, round one 1 2, round two 1 2, then the winner's own launch
  double want = 121212 * 10 + double(winner);
  for (double got : y.download()) EXPECT_EQ(got, want);
}

// The tuner's flush before each timed launch reads its buffer around L2's L1 bypass and stores
// nothing unconditionally: L2 is left holding clean lines (no write-back slows the timed kernel).
TEST(Autotune, TheL2FlushReadsAndStoresOnlyUnderANeverTrueTest) {
  NvrtcOutput out = nvrtc_compile(l2_flush_source(), "tilus_l2_flush", "sm_90a");
  EXPECT_NE(out.ptx.find("ld.global.cg.v4"), std::string::npos) << out.ptx;
  size_t stores = 0;
  for (size_t at = out.ptx.find("st.global"); at != std::string::npos; at = out.ptx.find("st.global", at + 1)) ++stores;
  EXPECT_EQ(stores, 1u) << out.ptx;
  size_t store = out.ptx.find("st.global");
  size_t branch = out.ptx.rfind("@%p", store);  // the store is behind a predicated branch
  EXPECT_NE(branch, std::string::npos) << out.ptx;
}

TEST(Autotune, TunesOnTheGpuAndASecondTunerLoadsTheWinner) {
  if (!gpu_available()) GTEST_SKIP() << "no GPU: " << gpu_unavailable_reason();
  TempDir dir("autotune-gpu");
  TuneSpace space;
  space.add("block_m, block_n", {{64, 64}, {128, 128}}).add("stages", {{2}, {3}});
  TuneOptions opts;
  opts.cache_dir = dir.path.string();
  opts.repeat = 3;
  examples::MatmulPipelined base;
  base.warps = 4;
  auto make = matmul_of(base);
  MatmulProblem p(300, 260, 190, Backend::Gpu);
  std::vector<KernelArg> args = p.args();
  Autotuned<examples::MatmulPipelined> kernel("MatmulPipelined", space, make, opts);
  kernel(args);
  synchronize();
  p.check(7);
  const TuneEntry* first = kernel.entry(args);
  ASSERT_TRUE(first);
  for (auto& r : first->results) EXPECT_TRUE(r.ms) << r.error;
  Autotuned<examples::MatmulPipelined> again("MatmulPipelined", space, make, opts);
  again(args);
  ASSERT_TRUE(again.entry(args));
  EXPECT_EQ(again.entry(args)->winner, first->winner);
  EXPECT_NEAR(again.entry(args)->tuning_s, first->tuning_s, 1e-5);  // loaded, not retuned
}
