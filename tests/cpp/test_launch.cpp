// Launching hand-written kernels (the KernelSource level, below the IR): by-value parameters
// of any size (a 128-byte, 64-byte aligned blob like a CUtensorMap, passed as
// `const __grid_constant__`). The argument layout, the packing, the checks and the NVRTC
// compile need no GPU; the launch skips with a message where no GPU is present.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "message_of.h"
#include "temp_dir.h"
#include "tilus/codegen/nvrtc.h"
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

}  // namespace

TEST(ByValueParams, LayoutPlacesEachParameterAtItsAlignment) {
  ArgumentLayout l = argument_layout(blob_kernel("sm_90a").params);
  // tag's slot, p at the next 64, out's slot after p's 128 bytes, q at 4, scale's slot at 8.
  EXPECT_EQ(l.offsets, (std::vector<uint32_t>{0, 64, 192, 200, 216}));
  EXPECT_EQ(l.bytes, 224u);
  EXPECT_EQ(l.alignment, 64u);
  EXPECT_FALSE(l.slots_only);
  // Scalars and pointers only: slot i at 8 * i, as the fast paths' uint64_t arrays were.
  ArgumentLayout slots =
      argument_layout({KernelParam{"n", dtypes::int32}, KernelParam{"out", dtypes::uint32.pointer_to()}});
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
  std::string metas;
  for (auto& e : fs::recursive_directory_iterator(dir.path))
    if (e.path().filename() == "meta.json") {
      std::ifstream in(e.path());
      metas += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
  EXPECT_NE(metas.find("{\"name\": \"p\", \"bytes\": 128, \"alignment\": 64}"), std::string::npos) << metas;
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
