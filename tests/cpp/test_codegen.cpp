// The CUDA emitter: golden text per instruction family, vectorization decisions, and every
// example compiled by NVRTC for sm_80 and sm_90a (no GPU needed).
#include <gtest/gtest.h>

#include "../../examples/cpp/matmul_mma.h"
#include "../../examples/cpp/matmul_naive.h"
#include "../../examples/cpp/matmul_auto.h"
#include "../../examples/cpp/matmul_copy.h"
#include "../../examples/cpp/matmul_pipelined.h"
#include "../../examples/cpp/matmul_shared.h"
#include "../../examples/cpp/softmax.h"
#include "../../examples/cpp/vector_add.h"
#include "golden.h"
#include "shapes_script.h"
#include "tilus/codegen/cuda.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

KernelSource emit(const Program& traced, const std::string& arch = "sm_90a") {
  PipelineOptions opts;
  opts.target = Target::from_arch(arch);
  return emit_cuda(run_pipeline(traced, opts).kernels[0], opts.target);
}

Program specialize(Program p, std::map<int, int64_t> facts) {
  p.kernels[0].param_divisibility = std::move(facts);
  return p;
}

struct Elementwise : Script {
  static constexpr const char* param_names = "n, x, y";
  void operator()(Int32 n, Ptr<f16> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(n, 256)};
    attrs.warps = 1;
    auto gx = global_view(x, {n});
    auto gy = global_view(y, {n});
    auto v = load_global(gx, {.offsets = {blockIdx.x * 256}, .shape = {256}});
    auto f = v.to(dtypes::float32);
    auto r = where(f > 0.0f, exp(f) * 2.0f, -f);
    store_global(gy, r, {.offsets = {blockIdx.x * 256}});
  }
};

struct RowSum : Script {
  static constexpr const char* param_names = "m, x, y";
  void operator()(Int32 m, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(m, 8)};
    attrs.warps = 4;
    auto gx = global_view(x, {m, 512});
    auto gy = global_view(y, {m, 1});
    auto v = load_global(gx, {.offsets = {blockIdx.x * 8, 0}, .shape = {8, 512}});
    store_global(gy, sum(v, {.dims = std::vector<int>{1}, .keepdim = true}), {.offsets = {blockIdx.x * 8, 0}});
  }
};

struct AsyncCopy : Script {
  static constexpr const char* param_names = "n, x, y";
  void operator()(Int32 n, Ptr<f16> x, Ptr<f16> y) {
    attrs.blocks = {1};
    attrs.warps = 2;
    auto gx = global_view(x, {n, n});
    auto gy = global_view(y, {n, n});
    auto s = shared_tensor(dtypes::float16, {32, 64});
    copy_async(gx, s, {.offsets = {0, 0}, .evict = "evict_first"});
    copy_async_commit_group();
    copy_async_wait_group(0);
    sync();
    store_global(gy, load_shared(s), {.offsets = {0, 0}});
    single_warp(1, [&] { sync(); });
    single_thread([&] { printf("done %d\n", n); });
  }
};

}  // namespace

TEST(CudaEmitter, ElementwiseGolden) {
  EXPECT_TRUE(matches_golden("cuda_elementwise", emit(trace(Elementwise{})).source, ".cu"));
}

TEST(CudaEmitter, ReductionGolden) { EXPECT_TRUE(matches_golden("cuda_rowsum", emit(trace(RowSum{})).source, ".cu")); }

TEST(CudaEmitter, ShapesAndCopiesGolden) {
  EXPECT_TRUE(matches_golden("cuda_shapes", emit(trace(tests::Shapes{})).source, ".cu"));
}

namespace {
struct SimtDot : Script {
  static constexpr const char* param_names = "a, b, c";
  void operator()(Ptr<f32> a, Ptr<f32> b, Ptr<f32> c) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto ga = global_view(a, {16, 8}), gb = global_view(b, {8, 16}), gc = global_view(c, {16, 16});
    auto r = dot(load_global(ga, {.offsets = {0, 0}, .shape = {16, 8}}),
                 load_global(gb, {.offsets = {0, 0}, .shape = {8, 16}}));
    store_global(gc, r, {.offsets = {0, 0}});
  }
};
}  // namespace

