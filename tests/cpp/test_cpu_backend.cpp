// What only the CPU backend does: checked mode, host semantics that must not crash (integer
// division by zero, over-wide shifts), grids of every rank, printf, argument checks, errors
// for what it cannot run, and target selection. The instruction-by-instruction tests are
// test_cpu (test_gpu.cpp built for the CPU).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>

#include "message_of.h"
#include "tilus/passes/pipeline.h"
#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

#define REQUIRE_CPU() \
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason()

template <class K>
JitKernel<K> cpu_jit(K script, bool checked = true) {
  JitOptions o;
  o.backend = Backend::Cpu;
  o.cpu.checked = checked;
  return JitKernel<K>(std::move(script), o);
}

int line_of(const char* needle) {
  // The line of this file that contains `needle` (for asserting reported locations). Opened
  // through the source dir: __FILE__ may be relative to the build dir (ccache's CCACHE_BASEDIR).
  FILE* f = std::fopen(TILUS_SOURCE_DIR "/tests/cpp/test_cpu_backend.cpp", "r");
  if (!f) return -1;
  char buf[512];
  int line = 0, found = -1;
  while (std::fgets(buf, sizeof buf, f)) {
    ++line;
    if (std::string(buf).find(needle) != std::string::npos && std::string(buf).find("line_of") == std::string::npos) {
      found = line;
      break;
    }
  }
  std::fclose(f);
  return found;
}

// Copies rows [row, row + 16) of x[m, 32] through shared memory without bounds checks: rows
// past m are an unmasked out-of-bounds read.
struct UncheckedRows : Script {
  static constexpr const char* param_names = "m, x, y, row";
  void operator()(Int32 m, Ptr<f32> x, Ptr<f32> y, Int32 row) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto gx = global_view(x, {m, 32});
    auto gy = global_view(y, {16, 32});
    auto s = shared_tensor(dtypes::float32, {16, 32});
    copy_async(gx, s, {.offsets = {row, 0}, .check_bounds = false});  // UNCHECKED-COPY
    copy_async_wait_all();
    store_global(gy, load_shared(s), {.offsets = {0, 0}});
  }
};

// y = x over n elements with a view whose shape (n) the caller may overstate.
struct Copy1D : Script {
  static constexpr const char* param_names = "n, x, y";
  void operator()(Int32 n, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(n, 64)};
    attrs.warps = 2;
    auto gx = global_view(x, {n});
    auto gy = global_view(y, {n});
    auto v = load_global(gx, {.offsets = {blockIdx.x * 64}, .shape = {64}});  // COPY1D-LOAD
    store_global(gy, v, {.offsets = {blockIdx.x * 64}});
  }
};

// The same, each block viewing the elements up to the end of its own 64: the views' shapes
// depend on a block index, so the launch cannot size-check them (their contract has no
// extent) and checked mode does.
struct BlockSlices : Script {
  static constexpr const char* param_names = "n, x, y";
  void operator()(Int32 n, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(n, 64)};
    attrs.warps = 2;
    Expr end = blockIdx.x * 64 + 64;
    auto gx = global_view(x, {end});
    auto gy = global_view(y, {end});
    auto v = load_global(gx, {.offsets = {blockIdx.x * 64}, .shape = {64}});  // SLICE-LOAD
    store_global(gy, v, {.offsets = {blockIdx.x * 64}});
  }
};

}  // namespace

