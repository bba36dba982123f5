// Autotuning from C++ without a GPU: spaces and their errors, buckets, keys, the persisted
// format (round trip, stale and corrupt entries), and a parallel compile-only tuning of the
// pipelined matmul space with a fake timer. GPU runs: examples/python/matmul_autotune.py and
// bench/autotune_bench.py (the Python face of the same tuner design).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../../examples/cpp/matmul_pipelined.h"
#include "temp_dir.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/runtime/autotune.h"

using namespace tilus;

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

TEST(Autotune, BucketsAndKeys) {
  std::vector<int64_t> in = {0, 1, 2, 3, 100, 128, 129, 4096}, want = {0, 1, 2, 4, 128, 128, 256, 4096};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(tune_bucket(in[i]), want[i]);
  std::string k1 = tune_key("M", {100, 200, KernelArg::pointer(256)}, "sm_90a");
  std::string k2 = tune_key("M", {120, 129, KernelArg::pointer(512)}, "sm_90a");  // same buckets and facts
  EXPECT_EQ(k1, k2);
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(257)}, "sm_90a"));  // alignment differs
  EXPECT_NE(k1, tune_key("M", {100, 200, KernelArg::pointer(256)}, "sm_80"));
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
    std::ofstream(f.path()) << "tilus-autotune 1\nkey " << e.key << "\nwinner bm=";  // truncated
  }
  EXPECT_FALSE(load_tune_entry(e.key, dir.path.string()));
  EXPECT_NE(tune_report(e).find("* bm=64  1.5000 ms"), std::string::npos) << tune_report(e);
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
  auto make = [](const TuneConfig& c) {
    examples::MatmulPipelined k;
    k.block_m = c.at("block_m");
    k.block_n = c.at("block_n");
    k.warps = c.at("warps");
    k.stages = c.at("stages");
    return k;
  };
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

TEST(Autotune, TunesOnTheGpuAndASecondTunerLoadsTheWinner) {
  if (!gpu_available()) GTEST_SKIP() << "no GPU: " << gpu_unavailable_reason();
  TempDir dir("autotune-gpu");
  TuneSpace space;
  space.add("block_m, block_n", {{64, 64}, {128, 128}}).add("stages", {{2}, {3}});
  TuneOptions opts;
  opts.cache_dir = dir.path.string();
  opts.repeat = 3;
  auto make = [](const TuneConfig& c) {
    examples::MatmulPipelined k;
    k.block_m = c.at("block_m");
    k.block_n = c.at("block_n");
    k.warps = 4;
    k.stages = c.at("stages");
    return k;
  };
  int64_t m = 300, n = 260, k = 190;
  DeviceBuffer a(dtypes::float16, m * k), b(dtypes::float16, k * n), c(dtypes::float16, m * n);
  std::vector<double> ha(m * k), hb(k * n);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = double(int(i * 7 % 11) - 5) / 8;
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = double(int(i * 5 % 13) - 6) / 8;
  a.upload(ha);
  b.upload(hb);
  std::vector<KernelArg> args = {m, n, k, a.arg(), b.arg(), c.arg()};
  Autotuned<examples::MatmulPipelined> kernel("MatmulPipelined", space, make, opts);
  kernel(args);
  synchronize();
  auto got = c.download();
  for (int64_t i = 0; i < m; i += 7)
    for (int64_t j = 0; j < n; j += 5) {
      double want = 0;
      for (int64_t kk = 0; kk < k; ++kk) want += ha[i * k + kk] * hb[kk * n + j];
      ASSERT_NEAR(got[i * n + j], want, 0.05 + 0.01 * std::abs(want)) << i << "," << j;
    }
  const TuneEntry* first = kernel.entry(args);
  ASSERT_TRUE(first);
  for (auto& r : first->results) EXPECT_TRUE(r.ms) << r.error;
  Autotuned<examples::MatmulPipelined> again("MatmulPipelined", space, make, opts);
  again(args);
  ASSERT_TRUE(again.entry(args));
  EXPECT_EQ(again.entry(args)->winner, first->winner);
  EXPECT_NEAR(again.entry(args)->tuning_s, first->tuning_s, 1e-5);  // loaded, not retuned
}