// Both dot lowerings: mma.sync fragments from registers, and the SIMT product.
TEST(CudaEmitter, DotGolden) {
  EXPECT_TRUE(matches_golden("cuda_dot_mma", emit(trace(examples::MatmulNaive{})).source, ".cu"));
  EXPECT_TRUE(matches_golden("cuda_dot_simt", emit(trace(SimtDot{})).source, ".cu"));
}

TEST(CudaEmitter, AsyncCopyGolden) {
  KernelSource src = emit(specialize(trace(AsyncCopy{}), {{0, 16}, {1, 16}, {2, 16}}));
  EXPECT_TRUE(matches_golden("cuda_async_copy", src.source, ".cu"));
  // 16-byte cp.async.cg with the L2 evict-first policy, a named barrier for warp 1 and
  // printf from one thread.
  EXPECT_NE(src.source.find("tilus::cp_async_hint<16>"), std::string::npos);
  EXPECT_NE(src.source.find("tilus::policy_evict_first()"), std::string::npos);
  EXPECT_NE(src.source.find("tilus::named_barrier(1, 32)"), std::string::npos);
  EXPECT_NE(src.source.find("printf(\"done %d\\n\""), std::string::npos);
}

namespace {
// Every lowering of copy / async_copy: vectorized SIMT with L2 hints, explicit cp.async,
// async_copy, ldmatrix, stmatrix (sm_90), a scalar copy, and TMA (sm_90; the SIMT copies
// between global and shared memory disable it).
struct CopyPaths : Script {
  static constexpr const char* param_names = "n, x, y";
  void operator()(Int32 n, Ptr<f16> x, Ptr<f16> y) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gx = global_view(x, {n, n});
    auto gy = global_view(y, {n, n});
    auto sa = shared_tensor(dtypes::float16, {64, 32});
    auto sb = shared_tensor(dtypes::float16, {32, 64});
    copy(gx.region({0, 0}, {64, 32}), sa, {.disable_tma = true, .eviction_policy = "evict_last"});
    copy(gx.region({0, 32}, {32, 64}), sb, {.eviction_policy = "evict_first", .annotations = {{"use_cp_async", "1"}}});
    auto ra = register_tensor(dtypes::float16, {64, 32});
    auto rb = register_tensor(dtypes::float16, {32, 64});
    copy(sa, ra);
    copy(sb, rb);
    auto acc = dot(ra, rb, {}, {.acc_dtype = dtypes::float16});
    auto sc = shared_tensor(dtypes::float16, {64, 64});
    copy(acc, sc);
    copy(sc, gy.region({0, 0}, {64, 64}), {.disable_tma = true, .eviction_policy = "evict_first"});
    auto sd = shared_tensor(dtypes::float16, {16, 64});
    async_copy(gx.region({64, 0}, {16, 64}), sd);
    copy_async_wait_all();
    copy(sd, gy.region({64, 0}, {16, 64}), {.disable_tma = true});
    copy(gx.at({1, 2}), gy.at({100, 100}));
    copy(gx.region({0, 64}, {16, 64}), sd);  // TMA load on its copy barrier
    copy(sd, gy.region({16, 64}, {16, 64}));  // TMA store
  }
};
}  // namespace