TEST(CpuBackend, CheckedModeReportsUnmaskedOutOfBoundsReads) {
  REQUIRE_CPU();
  // 20 rows of data in a buffer of 40 rows: reading rows 10..25 of a tensor of 20 rows stays in
  // the allocation (so the unchecked run is well defined) but leaves the tensor.
  int64_t m = 20;
  DeviceBuffer x(dtypes::float32, 40 * 32, Backend::Cpu), y(dtypes::float32, 16 * 32, Backend::Cpu);
  std::vector<double> hx(40 * 32);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = double(i);
  x.upload(hx);
  // In bounds: both modes agree with the data.
  cpu_jit(UncheckedRows{})({m, x.arg(), y.arg(), 2});
  auto got = y.download();
  for (int64_t i = 0; i < 16 * 32; ++i) ASSERT_EQ(got[i], hx[2 * 32 + i]);
  // Out of bounds, unchecked: the host memory past the tensor is read, silently.
  cpu_jit(UncheckedRows{}, false)({m, x.arg(), y.arg(), 10});
  EXPECT_EQ(y.download()[15 * 32], hx[25 * 32]);
  // Checked: an error naming the instruction, the line, the tensor, the index and the block.
  try {
    cpu_jit(UncheckedRows{})({m, x.arg(), y.arg(), 10});
    FAIL() << "expected CpuCheckError";
  } catch (const CpuCheckError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("test_cpu_backend.cpp:{}", line_of("UNCHECKED-COPY"))), std::string::npos) << msg;
    EXPECT_NE(msg.find("copy_async"), std::string::npos) << msg;
    EXPECT_NE(msg.find("global float32[m, 32]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter 'x'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[20, 0]"), std::string::npos) << msg;  // the first row past the tensor
    EXPECT_NE(msg.find("dim 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("block (0, 0, 0)"), std::string::npos) << msg;
  }
}

TEST(CpuBackend, CheckedModeReportsAccessesPastTheBuffer) {
  REQUIRE_CPU();
  // The kernel is told n = 100 but the buffers hold 90 elements: the launch's argument
  // contract refuses it (in either mode) before anything runs.
  DeviceBuffer x(dtypes::float32, 90, Backend::Cpu), y(dtypes::float32, 200, Backend::Cpu);
  for (bool checked : {true, false}) {
    std::string msg = message_of<ArgumentError>([&] { cpu_jit(Copy1D{}, checked)({100, x.arg(), y.arg()}); });
    EXPECT_NE(msg.find("kernel Copy1D, argument 1 ('x': float32*)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("360 bytes (90 float32 elements)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reaches 100 elements (400 bytes)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("global float32[n]"), std::string::npos) << msg;
  }
  // Views the launch cannot size (they start at a block index): the bounds predicate does not
  // guard their elements, the buffer's extent does, in checked mode.
  try {
    cpu_jit(BlockSlices{})({128, x.arg(), y.arg()});
    FAIL() << "expected CpuCheckError";
  } catch (const CpuCheckError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("test_cpu_backend.cpp:{}", line_of("SLICE-LOAD"))), std::string::npos) << msg;
    EXPECT_NE(msg.find("load_global"), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte offset 360 lies outside the 360 bytes that 'x' points to"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[90]"), std::string::npos) << msg;
  }
  // The same launch with the right size is clean, and so is a masked tail.
  DeviceBuffer x2(dtypes::float32, 100, Backend::Cpu), y2(dtypes::float32, 100, Backend::Cpu);
  std::vector<double> hx(100);
  for (int i = 0; i < 100; ++i) hx[i] = i * 0.5;
  x2.upload(hx);
  cpu_jit(Copy1D{})({100, x2.arg(), y2.arg()});
  EXPECT_EQ(y2.download(), hx);
}

namespace {
// q = a / b, r = a % b, s = a << b, t = a >> b on int32 (C semantics, shifts clamped as PTX).
struct IntOps : Script {
  static constexpr const char* param_names = "n, a, b, q, r, s, t";
  void operator()(Int32 n, Ptr<i32> a, Ptr<i32> b, Ptr<i32> q, Ptr<i32> r, Ptr<i32> s, Ptr<i32> t) {
    attrs.blocks = {cdiv(n, 32)};
    attrs.warps = 1;
    auto o = std::vector<Expr>{blockIdx.x * 32};
    auto va = load_global(global_view(a, {n}), {.offsets = o, .shape = {32}});
    auto vb = load_global(global_view(b, {n}), {.offsets = o, .shape = {32}});
    store_global(global_view(q, {n}), va / vb, {.offsets = o});
    store_global(global_view(r, {n}), va % vb, {.offsets = o});
    store_global(global_view(s, {n}), va << vb, {.offsets = o});
    store_global(global_view(t, {n}), va >> vb, {.offsets = o});
  }
};
}  // namespace

