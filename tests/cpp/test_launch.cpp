// Launching: by-value parameters of any size (a 128-byte, 64-byte aligned blob like a
// CUtensorMap, passed as `const __grid_constant__`) and thread-block clusters. Hand-written
// kernels (the KernelSource level, below the IR) test the argument layout, the packing, the
// checks and the launches; a Script in clusters tests the path from attrs.cluster_blocks to
// the launch metadata. All but the launches need no GPU; those skip with a message where no
// GPU (or, for clusters, no sm_90 GPU) is present.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "clustered_vector_add.h"
#include "message_of.h"
#include "temp_dir.h"
#include "tilus/codegen/cuda.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/ir/printer.h"
#include "tilus/passes/pipeline.h"
#include "tilus/runtime/launcher.h"

using namespace tilus;
namespace fs = std::filesystem;

namespace {

#define REQUIRE_NVRTC() \
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC"
#define REQUIRE_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no GPU: " << gpu_unavailable_reason()

// Every parameter lands in `out`, so one read from the wrong place shows up as wrong bytes:
// out[0, 128) = p, out[128, 140) = q, out[140, 144) = tag, out[144, 148) = scale.
constexpr const char* kBlobSource = R"(
struct __align__(64) Blob128 { unsigned char bytes[128]; };
struct __align__(4) Blob12 { unsigned char bytes[12]; };
extern "C" __global__ void copy_blob(int tag, const __grid_constant__ Blob128 p, unsigned char* out,
                                     const __grid_constant__ Blob12 q, float scale) {
  int i = threadIdx.x;
  out[i] = p.bytes[i];
  if (i < 12) out[128 + i] = q.bytes[i];
  if (i == 0) {
    *reinterpret_cast<int*>(out + 140) = tag;
    *reinterpret_cast<float*>(out + 144) = scale;
  }
}
)";

KernelSource blob_kernel(const std::string& arch) {
  KernelSource s;
  s.name = "copy_blob";
  s.source = kBlobSource;
  s.params = {KernelParam{"tag", dtypes::int32}, KernelParam::blob("p", 128, 64),
              KernelParam{"out", dtypes::uint8.pointer_to()}, KernelParam::blob("q", 12, 4),
              KernelParam{"scale", dtypes::float32}};
  s.grid = {Expr(int64_t(1))};
  s.block_threads = 128;
  s.arch = arch;
  return s;
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Each block writes what the hardware says about its cluster: out[8 * block + k] for k =
// cluster_ctarank, cluster_nctarank, clusterid.x/.y, cluster_ctaid.x/.y, blockIdx.x/.y.
constexpr const char* kClusterSource = R"(
extern "C" __global__ void cluster_ids(int n, unsigned* out) {
  unsigned v[6];
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(v[0]));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(v[1]));
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(v[2]));
  asm volatile("mov.u32 %0, %%clusterid.y;" : "=r"(v[3]));
  asm volatile("mov.u32 %0, %%cluster_ctaid.x;" : "=r"(v[4]));
  asm volatile("mov.u32 %0, %%cluster_ctaid.y;" : "=r"(v[5]));
  if (threadIdx.x == 0) {
    unsigned* o = out + 8 * (blockIdx.y * gridDim.x + blockIdx.x);
    for (int k = 0; k < 6; ++k) o[k] = v[k];
    o[6] = blockIdx.x;
    o[7] = blockIdx.y;
  }
}
)";

KernelSource emit(const Program& traced, const std::string& arch) {
  PipelineOptions opts;
  opts.target = Target::from_arch(arch);
  return emit_cuda(run_pipeline(traced, opts).kernels[0], opts.target);
}

// Grid [n, 2].
KernelSource cluster_kernel(const std::string& arch, std::array<int64_t, 3> cluster) {
  Var n("n", dtypes::int32, VarRole::Param);
  KernelSource s;
  s.name = "cluster_ids";
  s.source = kClusterSource;
  s.params = {KernelParam{"n", dtypes::int32}, KernelParam{"out", dtypes::uint32.pointer_to()}};
  s.param_vars = {n, Var("out", dtypes::uint32.pointer_to(), VarRole::Param)};
  s.grid = {n, Expr(int64_t(2))};
  s.cluster = cluster;
  s.block_threads = 32;
  s.arch = arch;
  return s;
}

}  // namespace

