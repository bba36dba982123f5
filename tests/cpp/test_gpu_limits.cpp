// What a compile tells about the GPU without running there: ptxas's registers and spills on
// every compiled kernel (also from the disk cache), and the CPU backend's warnings for a kernel
// that runs on the CPU but would not run (well) on a GPU.
#include <gtest/gtest.h>

#include <string>

#include "../examples/cpp/vector_add.h"
#include "temp_dir.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

#define REQUIRE_NVRTC() \
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC"
#define REQUIRE_CPU() \
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason()

// 160 KB of shared memory: within sm_80's and sm_90's budgets, beyond sm_86's and sm_89's.
struct BigShared : Script {
  static constexpr const char* param_names = "x";
  void operator()(Ptr<f32> x) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gx = global_view(x, {40 * 1024});
    auto s = shared_tensor(dtypes::float32, {40 * 1024});
    copy_async(gx, s, {.offsets = {0}});
    copy_async_wait_all();
    store_global(gx, load_shared(s), {.offsets = {0}});
  }
};

// One warp accumulating a 128 x 128 float32 tile over a loop: 512 live registers per thread,
// twice the 255 a thread may have, so ptxas spills.
struct BigTile : Script {
  static constexpr const char* param_names = "k, a, b, c";
  void operator()(Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f32> c) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto ga = global_view(a, {128, k});
    auto gb = global_view(b, {k, 128});
    auto gc = global_view(c, {128, 128});
    auto acc = register_tensor(dtypes::float32, {128, 128}, 0.0);
    for (Expr k0 : range(0, k, 16)) {
      auto ta = load_global(ga, {.offsets = {0, k0}, .shape = {128, 16}});
      auto tb = load_global(gb, {.offsets = {k0, 0}, .shape = {16, 128}});
      acc = dot(ta, tb, acc);
    }
    store_global(gc, acc, {.offsets = {0, 0}});
  }
};

// One warp holding a 64 x 64 float32 tile (128 registers per thread) and its transpose: the
// transpose renames the tile's registers, so the two need 128 registers at once, not 256 (which
// said it would spill, as for the transposed accumulator of a dot run as wgmma).
struct RenamedTile : Script {
  static constexpr const char* param_names = "x, y";
  void operator()(Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto t = load_global(global_view(x, {64, 64}), {.offsets = {0, 0}, .shape = {64, 64}});
    store_global(global_view(y, {1, 64, 64}), unsqueeze(transpose(t), {0}), {.offsets = {0, 0, 0}});
    store_global(global_view(x, {64, 64}), t, {.offsets = {0, 0}});
  }
};

}  // namespace

namespace {

bool mentions(const std::vector<std::string>& warnings, const std::string& what) {
  for (auto& w : warnings)
    if (w.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(GpuLimits, CompiledKernelsCarryRegistersAndSpills) {
  REQUIRE_NVRTC();
  if (nvrtc_version() < 12000) GTEST_SKIP() << "NVRTC before 12 does not report ptxas's resources";
  TempDir dir("resources");
  DiskCache cache(dir.path.string());
  CompiledKernel k = compile_program(trace(examples::VectorAdd{}), "sm_90a", &cache);
  ASSERT_TRUE(k.resources.known()) << "no ptxas report";
  EXPECT_GT(k.resources.registers, 0);
  EXPECT_LE(k.resources.registers, 255);
  EXPECT_EQ(k.resources.stack_frame_bytes, 0);  // from the report, or from the cubin without one
  // The spill bytes come only from ptxas's report, which NVRTC on the GPU machine leaves out of
  // some compiles' logs at random (-1 then); this machine's NVRTC always gives it.
  bool reported = k.resources.spill_store_bytes >= 0;
  if (reported) {
    EXPECT_EQ(k.resources.spill_store_bytes, 0);
    EXPECT_EQ(k.resources.spill_load_bytes, 0);
  }
  // The cache entry keeps them.
  CompiledKernel again = compile_program(trace(examples::VectorAdd{}), "sm_90a", &cache);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.resources.registers, k.resources.registers);
  EXPECT_EQ(again.resources.spill_load_bytes, k.resources.spill_load_bytes);
  // A thread that holds 256 values spills: a stack frame, and spill bytes where reported.
  CompiledKernel big = compile_program(trace(BigTile{}), "sm_90a", nullptr);
  EXPECT_GT(big.resources.stack_frame_bytes, 0) << big.resources.str();
  if (big.resources.spill_store_bytes >= 0) {
    EXPECT_TRUE(big.resources.spills()) << big.resources.str();
  }
}

TEST(GpuLimits, PtxasReportParses) {
  KernelResources r = parse_ptxas_report(
      "ptxas info    : Function properties for k\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 72 registers, used 0 barriers\n");
  EXPECT_EQ(r.registers, 72);
  EXPECT_EQ(r.stack_frame_bytes, 16);
  EXPECT_EQ(r.spill_store_bytes, 8);
  EXPECT_EQ(r.spill_load_bytes, 4);
  EXPECT_FALSE(parse_ptxas_report("").known());
  EXPECT_EQ(r.wgmma_serialized, "");
  // ptxas names the function of its wgmma remark before the function's own report.
  std::string report =
      "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
      "wgmma pipeline crossing function boundary at a function call in the function 'k'\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
      "ptxas info    : Used 154 registers, used 1 barriers\n"
      "ptxas info    : Compiling entry function 'other' for 'sm_90a'\n"
      "ptxas info    : Used 40 registers, used 1 barriers\n";
  KernelResources k = parse_ptxas_report(report, "k");
  EXPECT_EQ(k.registers, 154);
  EXPECT_EQ(k.wgmma_serialized, "wgmma pipeline crossing function boundary at a function call");
  EXPECT_NE(k.str().find("wgmma serialized (wgmma pipeline crossing"), std::string::npos) << k.str();
  EXPECT_EQ(parse_ptxas_report(report, "other").wgmma_serialized, "");
}

TEST(GpuLimits, CpuKernelsWarnAboutWhatAGpuCannotRun) {
  REQUIRE_CPU();
  auto plain = CpuKernel::compile(trace(examples::VectorAdd{}));
  EXPECT_TRUE(plain->gpu_warnings().empty()) << plain->gpu_warnings().front();
  auto shared = CpuKernel::compile(trace(BigShared{}));
  if (!gpu_available()) {
    EXPECT_TRUE(mentions(shared->gpu_warnings(), "163840 bytes of shared memory")) << ::testing::PrintToString(shared->gpu_warnings());
    EXPECT_TRUE(mentions(shared->gpu_warnings(), "sm_86"));
    EXPECT_FALSE(mentions(shared->gpu_warnings(), "sm_80"));
  } else {
    bool fits = Target::from_arch(current_device().arch()).shared_memory_per_block >= 160 * 1024;
    EXPECT_EQ(shared->gpu_warnings().empty(), fits);
  }
  if (!nvrtc_available() || nvrtc_version() < 12000) return;
  auto big = CpuKernel::compile(trace(BigTile{}));
  EXPECT_TRUE(mentions(big->gpu_warnings(), "spill")) << ::testing::PrintToString(big->gpu_warnings());
  auto renamed = CpuKernel::compile(trace(RenamedTile{}));
  EXPECT_TRUE(renamed->gpu_warnings().empty()) << ::testing::PrintToString(renamed->gpu_warnings());
}