TEST(CpuBackend, IntegerEdgeCasesDoNotTrapTheHost) {
  REQUIRE_CPU();
  std::vector<double> ha = {7, -7, 7, -7, 5, INT32_MIN, 1, -8, 3, 100};
  std::vector<double> hb = {2, 2, -2, -2, 0, -1, 31, 1, 40, 3};
  int64_t n = int64_t(ha.size());
  DeviceBuffer a(dtypes::int32, n, Backend::Cpu), b(dtypes::int32, n, Backend::Cpu), q(dtypes::int32, n, Backend::Cpu),
      r(dtypes::int32, n, Backend::Cpu), s(dtypes::int32, n, Backend::Cpu), t(dtypes::int32, n, Backend::Cpu);
  a.upload(ha);
  b.upload(hb);
  cpu_jit(IntOps{})({n, a.arg(), b.arg(), q.arg(), r.arg(), s.arg(), t.arg()});
  auto gq = q.download(), gr = r.download(), gs = s.download(), gt = t.download();
  for (int64_t i = 0; i < n; ++i) {
    int32_t x = int32_t(ha[i]), y = int32_t(hb[i]);
    SCOPED_TRACE(fmt::format("{} op {}", x, y));
    bool defined = y != 0 && !(x == INT32_MIN && y == -1);
    // Truncating division like C and CUDA; a zero divisor (or INT_MIN / -1) divides by 1.
    EXPECT_EQ(gq[i], defined ? x / y : x);
    EXPECT_EQ(gr[i], defined ? x % y : 0);
    // Shifts past the width give 0, or the sign for an arithmetic right shift.
    bool wide = y < 0 || y >= 32;
    EXPECT_EQ(gs[i], wide ? 0 : double(int32_t(uint32_t(x) << y)));
    EXPECT_EQ(gt[i], wide ? (x < 0 ? -1 : 0) : double(x >> y));
  }
}

namespace {
// out[bz, by, bx] = bx + 10 by + 100 bz, and a printf from one block.
struct Grid3 : Script {
  static constexpr const char* param_names = "out";
  void operator()(Ptr<i32> out) {
    attrs.blocks = {3, 4, 2};
    attrs.warps = 1;
    auto g = global_view(out, {2, 4, 3});
    auto v = register_tensor(dtypes::int32, {1, 1, 1}, blockIdx.x + blockIdx.y * 10 + blockIdx.z * 100);
    store_global(g, v, {.offsets = {blockIdx.z, blockIdx.y, blockIdx.x}});
    if_(blockIdx.x == 2 && blockIdx.y == 3 && blockIdx.z == 1, [&] { printf("block %d %d %d\n", blockIdx.x, blockIdx.y, blockIdx.z); });
  }
};
}  // namespace

TEST(CpuBackend, ThreeDimensionalGridsAndPrintf) {
  REQUIRE_CPU();
  DeviceBuffer out(dtypes::int32, 24, Backend::Cpu);
  out.fill_bytes(0xff);
  testing::internal::CaptureStdout();
  cpu_jit(Grid3{})({out.arg()});
  std::fflush(stdout);
  std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_EQ(printed, "block 2 3 1\n");
  auto got = out.download();
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 3; ++x) EXPECT_EQ(got[(z * 4 + y) * 3 + x], x + 10 * y + 100 * z);
}

TEST(CpuBackend, ArgumentsAreCheckedAndEmptyGridsRunNothing) {
  REQUIRE_CPU();
  DeviceBuffer x(dtypes::float32, 64, Backend::Cpu), y(dtypes::float32, 64, Backend::Cpu);
  DeviceBuffer wrong(dtypes::float16, 64, Backend::Cpu);
  auto k = cpu_jit(Copy1D{});
  EXPECT_THROW(k({64, x.arg()}), ArgumentError);
  EXPECT_THROW(k({64, wrong.arg(), y.arg()}), ArgumentError);
  EXPECT_THROW(k({64, KernelArg::pointer(0), y.arg()}), ArgumentError);
  try {
    k({64, x.arg(), 3});
    FAIL();
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos) << e.what();
  }
  k({0, x.arg(), y.arg()});  // zero blocks
}