TEST(ByValueParams, LayoutPlacesEachParameterAtItsAlignment) {
  ArgumentLayout l = argument_layout(blob_kernel("sm_90a").params);
  // tag's slot, p at the next 64, out's slot after p's 128 bytes, q at 4, scale's slot at 8.
  EXPECT_EQ(l.offsets, (std::vector<uint32_t>{0, 64, 192, 200, 216}));
  EXPECT_EQ(l.bytes, 224u);
  EXPECT_EQ(l.alignment, 64u);
  EXPECT_FALSE(l.slots_only);
  // Scalars and pointers only: slot i at 8 * i, as the fast paths' uint64_t arrays were.
  ArgumentLayout slots = argument_layout(cluster_kernel("sm_90a", {2, 1, 1}).params);
  EXPECT_EQ(slots.offsets, (std::vector<uint32_t>{0, 8}));
  EXPECT_EQ(slots.bytes, 16u);
  EXPECT_EQ(slots.alignment, 8u);
  EXPECT_TRUE(slots.slots_only);
  EXPECT_THROW(argument_layout({KernelParam::blob("odd", 16, 12)}), InternalError);
}

TEST(ByValueParams, PackingWritesEachValueWhereItsPointerPoints) {
  KernelSource s = blob_kernel("sm_90a");
  ArgumentLayout l = argument_layout(s.params);
  std::vector<uint8_t> p = iota_bytes(128, 1), q = iota_bytes(12, 200);
  std::vector<KernelArg> args = {int64_t(-7), KernelArg::by_value(p.data(), p.size()), KernelArg::pointer(0x1234500),
                                 KernelArg::by_value(q.data(), q.size()), 2.5};
  check_arguments(s, args);
  ArgumentBuffer buffer(l);
  pack_arguments(s, args, l, buffer.data());
  void* pointers[5];
  kernel_param_pointers(l, buffer.data(), pointers);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(pointers[i], buffer.data() + l.offsets[i]) << i;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers[1]) % 64, 0u);  // the blob's own alignment
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers[3]) % 4, 0u);
  int32_t tag;
  std::memcpy(&tag, pointers[0], 4);
  EXPECT_EQ(tag, -7);
  EXPECT_EQ(std::memcmp(pointers[1], p.data(), 128), 0);
  uint64_t out;
  std::memcpy(&out, pointers[2], 8);
  EXPECT_EQ(out, 0x1234500u);
  EXPECT_EQ(std::memcmp(pointers[3], q.data(), 12), 0);
  float scale;
  std::memcpy(&scale, pointers[4], 4);
  EXPECT_EQ(scale, 2.5f);
  // A by_value of a struct copies its bytes.
  struct alignas(16) Pair {
    int32_t a, b;
  } pair{3, 4};
  KernelArg from_struct = KernelArg::by_value(pair);
  ASSERT_EQ(from_struct.blob.size(), sizeof(Pair));
  EXPECT_EQ(std::memcmp(from_struct.blob.data(), &pair, sizeof(Pair)), 0);
}

TEST(ByValueParams, LargeOrOveralignedBuffersAreAlignedOnTheHeap) {
  std::vector<KernelParam> many;
  for (int i = 0; i < 20; ++i) many.push_back(KernelParam::blob(fmt::format("d{}", i), 128, 64));
  ArgumentLayout l = argument_layout(many);
  ASSERT_GT(l.bytes, ArgumentBuffer::kInlineBytes);
  ArgumentBuffer big(l);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % 64, 0u);
  std::memset(big.data(), 0xab, l.bytes);  // all of it is ours
  ArgumentLayout wide = argument_layout({KernelParam{"n", dtypes::int32}, KernelParam::blob("w", 256, 256)});
  EXPECT_EQ(wide.offsets, (std::vector<uint32_t>{0, 256}));
  ArgumentBuffer aligned(wide);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned.data()) % 256, 0u);
  std::memset(aligned.data(), 0xcd, wide.bytes);
}

TEST(ByValueParams, ArgumentsOfTheWrongKindOrSizeAreReported) {
  KernelSource s = blob_kernel("sm_90a");
  std::vector<uint8_t> p(128), q(12);
  auto ok = [&] {
    return std::vector<KernelArg>{int64_t(1), KernelArg::by_value(p.data(), p.size()), KernelArg::pointer(0x1000),
                                  KernelArg::by_value(q.data(), q.size()), 1.0};
  };
  EXPECT_NO_THROW(check_arguments(s, ok()));
  auto expect_error = [&](std::vector<KernelArg> args, const std::string& part) {
    std::string msg = message_of<ArgumentError>([&] { check_arguments(s, args); });
    EXPECT_NE(msg.find(part), std::string::npos) << "got: '" << msg << "', want: " << part;
  };
  auto args = ok();
  args[1] = KernelArg::by_value(p.data(), 127);
  expect_error(args, "kernel copy_blob, argument 1 ('p': bytes[128]): expected 128 bytes by value, got 127");
  args = ok();
  args[3] = int64_t(5);
  expect_error(args, "kernel copy_blob, argument 3 ('q': bytes[12]): expected 12 bytes by value, got an integer");
  args = ok();
  args[0] = KernelArg::by_value(p.data(), 4);
  expect_error(args, "argument 0 ('tag': int32): expected an integer, got by-value bytes");
  args = ok();
  args[4] = KernelArg::by_value(p.data(), 4);
  expect_error(args, "argument 4 ('scale': float32): expected a float, got by-value bytes");
  args = ok();
  args[2] = KernelArg::by_value(p.data(), 8);
  expect_error(args, "argument 2 ('out': uint8*): expected a pointer, got by-value bytes");
  expect_error({int64_t(1)}, "takes 5 arguments (tag: int32, p: bytes[128], out: uint8*, q: bytes[12], scale: float32)");
}

