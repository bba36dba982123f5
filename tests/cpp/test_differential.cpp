// The CPU backend against the GPU path: the same kernels on the same input bytes, outputs
// compared bit for bit (integer, copy and exactly rounded float kernels) or within a
// tolerance (transcendentals, sums in another order, tensor-core products). Needs both a GPU
// and the CPU backend: skips with a message otherwise (the GPU machine has no LLVM headers,
// so this binary is built with LLVM linked statically elsewhere and carried there).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../../examples/cpp/matmul_copy.h"
#include "../../examples/cpp/matmul_mma.h"
#include "../../examples/cpp/softmax.h"
#include "../../examples/cpp/vector_add.h"
#include "shapes_script.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

#define REQUIRE_BOTH()                                                                           \
  if (!gpu_available()) GTEST_SKIP() << "no GPU: " << gpu_unavailable_reason();                 \
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason()

std::mt19937 rng(11);

// One argument of a differential run: a scalar, or a buffer (input data, or an output
// compared with `tol`: negative = bit-exact).
struct Spec {
  int64_t scalar = 0;
  DataType dtype;
  int64_t n = 0;
  std::vector<double> data;
  double tol = -1;
  bool output = false;
  static Spec value(int64_t v) { return Spec{v}; }
  static Spec input(DataType t, std::vector<double> d) { return Spec{0, t, int64_t(d.size()), std::move(d)}; }
  static Spec out(DataType t, int64_t n, double tol = -1) { return Spec{0, t, n, {}, tol, true}; }
};

std::vector<double> randoms(int64_t n, DataType t, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = t.is_float() ? t.decode_float(t.encode_float(d(rng))) : std::floor(d(rng));
  return v;
}

template <class K>
void differential(const K& script, const std::vector<Spec>& specs) {
  std::vector<std::vector<uint8_t>> results[2];
  for (int side = 0; side < 2; ++side) {
    Backend be = side == 0 ? Backend::Gpu : Backend::Cpu;
    JitOptions o;
    o.backend = be;
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<KernelArg> args;
    for (auto& s : specs) {
      if (s.n == 0) {
        args.emplace_back(s.scalar);
        continue;
      }
      bufs.push_back(std::make_unique<DeviceBuffer>(s.dtype, s.n, be));
      if (s.output) bufs.back()->fill_bytes(0x5a);
      else bufs.back()->upload(s.data);
      args.push_back(bufs.back()->arg());
    }
    jit(script, o)(args);
    if (be == Backend::Gpu) synchronize();
    size_t b = 0;
    for (auto& s : specs) {
      if (s.n == 0) continue;
      std::vector<uint8_t> bytes(size_t(bufs[b]->bytes()));
      bufs[b]->download_bytes(bytes.data(), bytes.size());
      results[side].push_back(std::move(bytes));
      ++b;
    }
  }
  size_t b = 0;
  for (auto& s : specs) {
    if (s.n == 0) continue;
    const auto &gpu = results[0][b], &cpu = results[1][b];
    if (s.output) {
      SCOPED_TRACE(fmt::format("buffer {} ({})", b, s.dtype.name()));
      if (s.tol < 0) {
        for (size_t i = 0; i < gpu.size(); ++i) ASSERT_EQ(int(gpu[i]), int(cpu[i])) << "byte " << i;
      } else {
        auto decode = [&](const std::vector<uint8_t>& bytes) {
          std::vector<double> v;
          for (uint64_t c : unpack_bits(bytes, s.dtype.bits(), s.n)) v.push_back(s.dtype.decode_float(c));
          return v;
        };
        auto g = decode(gpu), c = decode(cpu);
        for (int64_t i = 0; i < s.n; ++i) ASSERT_NEAR(g[i], c[i], s.tol * (1 + std::fabs(g[i]))) << "element " << i;
      }
    }
    ++b;
  }
}