TEST(CudaEmitter, CopyPathsGolden) {
  KernelSource src = emit(specialize(trace(CopyPaths{}), {{0, 16}, {1, 16}, {2, 16}}));
  EXPECT_TRUE(matches_golden("cuda_copy_paths", src.source, ".cu"));
  for (const char* piece : {"tilus::load_vec_hint<16>", "tilus::cp_async_hint<16>", "tilus::cp_async_commit();",
                            "tilus::ldmatrix<4, false>", "tilus::ldmatrix<4, true>", "tilus::stmatrix<",
                            "tilus::store_vec_hint<16>", "tilus::cp_async<16>", "tilus::cp_async_wait_all();",
                            "tilus::tma_load<2>", "tilus::tma_store<2>", "tilus::mbarrier_wait<false, false>",
                            "tilus::fence_proxy_async_shared();", "const __grid_constant__ tilus::TensorMap"})
    EXPECT_NE(src.source.find(piece), std::string::npos) << piece;
  // Without stmatrix (sm_80) the fragments are stored with plain vector stores.
  KernelSource src80 = emit(specialize(trace(CopyPaths{}), {{0, 16}, {1, 16}, {2, 16}}), "sm_80");
  EXPECT_EQ(src80.source.find("tilus::stmatrix<"), std::string::npos);
  EXPECT_EQ(src80.source.find("tilus::tma_"), std::string::npos);
  EXPECT_NE(src80.source.find("tilus::ldmatrix<4, false>"), std::string::npos);
}

TEST(CudaEmitter, MmaDotUsesTensorCores) {
  KernelSource src = emit(trace(examples::MatmulNaive{}));
  EXPECT_NE(src.source.find("tilus::mma_m16n8k16_f32<__half>"), std::string::npos);
  // 64x64 tile on 4 warps (2x2 of 32x32): 2x4 MMAs per k-step of 16, one k-step per tile.
  size_t count = 0;
  for (size_t p = src.source.find("mma_m16n8k16"); p != std::string::npos; p = src.source.find("mma_m16n8k16", p + 1)) ++count;
  EXPECT_EQ(count, 8u);
}

// mma operands loaded from shared memory use ldmatrix: x4 for a, x4.trans for the row-major b
// (on sm_80: on sm_90a the dot becomes wgmma, below).
TEST(CudaEmitter, LdmatrixFeedsTheTensorCores) {
  std::string src = emit(trace(examples::MatmulMma{}), "sm_80").source;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = src.find(what); p != std::string::npos; p = src.find(what, p + 1)) ++n;
    return n;
  };
  // 8 warps on 128x256, each a 64x64 tile of c per 32-deep k step: 64 slots of a (8 x4
  // groups) and 64 of b (8 x4.trans groups) per thread.
  EXPECT_EQ(count("tilus::ldmatrix<4, false>"), 8u) << src;
  EXPECT_EQ(count("tilus::ldmatrix<4, true>"), 8u) << src;
  std::string simt = emit(trace(examples::MatmulShared{}), "sm_80").source;
  EXPECT_NE(simt.find("mma_m16n8k16"), std::string::npos);
  EXPECT_NE(simt.find("tilus::ldmatrix<"), std::string::npos);
}

TEST(CudaEmitter, VectorizesWhenSpecialized) {
  // Without facts about n and the pointers, accesses are scalar and predicated per element.
  KernelSource plain = emit(trace(examples::VectorAdd{}));
  EXPECT_EQ(plain.source.find("load_vec"), std::string::npos);
  // With n % 16 == 0 and 16-byte aligned pointers: 16-byte vectors.
  KernelSource fast = emit(specialize(trace(examples::VectorAdd{}), {{0, 16}, {1, 16}, {2, 16}, {3, 16}}));
  EXPECT_NE(fast.source.find("tilus::load_vec<16>"), std::string::npos) << fast.source;
  EXPECT_NE(fast.source.find("tilus::store_vec<16>"), std::string::npos) << fast.source;
  // Misaligned pointers (alignment unknown) keep scalar accesses even when n is aligned.
  KernelSource half = emit(specialize(trace(examples::VectorAdd{}), {{0, 16}}));
  EXPECT_EQ(half.source.find("load_vec"), std::string::npos);
}

TEST(CudaEmitter, SharedMemoryAndMetadata) {
  KernelSource src = emit(trace(examples::MatmulMma{}));
  EXPECT_EQ(src.block_threads, 256);
  EXPECT_EQ(src.params.size(), 6u);
  EXPECT_EQ(src.params[3].dtype, dtypes::float16.pointer_to());
  // 3 stages of 128x32 and 32x256 f16 tiles (above 48 KB: the launch opts in).
  EXPECT_EQ(src.shared_memory_bytes, 3 * (128 * 32 + 32 * 256) * 2);
  EXPECT_EQ(src.grid.size(), 1u);  // a grouped 1-D tile order
}