TEST(ByValueParams, CompilesForHopperAndTheCacheRecordsIt) {
  REQUIRE_NVRTC();
  TempDir dir("launch");
  DiskCache cache(dir.path.string());
  CompiledKernel blob = compile_kernel(blob_kernel("sm_90a"), &cache);
  ASSERT_GE(blob.cubin.size(), 4u);
  EXPECT_EQ(std::string(blob.cubin.data() + 1, 3), "ELF");
  CompiledKernel cluster = compile_kernel(cluster_kernel("sm_90a", {2, 2, 1}), &cache);
  EXPECT_EQ(std::string(cluster.cubin.data() + 1, 3), "ELF");
  std::string metas;
  for (auto& e : fs::recursive_directory_iterator(dir.path))
    if (e.path().filename() == "meta.json") {
      std::ifstream in(e.path());
      metas += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
  EXPECT_NE(metas.find("{\"name\": \"p\", \"bytes\": 128, \"alignment\": 64}"), std::string::npos) << metas;
  EXPECT_NE(metas.find("\"cluster\": [2, 2, 1]"), std::string::npos) << metas;
  EXPECT_NE(metas.find("\"cluster\": [1, 1, 1]"), std::string::npos) << metas;
  // The cluster shape is a launch attribute: the cubin does not depend on it, so the same
  // source is one cache entry whatever its cluster.
  EXPECT_TRUE(compile_kernel(cluster_kernel("sm_90a", {1, 1, 1}), &cache).from_cache);
}

// The cluster shape is kernel metadata: the printer shows it, the emitter hands it to the
// launcher, and the CUDA text is the same as without clusters.
TEST(Clusters, ShapeIsLaunchMetadata) {
  Program plain = trace(tests::ClusteredVectorAdd(std::vector<int64_t>{}));
  Program pair = trace(tests::ClusteredVectorAdd({2, 1}));
  EXPECT_EQ(plain.kernels[0].cluster, (std::array<int64_t, 3>{1, 1, 1}));
  EXPECT_EQ(pair.kernels[0].cluster, (std::array<int64_t, 3>{2, 1, 1}));
  EXPECT_EQ(print(plain).find("cluster"), std::string::npos) << print(plain);
  EXPECT_NE(print(pair).find("  cluster [2, 1, 1]\n"), std::string::npos) << print(pair);
  KernelSource a = emit(plain, "sm_90a"), b = emit(pair, "sm_90a");
  EXPECT_FALSE(a.clustered());
  EXPECT_TRUE(b.clustered());
  EXPECT_EQ(b.cluster, (std::array<int64_t, 3>{2, 1, 1}));
  EXPECT_EQ(a.source, b.source);
  // Clusters are Hopper's: an older target says so at compile time.
  try {
    emit(pair, "sm_80");
    FAIL() << "clusters compiled for sm_80";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("thread-block clusters (cluster_blocks 2x1x1) need sm_90 or newer, not sm_80"),
              std::string::npos)
        << e.message();
  }
  // A constant grid that the cluster does not divide is rejected before any launch.
  struct OddGrid : Script {
    void operator()(Int32 n) {
      attrs.blocks = {3};
      attrs.warps = 1;
      attrs.cluster_blocks = {2};
    }
  };
  try {
    emit(trace(OddGrid{}), "sm_90a");
    FAIL() << "a grid of 3 blocks compiled in clusters of 2";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("grid [3] has 3 blocks in dimension 0, not a multiple of the cluster's 2"),
              std::string::npos)
        << e.message();
  }
}