// Integer arithmetic and a ragged int8 copy through shared memory (bit-exact).
struct IntKernel : Script {
  static constexpr const char* param_names = "n, a, b, q, m8, y8";
  void operator()(Int32 n, Ptr<i32> a, Ptr<i32> b, Ptr<i32> q, Ptr<i8> m8, Ptr<i8> y8) {
    attrs.blocks = {cdiv(n, 64)};
    attrs.warps = 2;
    auto o = std::vector<Expr>{blockIdx.x * 64};
    auto va = load_global(global_view(a, {n}), {.offsets = o, .shape = {64}});
    auto vb = load_global(global_view(b, {n}), {.offsets = o, .shape = {64}});
    store_global(global_view(q, {n}), (va / vb) * 3 + (va % vb) - (va >> 2) + (vb << 3) + (va & vb) - (va ^ 7), {.offsets = o});
    auto s = shared_tensor(dtypes::int8, {64});
    copy(global_view(m8, {n}).region({blockIdx.x * 64}, {64}), s);
    copy(s, global_view(y8, {n}).region({blockIdx.x * 64}, {64}));
  }
};

}  // namespace

TEST(Differential, IntegerAndCopyKernelsAreBitExact) {
  REQUIRE_BOTH();
  int64_t n = 1000;
  auto a = randoms(n, dtypes::int32, -1e6, 1e6), b = randoms(n, dtypes::int32, 1, 1000);
  for (int64_t i = 0; i < n; i += 3) b[i] = -b[i];
  differential(IntKernel{}, {Spec::value(n), Spec::input(dtypes::int32, a), Spec::input(dtypes::int32, b),
                             Spec::out(dtypes::int32, n), Spec::input(dtypes::int8, randoms(n, dtypes::int8, -100, 100)),
                             Spec::out(dtypes::int8, n)});
}

TEST(Differential, ShapesViewsAndCopies) {
  REQUIRE_BOTH();
  for (int64_t n : {3, 8}) {
    SCOPED_TRACE(n);
    differential(tests::Shapes{}, {Spec::value(n), Spec::input(dtypes::float32, randoms(n * 32, dtypes::float32)),
                                   Spec::out(dtypes::float32, 32 * 8), Spec::out(dtypes::float32, 8, 1e-6),
                                   Spec::out(dtypes::float32, n * 32), Spec::out(dtypes::int32, n * 32),
                                   Spec::out(dtypes::float32, n * 32)});
  }
}

TEST(Differential, Examples) {
  REQUIRE_BOTH();
  int64_t n = 100003;
  differential(examples::VectorAdd{}, {Spec::value(n), Spec::input(dtypes::float32, randoms(n, dtypes::float32)),
                                       Spec::input(dtypes::float32, randoms(n, dtypes::float32)),
                                       Spec::out(dtypes::float32, n)});
  int64_t rows = 37, cols = 1000;
  differential(examples::Softmax{}, {Spec::value(rows), Spec::value(cols),
                                     Spec::input(dtypes::float32, randoms(rows * cols, dtypes::float32, -4, 4)),
                                     Spec::out(dtypes::float32, rows * cols, 1e-5)});
  int64_t m = 301, nn = 517, k = 203;
  auto a = randoms(m * k, dtypes::float16, -1, 1), b = randoms(k * nn, dtypes::float16, -1, 1);
  std::vector<Spec> mm = {Spec::value(m), Spec::value(nn), Spec::value(k), Spec::input(dtypes::float16, a),
                          Spec::input(dtypes::float16, b), Spec::out(dtypes::float16, m * nn, 2e-3)};
  differential(examples::MatmulMma{}, mm);
  differential(examples::MatmulCopy{}, mm);
}

// Without a GPU the kernels above still compile for both backends (NVRTC needs no GPU), so
// CI catches a differential kernel that one backend cannot lower.
TEST(Differential, KernelsCompileForBothBackends) {
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason();
  std::vector<Program> programs = {trace(IntKernel{}), trace(tests::Shapes{}), trace(examples::VectorAdd{}),
                                   trace(examples::Softmax{}), trace(examples::MatmulMma{}),
                                   trace(examples::MatmulCopy{})};
  for (const Program& p : programs) {
    SCOPED_TRACE(p.kernels[0].name);
    auto cpu = CpuKernel::compile(p);
    EXPECT_NE(cpu->llvm_ir().find("define void @tilus_"), std::string::npos);
    if (nvrtc_available()) {
      EXPECT_FALSE(compile_program(p, "sm_90a", nullptr).cubin.empty());
    }
  }
}