namespace {
struct UsesThreadIdx : Script {
  static constexpr const char* param_names = "out";
  void operator()(Ptr<i32> out) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto g = global_view(out, {32});
    if_(Expr(builtin::thread_idx()) < 3, [&] { store_global(g, register_tensor(dtypes::int32, {32}, 1), {.offsets = {0}}); });
  }
};
struct Int4Load : Script {
  static constexpr const char* param_names = "x, y";
  void operator()(Ptr<void> x, Ptr<i32> y) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto v = load_global(global_view(x, {64}, {.dtype = dtypes::int4}), {.offsets = {0}, .shape = {64}});
    store_global(global_view(y, {64}), v.to(dtypes::int32), {.offsets = {0}});
  }
};
}  // namespace

TEST(CpuBackend, WhatItCannotRunIsACompileErrorAtTheUsersLine) {
  REQUIRE_CPU();
  DeviceBuffer out(dtypes::int32, 64, Backend::Cpu);
  try {
    cpu_jit(UsesThreadIdx{})({out.arg()});
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("tiles, not threads"), std::string::npos) << e.what();
  }
}

TEST(CpuBackend, SubByteTensorsLoadPackedAndSignExtend) {
  REQUIRE_CPU();
  DeviceBuffer out(dtypes::int32, 64, Backend::Cpu), x(dtypes::int4, 64, Backend::Cpu);
  std::vector<double> values(64);
  for (int i = 0; i < 64; ++i) values[i] = double(i % 16 - 8);
  x.upload(values);  // packed two per byte, low nibble first
  uint8_t first = 0;
  x.download_bytes(&first, 1);
  EXPECT_EQ(first, 0x98);  // elements 0 and 1: -8 (0x8) and -7 (0x9)
  cpu_jit(Int4Load{})({x.arg(), out.arg()});
  EXPECT_EQ(out.download(), values);
}

TEST(CpuBackend, TargetSelection) {
  setenv("TILUS_TARGET", "cpu", 1);
  EXPECT_EQ(default_backend(), Backend::Cpu);
  setenv("TILUS_TARGET", "gpu", 1);
  EXPECT_EQ(default_backend(), Backend::Gpu);
  unsetenv("TILUS_TARGET");
  EXPECT_EQ(default_backend(), gpu_available() ? Backend::Gpu : Backend::Cpu);
  // Checked mode from the environment.
  if (!cpu_backend_available()) return;
  setenv("TILUS_CPU_CHECK", "1", 1);
  auto k = CpuKernel::compile(trace(Copy1D{}));
  unsetenv("TILUS_CPU_CHECK");
  EXPECT_TRUE(k->checked());
  EXPECT_FALSE(CpuKernel::compile(trace(Copy1D{}))->checked());
  EXPECT_NE(k->llvm_ir().find("define void @tilus_Copy1D_"), std::string::npos);
  // TILUS_DUMP_IR also gets the LLVM IR.
  std::string dir = std::filesystem::temp_directory_path() / fmt::format("tilus-dump-{}", getpid());
  setenv("TILUS_DUMP_IR", dir.c_str(), 1);
  CpuKernel::compile(trace(Copy1D{}));
  unsetenv("TILUS_DUMP_IR");
  PipelineOptions where;
  where.target = Target::cpu();
  where.dump_dir = dir;
  std::ifstream ll(std::filesystem::path(ir_dump_dirs(trace(Copy1D{}), where).at(0)) / "cpu.ll");
  std::string text((std::istreambuf_iterator<char>(ll)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("define void @tilus_Copy1D_"), std::string::npos);
  std::filesystem::remove_all(dir);
}