TEST(Clusters, GridMustBeAMultipleOfTheCluster) {
  KernelSource s = cluster_kernel("sm_90a", {2, 1, 1});
  auto out = KernelArg::pointer(0x1000);
  EXPECT_EQ(launch_grid(s, {int64_t(4), out}), (std::array<uint32_t, 3>{4, 2, 1}));
  EXPECT_EQ(launch_grid(s, {int64_t(0), out}), (std::array<uint32_t, 3>{0, 2, 1}));  // launches nothing
  std::string msg = message_of<ArgumentError>([&] { launch_grid(s, {int64_t(5), out}); });
  EXPECT_NE(msg.find("kernel cluster_ids: grid dimension 0 (n) is 5, not a multiple of the cluster's 2 "
                     "(cluster_blocks 2x1x1)"),
            std::string::npos)
      << msg;
  s.cluster = {1, 4, 1};
  msg = message_of<ArgumentError>([&] { launch_grid(s, {int64_t(4), out}); });
  EXPECT_NE(msg.find("grid dimension 1 (2) is 2, not a multiple of the cluster's 4"), std::string::npos) << msg;
  // A launch checks it before the driver is involved (so also without a GPU).
  REQUIRE_NVRTC();
  Launcher launcher(compile_kernel(cluster_kernel("sm_90a", {2, 1, 1}), nullptr));
  msg = message_of<ArgumentError>([&] { launcher.launch({int64_t(3), out}); });
  EXPECT_NE(msg.find("kernel cluster_ids: grid dimension 0 (n) is 3"), std::string::npos) << msg;
}

// --- on the GPU ------------------------------------------------------------------------------

TEST(ByValueParams, LaunchPassesTheBytes) {
  REQUIRE_GPU();
  Launcher launcher(compile_kernel(blob_kernel(current_device().arch()), nullptr));
  std::vector<uint8_t> p = iota_bytes(128, 3), q = iota_bytes(12, 240);
  DevicePtr out = device_alloc(148);
  device_memset(out, 0, 148);
  launcher.launch({int64_t(-123456), KernelArg::by_value(p.data(), p.size()), KernelArg::pointer(out),
                   KernelArg::by_value(q.data(), q.size()), 0.75});
  synchronize();
  std::vector<uint8_t> got(148);
  copy_to_host(got.data(), out, got.size());
  device_free(out);
  for (size_t i = 0; i < 128; ++i) EXPECT_EQ(got[i], p[i]) << "p byte " << i;
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(got[128 + i], q[i]) << "q byte " << i;
  int32_t tag;
  float scale;
  std::memcpy(&tag, got.data() + 140, 4);
  std::memcpy(&scale, got.data() + 144, 4);
  EXPECT_EQ(tag, -123456);
  EXPECT_EQ(scale, 0.75f);
}

TEST(Clusters, LaunchGroupsBlocksIntoClusters) {
  REQUIRE_GPU();
  if (current_device().compute_capability < 90)
    GTEST_SKIP() << "thread-block clusters need sm_90, " << current_device().name << " is sm_"
                 << current_device().compute_capability;
  CompiledKernel compiled = compile_kernel(cluster_kernel(current_device().arch(), {1, 1, 1}), nullptr);
  const int64_t n = 4;  // grid 4x2
  DevicePtr out = device_alloc(8 * 8 * sizeof(uint32_t));
  for (std::array<int64_t, 3> c : {std::array<int64_t, 3>{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {2, 2, 1}}) {
    SCOPED_TRACE(fmt::format("cluster {}x{}x{}", c[0], c[1], c[2]));
    CompiledKernel k = compiled;  // the same cubin, launched with another cluster shape
    k.source.cluster = c;
    Launcher launcher(std::move(k));
    device_memset(out, 0xff, 8 * 8 * sizeof(uint32_t));
    launcher.launch({n, KernelArg::pointer(out)});
    synchronize();
    std::vector<uint32_t> got(8 * 8);
    copy_to_host(got.data(), out, got.size() * sizeof(uint32_t));
    for (uint32_t by = 0; by < 2; ++by)
      for (uint32_t bx = 0; bx < n; ++bx) {
        const uint32_t* o = got.data() + 8 * (by * n + bx);
        SCOPED_TRACE(fmt::format("block ({}, {})", bx, by));
        uint32_t cx = uint32_t(c[0]), cy = uint32_t(c[1]);
        EXPECT_EQ(o[6], bx);
        EXPECT_EQ(o[7], by);
        EXPECT_EQ(o[0], bx % cx + (by % cy) * cx);  // cluster_ctarank: x fastest
        EXPECT_EQ(o[1], cx * cy);                   // cluster_nctarank
        EXPECT_EQ(o[2], bx / cx);                   // clusterid
        EXPECT_EQ(o[3], by / cy);
        EXPECT_EQ(o[4], bx % cx);  // cluster_ctaid
        EXPECT_EQ(o[5], by % cy);
      }
  }
  device_free(out);
}