namespace {
int window_line = 0;  // the line of SharedWindows' run-time window

// s[i0:i0 + 16] of a 32-element tile (a run-time offset: checked under debug_bounds) and
// st[k % 2] of a [2, 16] tile in a loop (an offset the facts prove in range: never checked).
struct SharedWindows : Script {
  static constexpr const char* param_names = "n, i0, x, y";
  void operator()(Int32 n, Int32 i0, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto gx = global_view(x, {n});
    auto gy = global_view(y, {n});
    auto s = shared_tensor(dtypes::float32, {32});
    copy(gx.region({0}, {16}), s.region({i0}, {16})); window_line = __LINE__;
    auto st = shared_tensor(dtypes::float32, {2, 16});
    for (Expr k : range(4)) {
      copy(s.region({0}, {16}), st[k % 2]);
      copy(st[k % 2], gy.region({k * 16}, {16}));
    }
  }
};
}  // namespace

TEST(CudaEmitter, DebugBoundsChecksRunTimeSharedOffsets) {
  Program p = trace(SharedWindows{});
  PipelineOptions opts;
  opts.target = Target::from_arch("sm_90a");
  Kernel k = run_pipeline(p, opts).kernels[0];
  std::string plain = emit_cuda(k, opts.target).source;
  EXPECT_EQ(plain.find("__trap()"), std::string::npos) << plain;  // off by default
  std::string checked = emit_cuda(k, opts.target, {.debug_bounds = true}).source;
  // One check: the window at i0 (the loop's k % 2 is proven in range); it names the
  // instruction, its line, the tensor and the dim, and prints the offending index.
  size_t at = checked.find("__trap()");
  ASSERT_NE(at, std::string::npos) << checked;
  EXPECT_EQ(checked.find("__trap()", at + 1), std::string::npos) << checked;
  EXPECT_NE(checked.find("tilus: " + std::string(__FILE__) + ":" + std::to_string(window_line) +
                         ": copy: out-of-bounds access of shared float32[32] at a run-time offset: dim 0 takes "
                         "[%lld, %lld), outside the tensor's [0, 32)"),
            std::string::npos)
      << checked;
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC";
  CompiledKernel c;
  ASSERT_NO_THROW(c = compile_program(p, "sm_90a", nullptr, {.debug_bounds = true}));
  EXPECT_EQ(c.source.source, checked);
}

// Every example compiles with NVRTC for Ampere and Hopper.
TEST(Nvrtc, EveryExampleCompiles) {
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC";
  std::vector<std::pair<const char*, Program>> programs = {
      {"vector_add", trace(examples::VectorAdd{})},     {"matmul_naive", trace(examples::MatmulNaive{})},
      {"matmul_shared", trace(examples::MatmulShared{})}, {"softmax", trace(examples::Softmax{})},
      {"matmul_mma", trace(examples::MatmulMma{})},     {"elementwise", trace(Elementwise{})},
      {"rowsum", trace(RowSum{})},                      {"async_copy", trace(AsyncCopy{})},
      {"shapes", trace(tests::Shapes{})},               {"matmul_pipelined", trace(examples::MatmulPipelined{})},
      {"matmul_copy", trace(examples::MatmulCopy{})},    {"matmul_auto", trace(examples::MatmulAuto{})},
      {"matmul_auto_aligned", specialize(trace(examples::MatmulAuto{}), {{0, 16}, {1, 16}, {2, 16}, {3, 16}, {4, 16}})},
      {"copy_paths", specialize(trace(CopyPaths{}), {{0, 16}, {1, 16}, {2, 16}})},
  };
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (auto& [name, p] : programs) {
      SCOPED_TRACE(std::string(name) + " " + arch);
      CompiledKernel k;
      ASSERT_NO_THROW(k = compile_program(p, arch, nullptr));
      ASSERT_GE(k.cubin.size(), 4u);
      EXPECT_EQ(std::string(k.cubin.data() + 1, 3), "ELF");
    }
  }
}

