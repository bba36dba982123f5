// The CPU backend on large kernels: compile time grows about linearly with the number of tile
// instructions (a generated kernel of 10,000 compiles in seconds, not the 42 minutes a single
// O3-optimized function took), the result stays right when the kernel is split into
// functions, and a running kernel can be interrupted.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <vector>

#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

#define REQUIRE_CPU() \
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason()

constexpr int64_t kRows = 8, kCols = 16;

// The update the generated kernel applies at step i (one tile instruction), on the host.
uint32_t step(uint32_t acc, uint32_t x, int64_t i) {
  switch (i % 4) {
    case 0: return acc * 3u;
    case 1: return acc + x;
    case 2: return acc & 0xffffffu;
    default: return acc ^ uint32_t(i);
  }
}

// About `n` tile instructions: a chain of elementwise updates of a [8, 16] int32 tile (one
// instruction each), a few tiles kept alive across the whole kernel, and a scalar bound at
// the start and used at the end (values that cross any split of the kernel into functions).
// With `in_loop`, the chain is the body of a two-iteration IR loop.
struct Generated : Script {
  static constexpr const char* param_names = "x, y, rounds";
  int64_t n = 1000;
  bool in_loop = false;

  void operator()(Ptr<i32> x, Ptr<i32> y, Int32 rounds) {
    attrs.blocks = {2};
    attrs.warps = 1;
    auto gx = global_view(x, {2 * kRows, kCols});
    auto gy = global_view(y, {2 * kRows, kCols});
    Expr row = let("row", blockIdx.x * kRows);
    auto xs = load_global(gx, {.offsets = {row, 0}, .shape = {kRows, kCols}});
    auto acc = register_tensor(dtypes::int32, {kRows, kCols}, 0);
    auto chain = [&] {
      // Each step a new tensor (emplace rebinds the handle; assigning would record `assign`).
      std::optional<RegisterTensor> cur(acc);
      for (int64_t i = 0; i < n; ++i) {
        switch (i % 4) {
          case 0: cur.emplace(*cur * 3); break;
          case 1: cur.emplace(*cur + xs); break;
          case 2: cur.emplace(*cur & 0xffffff); break;
          default: cur.emplace(*cur ^ int(i)); break;
        }
      }
      acc = *cur;
    };
    if (in_loop) {
      for (Expr r : range(rounds)) {
        (void)r;
        chain();
      }
    } else {
      chain();
    }
    store_global(gy, acc, {.offsets = {row, 0}});
  }
};

std::vector<double> expected(const std::vector<double>& x, int64_t n, int rounds) {
  std::vector<double> y(x.size());
  for (size_t e = 0; e < x.size(); ++e) {
    uint32_t acc = 0, xe = uint32_t(int32_t(x[e]));
    for (int r = 0; r < rounds; ++r)
      for (int64_t i = 0; i < n; ++i) acc = step(acc, xe, i);
    y[e] = double(int32_t(acc));
  }
  return y;
}

double compile_and_check(int64_t n, bool in_loop) {
  Generated g;
  g.n = n;
  g.in_loop = in_loop;
  CpuOptions o;
  o.threads = 2;
  auto kernel = CpuKernel::compile(trace(g), o);
  DeviceBuffer x(dtypes::int32, 2 * kRows * kCols, Backend::Cpu), y(dtypes::int32, 2 * kRows * kCols, Backend::Cpu);
  std::vector<double> xv(size_t(2 * kRows * kCols));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = double(int64_t(i * 2654435761u % 1000) - 500);
  x.upload(xv);
  int rounds = in_loop ? 2 : 1;
  kernel->launch({x.arg(), y.arg(), rounds});
  EXPECT_EQ(y.download(), expected(xv, n, rounds)) << n << " instructions";
  return kernel->compile_ms() / 1000.0;
}

}  // namespace

// Prints compile time against kernel size (a measurement, not a benchmark: nothing but the
// generous bound on the largest is asserted) and checks every result.
TEST(CpuScale, CompileTimeGrowsLinearly) {
  REQUIRE_CPU();
  std::vector<int64_t> sizes = {250, 1000, 2500, 10000};
  if (const char* e = std::getenv("TILUS_SCALE_SIZES"); e && *e) {  // e.g. "500,2000" to measure others
    sizes.clear();
    for (const char* p = e; *p;) {
      char* end = nullptr;
      sizes.push_back(std::strtoll(p, &end, 10));
      p = *end == ',' ? end + 1 : end;
    }
  }
  std::vector<double> seconds;
  for (int64_t n : sizes) {
    seconds.push_back(compile_and_check(n, false));
    std::printf("[ scaling  ] %6lld instructions: %7.2f s (%.2f ms per instruction)\n", (long long)n, seconds.back(),
                1000.0 * seconds.back() / double(n));
  }
  // Seconds on a laptop; the bound leaves room for a loaded 2-core CI machine.
  EXPECT_LT(seconds.back(), 120.0) << "a 10,000-instruction kernel took " << seconds.back() << " s to compile";
}

TEST(CpuScale, LargeLoopBodiesAreSplitToo) {
  REQUIRE_CPU();
  double s = compile_and_check(6000, true);
  std::printf("[ scaling  ] 6000 instructions in a loop body: %.2f s\n", s);
  EXPECT_LT(s, 120.0);
}

namespace {

// Spins while `spin` is nonzero (a while loop whose condition never changes).
struct Spin : Script {
  static constexpr const char* param_names = "spin, y";
  void operator()(Int32 spin, Ptr<i32> y) {
    attrs.blocks = {4};
    attrs.warps = 1;
    auto gy = global_view(y, {32});
    auto t = register_tensor(dtypes::int32, {32}, 1);
    while_(spin != 0, [&] { store_global(gy, t, {.offsets = {0}}); });
  }
};

}  // namespace

TEST(CpuScale, ASpinningKernelCanBeInterrupted) {
  REQUIRE_CPU();
  for (int64_t above : {int64_t(1000), int64_t(0)}) {  // O3, and split into parts
    CpuOptions o;
    o.threads = 2;
    o.fast_compile_above = above;
    o.part_instructions = 1;
    auto kernel = CpuKernel::compile(trace(Spin{}), o);
    DeviceBuffer y(dtypes::int32, 32, Backend::Cpu);
    kernel->launch({0, y.arg()});  // returns at once
    auto start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    int polls = 0;
    EXPECT_THROW(kernel->launch({1, y.arg()}, [&] { return ++polls > 4 || seconds() > 0.2; }), CpuInterrupted);
    EXPECT_LT(seconds(), 10.0) << "the interrupted launch took too long to stop";
    EXPECT_EQ(y.download()[0], 1.0);  // it did run
  }
}