#include "../../examples/cpp/hopper_matmul.h"

// The wgmma example compiles for sm_90a (the only target with wgmma), specialized as a launch
// with 16-aligned pointers and sizes would be: two wgmma per step (the accumulator's column
// halves), multicast loads, TMA stores, and ptxas keeps the wgmma in flight (a function call,
// such as a printf of a run-time check, would serialize them).
TEST(Nvrtc, HopperMatmulCompilesForSm90a) {
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC";
  Program p = specialize(trace(examples::HopperMatmul{}), {{0, 16}, {1, 16}, {2, 16}});
  CompiledKernel k;
  ASSERT_NO_THROW(k = compile_program(p, "sm_90a", nullptr));
  const std::string& src = k.source.source;
  EXPECT_NE(src.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"), std::string::npos);
  EXPECT_NE(src.find("tilus::wgmma_wait_group<1>();"), std::string::npos);
  EXPECT_NE(src.find("tilus::tma_load_multicast<2>"), std::string::npos);
  EXPECT_NE(src.find("tilus::tma_store<2>"), std::string::npos);
  EXPECT_NE(src.find("tilus::stmatrix<4, false>"), std::string::npos);  // the epilogue's [bm, boxes, box] store
  EXPECT_EQ(src.find("printf"), std::string::npos);
  if (k.resources.known()) {
    EXPECT_EQ(k.resources.wgmma_serialized, "");
  }
  EXPECT_THROW(compile_program(p, "sm_80", nullptr), CompileError);
}

// (Included here, below the kernels above, whose line numbers the golden files record.)
#include "builtins_scripts.h"

// The thread-level builtins of seed 004: their CUDA text, and NVRTC compiles them for sm_90a
// (setmaxnreg, clusters) and, where they exist there, for sm_80.
TEST(CudaEmitter, ThreadBuiltinsGolden) {
  tests::Barriers barriers;
  barriers.registers = true;
  std::string text = emit(trace(tests::ThreadIndices{})).source + emit(trace(tests::Shuffles{})).source +
                     emit(specialize(trace(tests::VectorCopy(256)), {{3, 16}, {4, 16}})).source +
                     emit(trace(barriers)).source + emit(trace(tests::ClusterIds{})).source;
  EXPECT_TRUE(matches_golden("cuda_builtins", text, ".cu"));
}

TEST(CudaEmitter, ThreadBuiltinsNeedTheirTargets) {
  tests::Barriers barriers;
  barriers.registers = true;
  try {
    emit(trace(barriers), "sm_80");
    FAIL() << "setmaxnreg compiled for sm_80";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("dec_max_nreg: setmaxnreg needs an architecture-specific sm_90a"), std::string::npos)
        << e.message();
  }
  // Without a known alignment a 128-bit access cannot be proven aligned.
  try {
    emit(trace(tests::VectorCopy(128)));
    FAIL() << "an ldg128 of unknown alignment compiled";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("ldg128: the 128-bit access needs a 16-byte aligned address, but only 1 byte can be "
                               "proven for global float32[n]"),
              std::string::npos)
        << e.message();
  }
  // A user's named barrier ids are not given to the thread groups' barriers.
  std::string src = emit(trace(barriers)).source;
  EXPECT_NE(src.find("tilus::named_barrier(2, 128);"), std::string::npos) << src;
  EXPECT_NE(src.find("__syncwarp(0xffffffffu);"), std::string::npos) << src;
}

TEST(Nvrtc, ThreadBuiltinsCompile) {
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC";
  tests::Barriers barriers;
  barriers.registers = true;
  std::vector<std::pair<std::string, Program>> programs = {
      {"thread_indices", trace(tests::ThreadIndices{})},
      {"shuffles", trace(tests::Shuffles{})},
      {"barriers", trace(barriers)},
      {"cluster_ids", trace(tests::ClusterIds{})},
      {"shuffle_dtypes", trace(tests::ShuffleDtypes{})},
      {"grid_exchange", trace(tests::GridExchange{})},
  };
  for (int64_t bits : {32, 64, 128, 256})
    programs.push_back({"vector_copy" + std::to_string(bits), specialize(trace(tests::VectorCopy(bits)), {{3, 16}, {4, 16}})});
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (auto& [name, p] : programs) {
      if (std::string(arch) == "sm_80" && (name == "barriers" || name == "cluster_ids")) continue;
      SCOPED_TRACE(name + " " + arch);
      CompiledKernel k;
      ASSERT_NO_THROW(k = compile_program(p, arch, nullptr));
      EXPECT_EQ(std::string(k.cubin.data() + 1, 3), "ELF");
    }
  }
  // Without setmaxnreg the barriers compile for sm_80 too (cluster.sync is the block's barrier there).
  ASSERT_NO_THROW(compile_program(trace(tests::Barriers{}), "sm_80", nullptr));
}

// A shuffle must leave the replicas of an element equal: a [16] tile over 128 threads holds each
// element in 32 threads of different lanes, which shfl_down by 1 would make differ.
struct ReplicatedShuffle : Script {
  static constexpr const char* param_names = "offset, y";
  int mode = 0;  // 0: shfl_down by 1, 1: shfl_xor by a run-time offset, 2: shfl_xor by 1
  void operator()(Int32 offset, Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto v = register_tensor(dtypes::float32, {16}, [](const std::vector<Var>& i) {
      return tilus::cast(Expr(i[0]), dtypes::float32);
    });
    RegisterTensor r = mode == 0 ? shfl_down(v, 1) : mode == 1 ? shfl_xor(v, offset) : shfl_xor(v, 1);
    store_global(global_view(y, {16}), r, {.offsets = {0}});
  }
};

TEST(CudaEmitter, ShufflesKeepReplicasEqual) {
  for (int mode : {0, 1}) {
    ReplicatedShuffle s;
    s.mode = mode;
    try {
      emit(trace(s));
      FAIL() << "a shuffle that splits replicas compiled";
    } catch (const CompileError& e) {
      EXPECT_NE(e.message().find(std::string(mode == 1 ? "shfl_xor" : "shfl_down") + ": value register float32[16] "
                                 "has layout"),
                std::string::npos)
          << e.message();
      EXPECT_NE(e.message().find("in several threads that would read different elements"), std::string::npos)
          << e.message();
      EXPECT_EQ(mode == 1, e.message().find("only known at run time") != std::string::npos) << e.message();
    }
  }
  // The same tile shuffled by xor 1 keeps its replicas equal: each reads the same element.
  ReplicatedShuffle ok;
  ok.mode = 2;
  EXPECT_NO_THROW(emit(trace(ok)));
}

// A thread group's own barrier takes an id the kernel does not name itself.
struct UserAndGroupBarriers : Script {
  static constexpr const char* param_names = "y";
  void operator()(Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 4;
    warp_group(0, 2, [&] { sync(); });
    sync_threads(1);
    warp_group(2, 2, [&] { sync_threads(3); });
  }
};

TEST(CudaEmitter, NamedBarrierIdsOfTheKernelAreKeptFromGroups) {
  std::string src = emit(trace(UserAndGroupBarriers{})).source;
  EXPECT_NE(src.find("tilus::named_barrier(2, 64);"), std::string::npos) << src;  // the group's: not 1
  EXPECT_NE(src.find("tilus::named_barrier(1, 128);"), std::string::npos) << src;
  EXPECT_NE(src.find("tilus::named_barrier(3, 64);"), std::string::npos) << src;
}

// Split-K over a global tensor of semaphores (NVIDIA Tilus's matmul_v5 pattern): block z adds its
// partial tile to what blocks 0..z-1 stored, in order of z.
struct SemaphoreChain : Script {
  static constexpr const char* param_names = "m, n, c";
  void operator()(Int32 m, Int32 n, Ptr<f32> c) {
    attrs.blocks = {cdiv(m, 16), cdiv(n, 16), 3};
    attrs.warps = 4;
    auto gc = global_view(c, {m, n});
    auto semaphores = global_tensor(dtypes::int32, {cdiv(m, 16), cdiv(n, 16)}, true);
    Expr semaphore = item_ptr(semaphores, {blockIdx.x, blockIdx.y});
    auto part = register_tensor(dtypes::float32, {16, 16}, Expr(1.0f));
    if_(blockIdx.z > 0, [&] {
      lock_semaphore(semaphore, blockIdx.z);
      auto before = load_global(gc, {.offsets = {blockIdx.x * 16, blockIdx.y * 16}, .shape = {16, 16}});
      part = part + before;
    });
    store_global(gc, part, {.offsets = {blockIdx.x * 16, blockIdx.y * 16}});
    release_semaphore(semaphore, (blockIdx.z + 1) % 3);
  }
};

TEST(CudaEmitter, GlobalTensorsAndSemaphores) {
  Program traced = trace(SemaphoreChain{});
  std::string ir = print(traced);
  EXPECT_NE(ir.find("global_tensor global_tensor_0: int32["), std::string::npos) << ir;
  EXPECT_NE(ir.find("requires_clean"), std::string::npos) << ir;
  EXPECT_NE(ir.find("lock_semaphore(semaphore="), std::string::npos) << ir;
  EXPECT_NE(ir.find("release_semaphore(semaphore="), std::string::npos) << ir;
  KernelSource src = emit(traced);
  EXPECT_TRUE(matches_golden("cuda_semaphores", src.source, ".cu"));
  // The global tensor is a pointer parameter after the kernel's own; the caller does not pass it.
  ASSERT_EQ(src.params.size(), 3u);
  ASSERT_EQ(src.global_tensors.size(), 1u);
  EXPECT_TRUE(src.global_tensors[0].requires_clean);
  EXPECT_NE(src.source.find("float* __restrict__ c, int32_t* __restrict__ global_tensor_0)"), std::string::npos)
      << src.source;
  std::vector<KernelParam> all = launch_params(src);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_TRUE(all[3].dtype.is_pointer());
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC";
  for (const char* arch : {"sm_80", "sm_90a"}) {
    SCOPED_TRACE(arch);
    CompiledKernel k;
    ASSERT_NO_THROW(k = compile_program(traced, arch, nullptr));
    EXPECT_EQ(std::string(k.cubin.data() + 1, 3), "ELF");
  }
}

struct PerBlockGlobalTensor : Script {
  static constexpr const char* param_names = "n";
  void operator()(Int32 n) {
    attrs.blocks = {n};
    attrs.warps = 1;
    global_tensor(dtypes::int32, {blockIdx.x + 1}, false);
  }
};

TEST(CudaEmitter, GlobalTensorShapesUseOnlyParameters) {
  try {
    trace(PerBlockGlobalTensor{});
    FAIL() << "a global tensor sized per block traced";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("global_tensor(dtype=int32, shape=[blockIdx.x + 1]): the runtime allocates it before "
                               "the launch, so its shape may use only the kernel's parameters"),
              std::string::npos)
        << e.message();
  }
}

// return_(): the threads that reach it leave the kernel (NVIDIA Tilus's `return`).
struct EarlyExit : Script {
  static constexpr const char* param_names = "n, y";
  void operator()(Int32 n, Ptr<f32> y) {
    attrs.blocks = {cdiv(n, 32)};
    attrs.warps = 1;
    auto gy = global_view(y, {n});
    if_(blockIdx.x * 32 + 32 > n, [&] { return_(); });
    store_global(gy, register_tensor(dtypes::float32, {32}, Expr(1.0f)), {.offsets = {blockIdx.x * 32}});
  }
};

TEST(CudaEmitter, ReturnLeavesTheKernel) {
  Program traced = trace(EarlyExit{});
  std::string ir = print(traced);
  EXPECT_NE(ir.find("if blockIdx.x * 32 + 32 > n {\n    return"), std::string::npos) << ir;
  std::string src = emit(traced).source;
  EXPECT_NE(src.find("return;"), std::string::npos) << src;
}
