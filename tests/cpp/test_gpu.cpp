// Every instruction against a host reference, on random data with ragged shapes, on one
// backend: built as test_gpu (skips with a message where no GPU is present) and, with
// TILUS_TEST_CPU, as test_cpu (the CPU backend in checked mode, so every access these kernels
// make is also bounds-checked; skips where tilus was built without LLVM).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../../examples/cpp/matmul_auto.h"
#include "builtins_scripts.h"
#include "clustered_vector_add.h"
#include "message_of.h"
#include "shapes_script.h"
#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

#ifdef TILUS_TEST_CPU
#define Backend_ Cpu
constexpr Backend kBackend = Backend::Cpu;
#define REQUIRE_GPU() \
  if (!cpu_backend_available()) GTEST_SKIP() << "no CPU backend: " << cpu_unavailable_reason()
#else
#define Backend_ Gpu
constexpr Backend kBackend = Backend::Gpu;
#define REQUIRE_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no GPU: " << gpu_unavailable_reason()
#endif

// Buffers and kernels on the backend under test.
struct Buffer : DeviceBuffer {
  Buffer(DataType t, int64_t n) : DeviceBuffer(t, n, kBackend) {}
};
template <class K>
JitKernel<K> jit_on(K script) {
  JitOptions o;
  o.backend = kBackend;
  o.cpu.checked = true;
  return JitKernel<K>(std::move(script), o);
}

std::mt19937 rng(7);

std::vector<double> randoms(int64_t n, DataType t, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) {
    double r = d(rng);
    x = t.is_float() ? t.decode_float(t.encode_float(r)) : (t.is_bool() ? double(r > 0) : std::floor(r));
  }
  return v;
}

double round_to(DataType t, double v) { return t.is_float() ? t.decode_float(t.encode_float(v)) : v; }

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << "element " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << "element " << i;
  }
}

// y[i, j] = f(x[i, j]) over a ragged 2-D tile grid.
struct Unary : Script {
  static constexpr const char* param_names = "m, n, x, y";
  std::string op;
  DataType in = dtypes::float32, out = dtypes::float32;
  void operator()(Int32 m, Int32 n, Ptr<void> x, Ptr<void> y) {
    attrs.blocks = {cdiv(m, 16), cdiv(n, 64)};
    attrs.warps = 2;
    auto gx = global_view(x, {m, n}, {.dtype = in});
    auto gy = global_view(y, {m, n}, {.dtype = out});
    auto v = load_global(gx, {.offsets = {blockIdx.x * 16, blockIdx.y * 64}, .shape = {16, 64}});
    RegisterTensor r;
    if (op == "exp") r = exp(v);
    else if (op == "abs") r = abs(v);
    else if (op == "sqrt") r = sqrt(abs(v));
    else if (op == "rsqrt") r = rsqrt(abs(v) + 1.0f);
    else if (op == "log") r = log(abs(v) + 1.0f);
    else if (op == "sin") r = sin(v);
    else if (op == "cos") r = cos(v);
    else if (op == "round") r = round(v);
    else if (op == "square") r = square(v);
    else if (op == "exp2") r = exp2(v);
    else if (op == "clip") r = clip(v, -0.5f, 0.75f);
    else if (op == "neg") r = -v;
    else if (op == "cast") r = v;
    store_global(gy, r.to(out), {.offsets = {blockIdx.x * 16, blockIdx.y * 64}});
  }
};

}  // namespace

TEST(Backend_, UnaryOps) {
  REQUIRE_GPU();
  int64_t m = 37, n = 150;
  auto hx = randoms(m * n, dtypes::float32);
  Buffer x(dtypes::float32, m * n), y(dtypes::float32, m * n);
  x.upload(hx);
  std::vector<std::pair<std::string, std::function<double(double)>>> ops = {
      {"exp", [](double v) { return std::exp(v); }},
      {"abs", [](double v) { return std::fabs(v); }},
      {"sqrt", [](double v) { return std::sqrt(std::fabs(v)); }},
      {"rsqrt", [](double v) { return 1.0 / std::sqrt(std::fabs(v) + 1.0); }},
      {"log", [](double v) { return std::log(std::fabs(v) + 1.0); }},
      {"sin", [](double v) { return std::sin(v); }},
      {"cos", [](double v) { return std::cos(v); }},
      {"round", [](double v) { return std::nearbyint(v); }},
      {"square", [](double v) { return v * v; }},
      {"exp2", [](double v) { return std::exp2(v); }},
      {"clip", [](double v) { return std::min(std::max(v, -0.5), 0.75); }},
      {"neg", [](double v) { return -v; }},
  };
  for (auto& [op, f] : ops) {
    SCOPED_TRACE(op);
    Unary s;
    s.op = op;
    y.fill_bytes(0xff);
    jit_on(s)({m, n, x.arg(), y.arg()});
    std::vector<double> want;
    for (double v : hx) want.push_back(f(v));
    expect_close(y.download(), want, 1e-5, 1e-5);
  }
}

TEST(Backend_, CastsRoundLikeTheHost) {
  REQUIRE_GPU();
  int64_t m = 19, n = 201;
  for (auto [in, out] : std::vector<std::pair<DataType, DataType>>{{dtypes::float32, dtypes::float16},
                                                                   {dtypes::float32, dtypes::bfloat16},
                                                                   {dtypes::float16, dtypes::float32},
                                                                   {dtypes::float32, dtypes::int32},
                                                                   {dtypes::int32, dtypes::float32},
                                                                   {dtypes::float64, dtypes::int8}}) {
    SCOPED_TRACE(in.name() + " -> " + out.name());
    Unary s;
    s.op = "cast";
    s.in = in;
    s.out = out;
    auto hx = randoms(m * n, in, -100, 100);
    Buffer x(in, m * n), y(out, m * n);
    x.upload(hx);
    jit_on(s)({m, n, x.arg(), y.arg()});
    std::vector<double> want;
    for (double v : hx) want.push_back(out.is_float() ? round_to(out, v) : std::trunc(v));
    expect_close(y.download(), want, 0, 0);
  }
}

namespace {
struct Binary : Script {
  static constexpr const char* param_names = "n, a, b, y";
  void operator()(Int32 n, Ptr<f32> a, Ptr<f32> b, Ptr<f32> y) {
    attrs.blocks = {cdiv(n, 128)};
    attrs.warps = 1;
    auto ga = global_view(a, {n}), gb = global_view(b, {n}), gy = global_view(y, {n, 8});
    auto x = load_global(ga, {.offsets = {blockIdx.x * 128}, .shape = {128}});
    auto z = load_global(gb, {.offsets = {blockIdx.x * 128}, .shape = {128}});
    std::vector<RegisterTensor> outs = {x + z, x - z, x * z, x / (abs(z) + 1.0f), maximum(x, z), minimum(x, z),
                                        where(x < z, x, 2.0f), (x >= z).to(dtypes::float32)};
    for (int64_t j = 0; j < 8; ++j)
      store_global(gy, unsqueeze(outs[j], {1}), {.offsets = {blockIdx.x * 128, j}});
  }
};
}  // namespace

TEST(Backend_, BinaryOpsAndBroadcasts) {
  REQUIRE_GPU();
  int64_t n = 1000;
  auto ha = randoms(n, dtypes::float32), hb = randoms(n, dtypes::float32);
  Buffer a(dtypes::float32, n), b(dtypes::float32, n), y(dtypes::float32, n * 8);
  a.upload(ha);
  b.upload(hb);
  jit_on(Binary{})({n, a.arg(), b.arg(), y.arg()});
  std::vector<double> want(n * 8);
  for (int64_t i = 0; i < n; ++i) {
    float x = float(ha[i]), z = float(hb[i]);
    double r[8] = {x + z, x - z, x * z, x / (std::fabs(z) + 1.0f), std::max(x, z), std::min(x, z), x < z ? x : 2.0f,
                   x >= z ? 1.0 : 0.0};
    for (int j = 0; j < 8; ++j) want[i * 8 + j] = float(r[j]);
  }
  expect_close(y.download(), want, 1e-6, 1e-6);
}

namespace {
struct Reduce : Script {
  static constexpr const char* param_names = "m, x, y";
  int64_t rows = 8, cols = 256, warps = 4;
  int dim = 1;
  ReduceOp op = ReduceOp::Sum;
  void operator()(Int32 m, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(m, rows)};
    attrs.warps = warps;
    auto gx = global_view(x, {m, cols});
    auto v = load_global(gx, {.offsets = {blockIdx.x * rows, 0}, .shape = {rows, cols}});
    ReduceOptions o{.dims = std::vector<int>{dim}, .keepdim = true};
    RegisterTensor r = op == ReduceOp::Sum ? sum(v, o) : op == ReduceOp::Max ? max(v, o) : min(v, o);
    if (dim == 1) {
      auto gy = global_view(y, {m, 1});
      store_global(gy, r, {.offsets = {blockIdx.x * rows, 0}});
    } else {
      auto gy = global_view(y, {cdiv(m, rows), cols});
      store_global(gy, r, {.offsets = {blockIdx.x, 0}});
    }
  }
};
}  // namespace

TEST(Backend_, Reductions) {
  REQUIRE_GPU();
  int64_t m = 45;
  for (int dim : {0, 1})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
      for (int64_t warps : {1, 4}) {
        SCOPED_TRACE(fmt::format("dim {} op {} warps {}", dim, to_string(op), warps));
        Reduce s;
        s.dim = dim;
        s.op = op;
        s.warps = warps;
        auto hx = randoms(m * s.cols, dtypes::float32);
        Buffer x(dtypes::float32, m * s.cols);
        x.upload(hx);
        int64_t blocks = (m + s.rows - 1) / s.rows;
        int64_t out_n = dim == 1 ? m : blocks * s.cols;
        Buffer y(dtypes::float32, out_n);
        jit_on(s)({m, x.arg(), y.arg()});
        std::vector<double> want(out_n);
        auto at = [&](int64_t i, int64_t j) { return i < m ? hx[i * s.cols + j] : 0.0; };  // zero-filled rows
        if (dim == 1) {
          for (int64_t i = 0; i < m; ++i) {
            double acc = at(i, 0);
            for (int64_t j = 1; j < s.cols; ++j)
              acc = op == ReduceOp::Sum ? acc + at(i, j) : op == ReduceOp::Max ? std::max(acc, at(i, j)) : std::min(acc, at(i, j));
            want[i] = acc;
          }
        } else {
          for (int64_t b = 0; b < blocks; ++b)
            for (int64_t j = 0; j < s.cols; ++j) {
              double acc = at(b * s.rows, j);
              for (int64_t r = 1; r < s.rows; ++r) {
                double v = at(b * s.rows + r, j);
                acc = op == ReduceOp::Sum ? acc + v : op == ReduceOp::Max ? std::max(acc, v) : std::min(acc, v);
              }
              want[b * s.cols + j] = acc;
            }
        }
        expect_close(y.download(), want, 1e-4, 1e-5);
      }
}

namespace {
// Prefix scans through the C++ Script API (Builder::scan): y = cumsum(x) along the rows of each
// [8, 32] tile, or the exclusive running max down its columns; int32, ragged.
struct Scans : Script {
  static constexpr const char* param_names = "m, n, x, y";
  bool running_max = false;
  void operator()(Int32 m, Int32 n, Ptr<i32> x, Ptr<i32> y) {
    attrs.blocks = {cdiv(m, 8), cdiv(n, 32)};
    attrs.warps = 2;
    auto gx = global_view(x, {m, n});
    auto gy = global_view(y, {m, n});
    std::vector<Expr> at = {blockIdx.x * 8, blockIdx.y * 32};
    auto v = load_global(gx, {.offsets = at, .shape = {8, 32}});
    store_global(gy, running_max ? scan(v, 0, "max", true) : cumsum(v, -1), {.offsets = at});
  }
};
}  // namespace

TEST(Backend_, PrefixScans) {
  REQUIRE_GPU();
  int64_t m = 21, n = 70;
  for (bool running_max : {false, true}) {
    SCOPED_TRACE(running_max ? "exclusive max down columns" : "cumsum along rows");
    auto hx = randoms(m * n, dtypes::int32, -100, 100);
    Buffer x(dtypes::int32, m * n), y(dtypes::int32, m * n);
    x.upload(hx);
    Scans s;
    s.running_max = running_max;
    jit_on(s)({m, n, x.arg(), y.arg()});
    std::vector<double> want(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = running_max ? double(std::numeric_limits<int32_t>::min()) : 0;
        if (running_max)
          for (int64_t r = i / 8 * 8; r < i; ++r) acc = std::max(acc, hx[size_t(r * n + j)]);
        else
          for (int64_t c = j / 32 * 32; c <= j; ++c) acc += hx[size_t(i * n + c)];
        want[size_t(i * n + j)] = acc;
      }
    expect_close(y.download(), want, 0, 0);
  }
}

namespace {
// Scatters through the C++ Script API: the [8, 16] int32 tile of values into an [8, n] dst along
// dim 1 at its indices (out of range: skipped): atomically added into global memory, or stored
// into a shared copy that is written back.
struct Scatters : Script {
  static constexpr const char* param_names = "m, n, idx, x, y";
  bool shared_store = false;
  void operator()(Int32 m, Int32 n, Ptr<i32> idx, Ptr<i32> x, Ptr<i32> y) {
    attrs.blocks = {1};
    attrs.warps = 2;
    auto i = load_global(global_view(idx, {m, 16}), {.offsets = {0, 0}, .shape = {8, 16}});
    auto v = load_global(global_view(x, {m, 16}), {.offsets = {0, 0}, .shape = {8, 16}});
    auto gy = global_view(y, {m, n});
    if (!shared_store) {
      atomic.global_scatter_add(gy, 1, i, v);
      return;
    }
    auto s = shared_tensor(dtypes::int32, {8, 24});
    store_shared(s, load_global(gy, {.offsets = {0, 0}, .shape = {8, 24}}));
    sync();
    store_shared_scatter(s, 1, i, v);
    sync();
    store_global(gy, load_shared(s), {.offsets = {0, 0}});
  }
};
}  // namespace

TEST(Backend_, Scatters) {
  REQUIRE_GPU();
  int64_t m = 7, n = 24;  // one row of the tile past m
  for (bool shared_store : {false, true}) {
    SCOPED_TRACE(shared_store ? "store_shared_scatter" : "atomic.global_scatter_add");
    std::vector<double> hi(size_t(m * 16)), hx(size_t(m * 16)), hy(size_t(m * n));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < 16; ++c) {
        // Distinct columns per row for the store (2c - 3 covers -3 .. 27: some outside [0, n)).
        hi[size_t(r * 16 + c)] = double(shared_store ? (2 * c + r) % 31 - 3 : (c * 7 + r) % 30 - 3);
        hx[size_t(r * 16 + c)] = double(r * 100 + c);
      }
    for (int64_t k = 0; k < m * n; ++k) hy[size_t(k)] = double(k % 5);
    std::vector<double> want = hy;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < 16; ++c) {
        int64_t j = int64_t(hi[size_t(r * 16 + c)]);
        if (j < 0 || j >= n) continue;
        double& w = want[size_t(r * n + j)];
        w = shared_store ? hx[size_t(r * 16 + c)] : w + hx[size_t(r * 16 + c)];
      }
    Buffer idx(dtypes::int32, m * 16), x(dtypes::int32, m * 16), y(dtypes::int32, m * n);
    idx.upload(hi);
    x.upload(hx);
    y.upload(hy);
    Scatters s;
    s.shared_store = shared_store;
    jit_on(s)({m, n, idx.arg(), x.arg(), y.arg()});
    expect_close(y.download(), want, 0, 0);
  }
}

namespace {
// reshape_shared through the C++ Script API: an [8, 64] int32 tile written into shared memory
// and read back as [32, 16] (row-major in both shapes).
struct ReshapeShared : Script {
  static constexpr const char* param_names = "x, y";
  void operator()(Ptr<i32> x, Ptr<i32> y) {
    attrs.blocks = {1};
    attrs.warps = 2;
    auto s = shared_tensor(dtypes::int32, {8, 64});
    store_shared(s, load_global(global_view(x, {8, 64}), {.offsets = {0, 0}, .shape = {8, 64}}));
    auto r = reshape_shared(s, {32, 16});
    store_global(global_view(y, {32, 16}), load_shared(r), {.offsets = {0, 0}});
  }
};
}  // namespace

TEST(Backend_, ReshapeShared) {
  REQUIRE_GPU();
  std::vector<double> hx(8 * 64);  // not from `rng`: the later tests' draws stay as they were
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = double(int64_t(i * 37 % 2001) - 1000);
  Buffer x(dtypes::int32, 8 * 64), y(dtypes::int32, 8 * 64);
  x.upload(hx);
  ReshapeShared k;
  jit_on(k)({x.arg(), y.arg()});
  expect_close(y.download(), hx, 0, 0);  // the same row-major order
}

namespace {
// Every reduction of a 64-bit integer tile: values over the whole range (sums wrap), extremes
// included, so an identity that is not exactly INT64_MAX / UINT64_MAX shows.
struct Reduce64 : Script {
  static constexpr const char* param_names = "x, y";
  int64_t rows = 16, cols = 16, warps = 1;
  int dim = 0;
  DataType dtype = dtypes::int64;
  ReduceOp op = ReduceOp::Min;
  bool take_abs = false;
  void operator()(Ptr<void> x, Ptr<void> y) {
    attrs.blocks = {1};
    attrs.warps = warps;
    auto gx = global_view(x, {rows, cols}, {.dtype = dtype});
    auto v = load_global(gx, {.offsets = {0, 0}, .shape = {rows, cols}});
    if (take_abs) v = abs(v);
    ReduceOptions o{.dims = std::vector<int>{dim}, .keepdim = true};
    RegisterTensor r;
    switch (op) {
      case ReduceOp::Sum: r = sum(v, o); break;
      case ReduceOp::Max: r = max(v, o); break;
      case ReduceOp::Min: r = min(v, o); break;
      case ReduceOp::Any: r = any(v > int_const(0, dtype), o).to(dtype); break;
      case ReduceOp::All: r = all(v > int_const(0, dtype), o).to(dtype); break;
    }
    auto gy = global_view(y, {dim == 0 ? 1 : rows, dim == 0 ? cols : 1}, {.dtype = dtype});
    store_global(gy, r, {.offsets = {0, 0}});
  }
};
}  // namespace

TEST(Backend_, SixtyFourBitIntegerReductions) {
  REQUIRE_GPU();
  std::mt19937_64 gen(11);
  struct Shape {
    int64_t rows, cols, warps;
  };
  for (DataType dt : {dtypes::int64, dtypes::uint64})
    for (Shape sh : {Shape{2, 4, 2}, Shape{16, 16, 1}, Shape{16, 16, 4}, Shape{8, 32, 2}})
      for (int dim : {0, 1})
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Any, ReduceOp::All})
          for (bool take_abs : {false, true}) {
            if (take_abs && dt == dtypes::uint64) continue;
            SCOPED_TRACE(fmt::format("{} [{}, {}] warps {} dim {} {}{}", dt.name(), sh.rows, sh.cols, sh.warps, dim,
                                     to_string(op), take_abs ? " of abs" : ""));
            Reduce64 s;
            s.rows = sh.rows, s.cols = sh.cols, s.warps = sh.warps, s.dim = dim, s.dtype = dt, s.op = op;
            s.take_abs = take_abs;
            int64_t n = sh.rows * sh.cols;
            std::vector<uint64_t> hx(n);
            for (auto& v : hx) v = gen();
            // The extremes and their neighbours, where a rounded identity would win.
            hx[0] = dt == dtypes::int64 ? uint64_t(INT64_MAX) : UINT64_MAX;
            hx[n - 1] = dt == dtypes::int64 ? uint64_t(INT64_MIN) : 0;
            if (n > 2) hx[1] = dt == dtypes::int64 ? uint64_t(INT64_MAX - 1) : UINT64_MAX - 1;
            Buffer x(dt, n);
            x.upload_bytes(hx.data(), n * 8);
            int64_t out_n = dim == 0 ? sh.cols : sh.rows;
            Buffer y(dt, out_n);
            jit_on(s)({x.arg(), y.arg()});
            std::vector<uint64_t> got(out_n);
            y.download_bytes(got.data(), out_n * 8);
            for (int64_t o = 0; o < out_n; ++o) {
              std::vector<uint64_t> xs;
              for (int64_t k = 0; k < (dim == 0 ? sh.rows : sh.cols); ++k) {
                uint64_t v = dim == 0 ? hx[k * sh.cols + o] : hx[o * sh.cols + k];
                if (take_abs && int64_t(v) < 0) v = uint64_t(0) - v;  // abs(INT64_MIN) wraps to itself
                xs.push_back(v);
              }
              auto less = [&](uint64_t a, uint64_t b) { return dt == dtypes::int64 ? int64_t(a) < int64_t(b) : a < b; };
              auto positive = [&](uint64_t a) { return dt == dtypes::int64 ? int64_t(a) > 0 : a > 0; };
              uint64_t want = xs[0];
              for (size_t k = 1; k < xs.size(); ++k) {
                if (op == ReduceOp::Sum) want += xs[k];
                if (op == ReduceOp::Max && less(want, xs[k])) want = xs[k];
                if (op == ReduceOp::Min && less(xs[k], want)) want = xs[k];
              }
              if (op == ReduceOp::Any) want = std::any_of(xs.begin(), xs.end(), positive);
              if (op == ReduceOp::All) want = std::all_of(xs.begin(), xs.end(), positive);
              EXPECT_EQ(got[o], want) << "output " << o;
            }
          }
}

namespace {
struct Dot : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  int64_t bm = 64, bn = 32, bk = 32, warps = 4;
  DataType in = dtypes::float16, acc = dtypes::float32;
  // Stage the tiles through shared memory (ldmatrix feeds the tensor cores), optionally
  // with a plain row-major layout instead of the inferred swizzle.
  bool via_shared = false, row_major_shared = false;
  void operator()(Int32 m, Int32 n, Int32 k, Ptr<void> a, Ptr<void> b, Ptr<void> c) {
    attrs.blocks = {cdiv(m, bm), cdiv(n, bn)};
    attrs.warps = warps;
    auto ga = global_view(a, {m, k}, {.dtype = in}), gb = global_view(b, {k, n}, {.dtype = in});
    auto gc = global_view(c, {m, n}, {.dtype = acc});
    auto r = register_tensor(acc, {bm, bn}, 0.0);
    if (via_shared) {
      auto sa = shared_tensor(in, {bm, bk}), sb = shared_tensor(in, {bk, bn});
      if (row_major_shared) {
        annotate_layout(sa, SharedLayout::row_major({bm, bk}));
        annotate_layout(sb, SharedLayout::row_major({bk, bn}));
      }
      for (Expr k0 : range(0, k, bk)) {
        copy_async(ga, sa, {.offsets = {blockIdx.x * bm, k0}});
        copy_async(gb, sb, {.offsets = {k0, blockIdx.y * bn}});
        copy_async_commit_group();
        copy_async_wait_all();
        sync();
        r = dot(load_shared(sa), load_shared(sb), r);
        sync();
      }
    } else {
      for (Expr k0 : range(0, k, bk)) {
        r = dot(load_global(ga, {.offsets = {blockIdx.x * bm, k0}, .shape = {bm, bk}}),
                load_global(gb, {.offsets = {k0, blockIdx.y * bn}, .shape = {bk, bn}}), r);
      }
    }
    store_global(gc, r, {.offsets = {blockIdx.x * bm, blockIdx.y * bn}});
  }
};
}  // namespace

TEST(Backend_, DotEveryPath) {
  REQUIRE_GPU();
  int64_t m = 77, n = 45, k = 70;
  struct Case {
    DataType in, acc;
    int64_t warps;
    double tol;
  };
  for (Case c : {Case{dtypes::float16, dtypes::float32, 4, 1e-3}, Case{dtypes::bfloat16, dtypes::float32, 4, 1e-2},
                 Case{dtypes::float16, dtypes::float16, 2, 5e-2}, Case{dtypes::float32, dtypes::float32, 4, 1e-4},
                 Case{dtypes::int8, dtypes::int32, 4, 0}, Case{dtypes::float64, dtypes::float64, 1, 1e-9}}) {
    SCOPED_TRACE(c.in.name() + " -> " + c.acc.name());
    Dot s;
    s.in = c.in;
    s.acc = c.acc;
    s.warps = c.warps;
    auto ha = randoms(m * k, c.in, -3, 3), hb = randoms(k * n, c.in, -3, 3);
    Buffer a(c.in, m * k), b(c.in, k * n), out(c.acc, m * n);
    a.upload(ha);
    b.upload(hb);
    jit_on(s)({m, n, k, a.arg(), b.arg(), out.arg()});
    std::vector<double> want(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < k; ++kk) acc += ha[i * k + kk] * hb[kk * n + j];
        want[i * n + j] = round_to(c.acc, acc);
      }
    expect_close(out.download(), want, c.tol, c.tol);
  }
}

// Tensor-core dots fed from shared memory by ldmatrix (x4, x2, .trans) with swizzled and
// plain layouts, on tile shapes from one mma to several warps.
TEST(Backend_, DotFromSharedMemory) {
  REQUIRE_GPU();
  int64_t m = 77, n = 45, k = 70;
  struct Case {
    int64_t bm, bn, bk, warps;
    DataType in;
    bool row_major;
  };
  for (Case c : {Case{16, 8, 16, 1, dtypes::float16, false}, Case{32, 16, 32, 1, dtypes::bfloat16, false},
                 Case{64, 32, 32, 4, dtypes::float16, false}, Case{64, 32, 32, 4, dtypes::float16, true},
                 Case{64, 128, 32, 8, dtypes::float16, false}}) {
    SCOPED_TRACE(fmt::format("{}x{}x{} {} warps {}{}", c.bm, c.bn, c.bk, c.warps, c.in.name(),
                             c.row_major ? " row-major" : ""));
    Dot s;
    s.bm = c.bm, s.bn = c.bn, s.bk = c.bk, s.warps = c.warps, s.in = c.in;
    s.via_shared = true;
    s.row_major_shared = c.row_major;
    auto ha = randoms(m * k, c.in, -3, 3), hb = randoms(k * n, c.in, -3, 3);
    Buffer a(c.in, m * k), b(c.in, k * n), out(dtypes::float32, m * n);
    a.upload(ha);
    b.upload(hb);
    auto kernel = jit_on(s);
    std::vector<KernelArg> args = {m, n, k, a.arg(), b.arg(), out.arg()};
    if (kBackend == Backend::Gpu) {
      ASSERT_NE(kernel.launcher(args).kernel().source.source.find("tilus::ldmatrix<"), std::string::npos);
    }
    kernel(args);
    std::vector<double> want(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < k; ++kk) acc += ha[i * k + kk] * hb[kk * n + j];
        want[i * n + j] = acc;
      }
    expect_close(out.download(), want, 1e-3, 1e-3);
  }
}

// The matmul the compiler pipelines (issue 39: a loop marked num_stages) on ragged sizes: k a
// multiple of 8 gives a TMA ring on sm_90 (rows of 16-byte multiples), an odd k a cp.async
// ring; trip counts below, at and above the stages, and two stages.
TEST(Backend_, PipelinedMatmulMatchesTheReference) {
  REQUIRE_GPU();
  struct Case {
    int64_t m, n, k, stages;
  };
  for (Case c : {Case{301, 517, 200, 4}, Case{150, 70, 203, 4}, Case{64, 128, 64, 3}, Case{130, 260, 520, 2},
                 Case{96, 40, 8, 4}}) {
    SCOPED_TRACE(fmt::format("{}x{}x{} {} stages", c.m, c.n, c.k, c.stages));
    examples::MatmulAuto s;
    s.stages = c.stages;
    auto ha = randoms(c.m * c.k, dtypes::float16, -1, 1), hb = randoms(c.n * c.k, dtypes::float16, -1, 1);
    Buffer a(dtypes::float16, c.m * c.k), b(dtypes::float16, c.n * c.k), out(dtypes::float16, c.m * c.n);
    a.upload(ha);
    b.upload(hb);
    auto kernel = jit_on(s);
    kernel({c.m, c.n, c.k, a.arg(), b.arg(), out.arg()});
    std::vector<double> want(c.m * c.n, 0.0);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < c.k; ++kk) acc += ha[i * c.k + kk] * hb[j * c.k + kk];
        want[i * c.n + j] = round_to(dtypes::float16, acc);
      }
    expect_close(out.download(), want, 2e-2, 1e-2);
  }
}

namespace {
// Global -> shared (cp.async, with evict hints and without bounds checks) -> registers ->
// global, with offsets that start before and end past the tensor.
struct SharedRoundTrip : Script {
  static constexpr const char* param_names = "m, n, x, y, off_m, off_n";
  std::optional<std::string> evict;
  bool transpose_dims = false;
  void operator()(Int32 m, Int32 n, Ptr<f16> x, Ptr<f16> y, Int32 off_m, Int32 off_n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gx = global_view(x, {m, n});
    auto gy = global_view(y, {48, 80});
    if (!transpose_dims) {
      auto s = shared_tensor(dtypes::float16, {48, 80});
      copy_async(gx, s, {.offsets = {off_m, off_n}, .evict = evict});
      copy_async_commit_group();
      copy_async_wait_all();
      sync();
      store_global(gy, load_shared(s), {.offsets = {0, 0}});
    } else {
      // dims maps shared dim 0 to global dim 1: s[j, i] = x[off_m + i, off_n + j].
      auto s = shared_tensor(dtypes::float16, {80, 48});
      copy_async(gx, s, {.offsets = {off_m, off_n}, .dims = {1, 0}, .evict = evict});
      copy_async_commit_group();
      copy_async_wait_all();
      sync();
      store_global(gy, transpose(load_shared(s)), {.offsets = {0, 0}});
    }
  }
};
}  // namespace

TEST(Backend_, CopyAsyncZeroFillsOutOfBounds) {
  REQUIRE_GPU();
  int64_t m = 61, n = 93;
  auto hx = randoms(m * n, dtypes::float16);
  Buffer x(dtypes::float16, m * n), y(dtypes::float16, 48 * 80);
  x.upload(hx);
  for (bool transposed : {false, true})
    for (auto evict : {std::optional<std::string>{}, std::optional<std::string>("evict_first"),
                       std::optional<std::string>("evict_last")})
      for (auto [om, on] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {-5, -3}, {40, 60}, {13, 24}}) {
        SCOPED_TRACE(fmt::format("transposed {} evict {} offsets {} {}", transposed, evict.value_or("none"), om, on));
        SharedRoundTrip s;
        s.evict = evict;
        s.transpose_dims = transposed;
        jit_on(s)({m, n, x.arg(), y.arg(), om, on});
        std::vector<double> want(48 * 80);
        for (int64_t i = 0; i < 48; ++i)
          for (int64_t j = 0; j < 80; ++j) {
            int64_t gi = om + i, gj = on + j;
            want[i * 80 + j] = (gi >= 0 && gi < m && gj >= 0 && gj < n) ? hx[gi * n + gj] : 0.0;
          }
        expect_close(y.download(), want, 0, 0);
      }
}

namespace {
// Thread groups, scalar control flow, register init functions, reshapes and repeats.
struct Misc : Script {
  static constexpr const char* param_names = "n, y";
  void operator()(Int32 n, Ptr<i32> y) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gy = global_view(y, {4, 64});
    auto idx = register_tensor(dtypes::int32, {4, 64}, [](const std::vector<Var>& i) { return i[0] * 64 + i[1]; });
    ScalarVar total = declare("total", dtypes::int32, 0);
    for (Expr i : range(n)) {
      if_(i % 2 == 0, [&] { total = total + i; }).else_([&] { continue_(); });
    }
    auto shifted = idx + total;
    auto flat = reshape(shifted, {256});
    auto back = reshape(flat, {4, 64});
    warp_group(0, 4, [&] { store_global(gy, back, {.offsets = {0, 0}}); });
    sync();  // row 3 is written again below
    single_warp(3, [&] {
      auto row = register_tensor(dtypes::int32, {1, 32}, [](const std::vector<Var>& i) { return i[1] * -1; });
      store_global(gy, repeat(row, {1, 2}), {.offsets = {3, 0}});
    });
  }
};
}  // namespace

TEST(Backend_, ControlFlowGroupsAndReshapes) {
  REQUIRE_GPU();
  Buffer y(dtypes::int32, 256);
  int64_t n = 9;
  jit_on(Misc{})({n, y.arg()});
  int64_t total = 0 + 2 + 4 + 6 + 8;
  std::vector<double> want(256);
  for (int64_t i = 0; i < 256; ++i) want[i] = double(i + total);
  for (int64_t j = 0; j < 64; ++j) want[3 * 64 + j] = -double(j % 32);
  auto got = y.download();
  for (int64_t i = 0; i < 256; ++i) ASSERT_EQ(got[i], want[i]) << i;
}


TEST(Backend_, ShapesViewsAndCopies) {
  REQUIRE_GPU();
  for (int64_t n : {8, 5}) {  // 5: rows 5..7 of the tile are out of bounds
    SCOPED_TRACE(fmt::format("n = {}", n));
    auto hx = randoms(n * 32, dtypes::float32);
    Buffer x(dtypes::float32, n * 32), a(dtypes::float32, 32 * 8), b(dtypes::float32, 8),
        c(dtypes::float32, n * 32), d(dtypes::int32, n * 32), e(dtypes::float32, n * 32);
    x.upload(hx);
    jit_on(tests::Shapes{})({n, x.arg(), a.arg(), b.arg(), c.arg(), d.arg(), e.arg()});
    auto tile = [&](int64_t i, int64_t j) { return i < n ? hx[i * 32 + j] : 0.0; };
    std::vector<double> want_a(32 * 8), want_b(8, 0.0), want_c(n * 32), want_e(n * 32);
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 32; ++j) {
        want_a[j * 8 + i] = tile(i, j);
        want_b[i] = double(float(want_b[i] + tile(i, j)));
      }
    for (int64_t i = 0; i < n * 32; ++i) {
      double v = hx[i] > 0 ? hx[i] : -hx[i] / 2;
      want_c[i] = std::min(std::max(v, -0.25), 1.5);
      want_e[i] = double(float(hx[i]) + 1.0f);
    }
    expect_close(a.download(), want_a, 0, 0);
    expect_close(b.download(), want_b, 1e-5, 1e-5);  // the GPU sums in another order
    expect_close(c.download(), want_c, 0, 0);
    expect_close(e.download(), want_e, 0, 0);
    std::vector<int32_t> bits(n * 32);
    d.download_bytes(bits.data(), bits.size() * 4);
    for (int64_t i = 0; i < n * 32; ++i) {
      float f = float(hx[i]);
      int32_t want;
      std::memcpy(&want, &f, 4);
      ASSERT_EQ(bits[i], want) << i;
    }
  }
}

namespace {
// A double-buffered cp.async loop with its waits but without a single sync(): the barriers
// come from insert_barriers. out[16, 64] = the sum of the n row tiles of x.
struct UnsyncedPipeline : Script {
  static constexpr const char* param_names = "n, x, out";
  void operator()(Int32 n, Ptr<f32> x, Ptr<f32> out) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gx = global_view(x, {n * 16, 64});
    auto t = shared_tensor(dtypes::float32, {2, 16, 64});
    auto acc = register_tensor(dtypes::float32, {64, 16}, 0.0);
    copy_async(gx, t[0], {.offsets = {0, 0}});
    copy_async_commit_group();
    for (Expr i : range(n)) {
      copy_async(gx, t[(i + 1) % 2], {.offsets = {(i + 1) * 16, 0}});
      copy_async_commit_group();
      copy_async_wait_group(1);
      acc = acc + load_shared(t[i % 2]).transpose();  // another thread mapping than the copy's
    }
    copy_async_wait_all();
    store_global(global_view(out, {64, 16}), acc, {.offsets = {0, 0}});
  }
};
}  // namespace

TEST(Backend_, BarriersAreInsertedWhereTheKernelHasNone) {
  REQUIRE_GPU();
  int64_t n = 7;
  auto hx = randoms(n * 16 * 64, dtypes::float32);
  Buffer x(dtypes::float32, n * 16 * 64), out(dtypes::float32, 64 * 16);
  x.upload(hx);
  auto kernel = jit_on(UnsyncedPipeline{});
  std::vector<KernelArg> args = {n, x.arg(), out.arg()};
  if (kBackend == Backend::Gpu) {
    EXPECT_NE(kernel.launcher(args).kernel().source.source.find("__syncthreads()"), std::string::npos);
  }
  kernel(args);
  std::vector<double> want(64 * 16, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t c = 0; c < 64; ++c) want[c * 16 + r] = double(float(want[c * 16 + r] + hx[(i * 16 + r) * 64 + c]));
  expect_close(out.download(), want, 1e-5, 1e-5);
}

namespace {
// One tile copied from x to shared memory / registers / global memory by one of the copy
// family's paths, then to y[tm, tn]; out-of-bounds elements of x read as zero.
struct CopyCase : Script {
  static constexpr const char* param_names = "b, m, n, x, y, ob, om, on";
  std::string path;  // copy_async, async_copy, g2s, g2s_cp_async, g2r, g2g
  DataType dtype = dtypes::float16;
  int64_t tm = 16, tn = 32;
  std::vector<int> dims = {1, 2};  // copy_async: the global dim of each shared dim
  std::optional<int64_t> coalesced_width;
  std::optional<std::string> evict;
  void operator()(Int32 b, Int32 m, Int32 n, Ptr<void> x, Ptr<void> y, Int32 ob, Int32 om, Int32 on) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gy = global_view(y, {tm, tn}, {.dtype = dtype});
    auto out = gy.region({0, 0}, {tm, tn});
    if (path == "copy_async") {
      auto gx = global_view(x, {b, m, n}, {.dtype = dtype});
      auto s = shared_tensor(dtype, {tm, tn});
      copy_async(gx, s, {.offsets = {ob, om, on}, .dims = dims, .evict = evict});
      copy(s, out);
      return;
    }
    auto gx = global_view(x, {m, n}, {.dtype = dtype});
    auto src = gx.region({om, on}, {tm, tn});
    if (path == "g2g") {
      copy(src, out, {.coalesced_width = coalesced_width, .eviction_policy = evict});
    } else if (path == "g2r") {
      auto r = register_tensor(dtype, {tm, tn});
      copy(src, r, {.coalesced_width = coalesced_width, .eviction_policy = evict});
      copy(r, out, {.eviction_policy = evict});
    } else {
      auto s = shared_tensor(dtype, {tm, tn});
      if (path == "async_copy") {
        async_copy(src, s, {.coalesced_width = coalesced_width});
        copy_async_wait_all();
      } else {
        std::map<std::string, std::string> ann;
        if (path == "g2s_cp_async") ann["use_cp_async"] = "true";
        copy(src, s, {.coalesced_width = coalesced_width, .eviction_policy = evict, .annotations = ann});
      }
      copy(s, out);
    }
  }
};
}  // namespace

// Random paths, dtypes of 1, 2, 4 and 8 bytes, tile shapes, offsets before, inside and past
// the tensor, permuted dims and base pointers off 16-byte alignment, against a host copy.
TEST(Backend_, CopyFamilyRandomized) {
  REQUIRE_GPU();
  std::mt19937 r(2026);
  auto pick = [&](auto const& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(r)]; };
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(r); };
  const std::vector<std::string> paths = {"copy_async", "async_copy", "g2s", "g2s_cp_async", "g2r", "g2g"};
  const std::vector<DataType> types = {dtypes::int8, dtypes::float16, dtypes::float32, dtypes::int64};
  const std::vector<std::pair<int64_t, int64_t>> tiles = {{16, 32}, {8, 64}, {32, 16}, {4, 128}, {64, 8}, {1, 64}};
  const std::vector<std::vector<int>> dim_maps = {{1, 2}, {2, 1}, {0, 2}, {2, 0}, {1, 0}};
  int cases = 0;
  for (int iter = 0; iter < 72; ++iter) {
    CopyCase c;
    c.path = paths[iter % paths.size()];
    c.dtype = pick(types);
    std::tie(c.tm, c.tn) = pick(tiles);
    if (c.path == "copy_async") c.dims = pick(dim_maps);
    if (c.path != "copy_async" && uniform(0, 2) == 0) c.coalesced_width = int64_t(1) << uniform(0, 4);
    if (c.path != "async_copy")
      c.evict = pick(std::vector<std::optional<std::string>>{std::nullopt, "evict_normal", "evict_first", "evict_last"});
    int64_t b = uniform(1, 3), m = uniform(1, 90), n = uniform(1, 150);
    int64_t skew = pick(std::vector<int64_t>{0, 0, 1, 3});  // elements before x's first one
    auto off = [&](int64_t extent, int64_t tile) { return uniform(-tile - 2, extent + 2); };
    int64_t ob = uniform(-1, b), om = off(m, c.tm), on = off(n, c.tn);
    if (c.path == "copy_async") ob = uniform(0, b - 1);
    std::string what = fmt::format("{} {} tile {}x{} dims [{}, {}] cw {} evict {} shape {}x{}x{} skew {} offsets {} {} {}",
                                   c.path, c.dtype.name(), c.tm, c.tn, c.dims[0], c.dims[1],
                                   c.coalesced_width.value_or(0), c.evict.value_or("none"), b, m, n, skew, ob, om, on);
    SCOPED_TRACE(what);
    int64_t total = b * m * n;
    Buffer x(c.dtype, total + skew), y(c.dtype, c.tm * c.tn);
    auto hx = randoms(total + skew, c.dtype, -100, 100);
    x.upload(hx);
    y.upload(std::vector<double>(c.tm * c.tn, 77));
    int64_t eb = std::max<int64_t>(1, c.dtype.bits() / 8);
    KernelArg xa = KernelArg::typed_pointer(x.ptr() + skew * eb, c.dtype);
    std::vector<double> got;
    try {  // a fault names its case (the trace above is gone once an exception unwinds)
      jit_on(c)({b, m, n, xa, y.arg(), ob, om, on});
      got = y.download();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
      break;
    }
    std::vector<double> want(c.tm * c.tn);
    for (int64_t i = 0; i < c.tm; ++i)
      for (int64_t j = 0; j < c.tn; ++j) {
        std::vector<int64_t> idx;
        bool in = true;
        if (c.path == "copy_async") {
          idx = {ob, om, on};
          idx[c.dims[0]] += i;
          idx[c.dims[1]] += j;
          std::vector<int64_t> shape = {b, m, n};
          for (int d = 0; d < 3; ++d) in = in && idx[d] >= 0 && idx[d] < shape[d];
          want[i * c.tn + j] = in ? hx[skew + (idx[0] * m + idx[1]) * n + idx[2]] : 0.0;
        } else {
          int64_t gi = om + i, gj = on + j;
          in = gi >= 0 && gi < m && gj >= 0 && gj < n;
          want[i * c.tn + j] = in ? hx[skew + gi * n + gj] : 0.0;
        }
      }
    expect_close(got, want, 0, 0);
    if (HasFailure()) break;
    ++cases;
  }
  EXPECT_EQ(cases, 72);
}

namespace {
// Matrix fragments through shared memory with copy: global -> registers, a dot with an f16
// accumulator, registers -> shared (stmatrix on sm_90), shared -> registers (ldmatrix) ->
// global.
// `boxes`: through shared boxes [2, 64, 32] seen as [64, 2, 32] (three-dimensional matrix
// copies, as the Hopper epilogues store the accumulator).
struct FragmentRoundTrip : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  bool boxes = false;
  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto ra = register_tensor(dtypes::float16, {64, 32});
    auto rb = register_tensor(dtypes::float16, {32, 64});
    copy(global_view(a, {m, k}).region({0, 0}, {64, 32}), ra);
    copy(global_view(b, {k, n}).region({0, 0}, {32, 64}), rb);
    auto acc = dot(ra, rb, {}, {.acc_dtype = dtypes::float16});
    RegisterTensor back = register_tensor(dtypes::float16, {64, 64});
    if (boxes) {
      auto sc = shared_tensor(dtypes::float16, {2, 64, 32});
      copy(reshape(acc, {64, 2, 32}), sc.permute({1, 0, 2}));
      auto back3 = register_tensor(dtypes::float16, {64, 2, 32});
      copy(sc.permute({1, 0, 2}), back3);
      back = reshape(back3, {64, 64});
    } else {
      auto sc = shared_tensor(dtypes::float16, {64, 64});
      copy(acc, sc);
      copy(sc, back);
    }
    copy(back, global_view(c, {m, n}).region({0, 0}, {64, 64}));
  }
};
}  // namespace

TEST(Backend_, FragmentsThroughSharedMemory) {
  REQUIRE_GPU();
  int64_t m = 50, n = 61, k = 29;
  auto ha = randoms(m * k, dtypes::float16), hb = randoms(k * n, dtypes::float16);
  Buffer a(dtypes::float16, m * k), b(dtypes::float16, k * n), c(dtypes::float16, m * n);
  a.upload(ha);
  b.upload(hb);
  c.upload(std::vector<double>(m * n, 0));
  std::vector<double> want(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += ha[i * k + l] * hb[l * n + j];
      want[i * n + j] = s;
    }
  for (bool boxes : {false, true}) {
    SCOPED_TRACE(boxes ? "three-dimensional shared boxes" : "a two-dimensional shared tile");
    c.upload(std::vector<double>(m * n, 0));
    FragmentRoundTrip script;
    script.boxes = boxes;
    jit_on(script)({m, n, k, a.arg(), b.arg(), c.arg()});
    expect_close(c.download(), want, 0.5, 0.01);
  }
}

// c = a + b with blocks in clusters of 2 (Hopper): the blocks run like any others (the CPU
// backend just runs them), and the grid must be a multiple of the cluster.
TEST(Backend_, ClusteredBlocksRunAndTheGridIsChecked) {
  REQUIRE_GPU();
#ifndef TILUS_TEST_CPU
  if (current_device().compute_capability < 90)
    GTEST_SKIP() << "thread-block clusters need sm_90, " << current_device().name << " is sm_"
                 << current_device().compute_capability;
#endif
  auto kernel = jit_on(tests::ClusteredVectorAdd({2}, 128));
  int64_t n = 3 * 128 + 77;  // 4 blocks, ragged: 2 clusters
  auto ha = randoms(n, dtypes::float32), hb = randoms(n, dtypes::float32);
  Buffer a(dtypes::float32, n), b(dtypes::float32, n), c(dtypes::float32, n);
  a.upload(ha);
  b.upload(hb);
  c.upload(std::vector<double>(n, 0));
  kernel({n, a.arg(), b.arg(), c.arg()});
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = round_to(dtypes::float32, ha[i] + hb[i]);
  expect_close(c.download(), want, 0, 0);
  // 3 blocks cannot form clusters of 2.
  try {
    kernel({int64_t(3 * 128), a.arg(), b.arg(), c.arg()});
    FAIL() << "a grid of 3 blocks launched in clusters of 2";
  } catch (const ArgumentError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("kernel ClusteredVectorAdd"), std::string::npos) << m;
    EXPECT_NE(m.find("is 3, not a multiple of the cluster's 2"), std::string::npos) << m;
  }
}

// --- the argument contract and run-time offsets (issue 19) -------------------------------------

namespace {

int contract_store_line = 0;  // the line of ContractAdd's store_global, set while tracing

// y[i] = x[i] + 1 over n elements.
struct ContractAdd : Script {
  static constexpr const char* param_names = "n, x, y";
  void operator()(Int32 n, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(n, 64)};
    attrs.warps = 2;
    auto v = load_global(global_view(x, {n}), {.offsets = {blockIdx.x * 64}, .shape = {64}});
    store_global(global_view(y, {n}), v + 1.0f, {.offsets = {blockIdx.x * 64}}); contract_store_line = __LINE__;
  }
};

// y[i, j] = x[i, j] over [m, 8], x read through the row stride sm the caller declares.
struct StridedRows : Script {
  static constexpr const char* param_names = "m, sm, x, y";
  void operator()(Int32 m, Int32 sm, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(m, 16)};
    attrs.warps = 2;
    auto gx = global_view(x, {m, 8}, {.strides = {sm, 1}});
    auto v = load_global(gx, {.offsets = {blockIdx.x * 16, 0}, .shape = {16, 8}});
    store_global(global_view(y, {m, 8}), v, {.offsets = {blockIdx.x * 16, 0}});
  }
};

int shared_copy_line = 0;

// y[0:16] = x[0:16] through s[i0:i0 + 16] of a 32-element shared tensor (region API; the
// extent written as stop - start).
struct SharedWindow : Script {
  static constexpr const char* param_names = "n, i0, x, y";
  void operator()(Int32 n, Int32 i0, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 1;
    auto s = shared_tensor(dtypes::float32, {32});
    copy(global_view(x, {n}).region({0}, {16}), s.region({i0}, {(i0 + 16) - i0})); shared_copy_line = __LINE__;
    copy(s.region({i0}, {16}), global_view(y, {n}).region({0}, {16}));
  }
};

}  // namespace

TEST(Backend_, ArgumentContractsAreCheckedAtEveryLaunch) {
  REQUIRE_GPU();
  auto kernel = jit_on(ContractAdd{});
  int64_t n = 200;
  auto hx = randoms(256, dtypes::float32);
  Buffer x(dtypes::float32, 256), y(dtypes::float32, 256), small(dtypes::float32, 100);
  x.upload(hx);
  kernel({n, x.arg(), y.arg()});
  std::vector<double> got = y.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], round_to(dtypes::float32, hx[i] + 1)) << i;
  auto expect = [&](const std::string& what, KernelArg xa, KernelArg ya, std::initializer_list<std::string> pieces) {
    std::string m = message_of<ArgumentError>([&] { kernel({n, xa, ya}); });
    for (const std::string& p : pieces) EXPECT_NE(m.find(p), std::string::npos) << what << ": " << m;
  };
  const std::string x_param = "kernel ContractAdd, argument 1 ('x': float32*)";
  const std::string y_param = "kernel ContractAdd, argument 2 ('y': float32*)";
  // Too small for the view: n elements from the pointer.
  expect("too small", small.arg(), y.arg(),
         {x_param, "the array has 400 bytes (100 float32 elements)", "global float32[n]) is [200]",
          "reaches 200 elements (800 bytes)"});
  // A 0-d array (one element) where a vector is read.
  KernelArg scalar = x.arg();
  scalar.bytes = 4;
  expect("0-d", scalar, y.arg(), {x_param, "the array has 4 bytes (1 float32 element)"});
  // Written through, but read-only.
  KernelArg ro = y.arg();
  ro.read_only = true;
  expect("read-only", x.arg(), ro,
         {y_param, fmt::format("read-only, but the kernel writes it (store_global at {}:{})", __FILE__,
                               contract_store_line)});
  KernelArg swapped = x.arg();
  swapped.foreign_byte_order = true;
  expect("byte order", swapped, y.arg(), {x_param, "not in the host's byte order"});
  // Not C-contiguous, in every way an array can fail to be.
  auto layout = [&](std::vector<int64_t> shape, std::vector<int64_t> strides) {
    KernelArg a = x.arg();
    a.shape = std::move(shape);
    a.byte_strides = std::move(strides);
    return a;
  };
  expect("strided", layout({200}, {8}), y.arg(), {x_param, "not C-contiguous: it is a strided view", "[200]", "[8]"});
  expect("negative", layout({200}, {-4}), y.arg(), {x_param, "negative stride in dim 0"});
  expect("broadcast", layout({200}, {0}), y.arg(), {x_param, "broadcast (stride 0 in dim 0)"});
  expect("fortran", layout({20, 10}, {4, 80}), y.arg(), {x_param, "Fortran (column-major) order"});
  // A contiguous array described by its shape is fine.
  kernel({n, layout({20, 10}, {40, 4}), y.arg()});
}

TEST(Backend_, DeclaredStridesTakeMatchingStridedArrays) {
  REQUIRE_GPU();
  auto kernel = jit_on(StridedRows{});
  int64_t m = 40;
  auto hx = randoms(m * 16, dtypes::float32);
  Buffer x(dtypes::float32, m * 16), y(dtypes::float32, m * 8);
  x.upload(hx);
  // Columns 0..7 of a row-major [m, 16] array: shape [m, 8], strides [64, 4] bytes.
  KernelArg columns = x.arg();
  columns.shape = {m, 8};
  columns.byte_strides = {64, 4};
  kernel({m, int64_t(16), columns, y.arg()});
  auto got = y.download();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < 8; ++j) ASSERT_EQ(got[i * 8 + j], hx[i * 16 + j]) << i << ", " << j;
  // Other strides than the kernel declares, or more rows than the array has.
  std::string e = message_of<ArgumentError>([&] { kernel({m, int64_t(8), columns, y.arg()}); });
  EXPECT_NE(e.find("kernel StridedRows, argument 2 ('x': float32*)"), std::string::npos) << e;
  EXPECT_NE(e.find("declares strides [sm, 1] = [8, 1] elements for these arguments (dim 0 differs)"),
            std::string::npos) << e;
  e = message_of<ArgumentError>([&] { kernel({m + 1, int64_t(16), columns, y.arg()}); });
  EXPECT_NE(e.find("is [41, 8] for these arguments and dim 0 is 41 > 40"), std::string::npos) << e;
}

TEST(Backend_, SharedOffsetsAreCheckedAtRunTime) {
  REQUIRE_GPU();
  JitOptions o;
  o.backend = kBackend;
  o.cpu.checked = true;
  o.cuda.debug_bounds = true;  // GPU: the device-side checks (in bounds here: no trap)
  JitKernel<SharedWindow> kernel(SharedWindow{}, o);
  auto hx = randoms(64, dtypes::float32);
  Buffer x(dtypes::float32, 64), y(dtypes::float32, 64);
  x.upload(hx);
  for (int64_t i0 : {0, 7, 16}) {
    y.upload(std::vector<double>(64, 0));
    kernel({int64_t(64), i0, x.arg(), y.arg()});
    auto got = y.download();
    for (int i = 0; i < 16; ++i) ASSERT_EQ(got[i], hx[i]) << "i0 = " << i0 << ", element " << i;
  }
#ifdef TILUS_TEST_CPU
  // Past the shared tensor's end: reported before the tile is touched (GPU: a trap, tested from
  // Python in a child process, since a trap ends the CUDA context).
  try {
    kernel({int64_t(64), int64_t(20), x.arg(), y.arg()});
    FAIL() << "expected CpuCheckError";
  } catch (const CpuCheckError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(fmt::format("{}:{}: copy", __FILE__, shared_copy_line)), std::string::npos) << m;
    EXPECT_NE(m.find("shared float32[32] at shared index [20]: dim 0 takes [20, 36), outside the tensor's [0, 32)"),
              std::string::npos) << m;
  }
#endif
}

// --- the thread-level builtins of seed 004 ----------------------------------------------------------

TEST(Backend_, ThreadIndicesAreTilesOfEveryThreadsValue) {
  REQUIRE_GPU();
  Buffer idx(dtypes::int32, 896);
  idx.upload(std::vector<double>(896, -1));
  jit_on(tests::ThreadIndices{})({idx.arg()});
  auto got = idx.download();
  for (int t = 0; t < 128; ++t) {
    ASSERT_EQ(got[t], t % 32) << "lane " << t;
    ASSERT_EQ(got[128 + t], t / 32) << "warp " << t;
    ASSERT_EQ(got[256 + t], t / 32) << "warp (sync) " << t;
    ASSERT_EQ(got[384 + t], t / 64) << "warp group of 2 warps " << t;
    ASSERT_EQ(got[512 + t], t % 64 == 0) << "elect per 64 " << t;
    ASSERT_EQ(got[768 + t], t % 16) << "lane of 16 " << t;
  }
  for (int t = 0; t < 64; ++t) {
    ASSERT_EQ(got[640 + t], (64 + t) % 32) << "lane in the group " << t;  // indices in the block
    ASSERT_EQ(got[704 + t], t == 0) << "elect(0) in the group " << t;   // the group's first thread
  }
}

TEST(Backend_, ShufflesMoveSlotsBetweenLanes) {
  REQUIRE_GPU();
  auto hx = randoms(256, dtypes::float32);
  Buffer x(dtypes::float32, 256), y(dtypes::float32, 6 * 256);
  x.upload(hx);
  y.upload(std::vector<double>(6 * 256, 0));
  int64_t offset = 6;
  jit_on(tests::Shuffles{})({offset, x.arg(), y.arg()});
  auto got = y.download();
  // Element s * 128 + t lives in slot s of thread t: it reads slot s of the source thread.
  auto src = [](const std::string& op, int t, int b, int width) {
    int lane = t % 32;
    return t - lane + int(shuffle_source_lane(op, lane, b, width));
  };
  struct Case {
    const char* op;
    int b, width, at;
  } cases[] = {{"shfl_xor", 1, 32, 0},      {"shfl_down", 3, 32, 256}, {"shfl_up", 2, 32, 512},
               {"shfl_sync", 5, 8, 768},    {"shfl_xor", int(offset), 32, 1024}};
  for (auto& c : cases)
    for (int s = 0; s < 2; ++s)
      for (int t = 0; t < 128; ++t)
        ASSERT_EQ(got[c.at + s * 128 + t], hx[s * 128 + src(c.op, t, c.b, c.width)])
            << c.op << " b=" << c.b << " slot " << s << " thread " << t;
  for (int t = 0; t < 128; ++t) {
    ASSERT_EQ(got[1280 + t], src("shfl_down", t, 1, 32) % 32) << "int32 lanes, thread " << t;
    ASSERT_EQ(got[1408 + t], src("shfl_up", t, 4, 32) % 32) << "float16 lanes, thread " << t;
  }
}

TEST(Backend_, ExplicitWidthLoadsAndStores) {
  REQUIRE_GPU();
  for (int64_t bits : {32, 64, 128, 256}) {
    SCOPED_TRACE(fmt::format("{} bits", bits));
    int64_t per = bits / 32, n = 16 * per, live = 12, stored = 14;
    auto hx = randoms(n, dtypes::float32);
    Buffer x(dtypes::float32, n), y(dtypes::float32, n);
    x.upload(hx);
    y.upload(std::vector<double>(n, -7));
    jit_on(tests::VectorCopy(bits))({n, live, stored, x.arg(), y.arg()});
    auto got = y.download();
    for (int64_t i = 0; i < n; ++i) {
      int64_t block = i / per;
      double want = block >= stored ? -7 : block >= live ? 1.0 : round_to(dtypes::float32, hx[i] + 1.0);
      ASSERT_EQ(got[i], want) << "element " << i;
    }
  }
}

TEST(Backend_, NamedBarriersWarpSyncAndLoopBreak) {
  REQUIRE_GPU();
  int64_t n = 256;
  auto hx = randoms(n, dtypes::float32);
  Buffer x(dtypes::float32, n), y(dtypes::float32, n + 1);
  x.upload(hx);
  for (int64_t stop : {int64_t(5), int64_t(200)}) {
    y.upload(std::vector<double>(n + 1, 0));
    tests::Barriers k;
#ifdef TILUS_TEST_CPU
    k.registers = true;  // setmaxnreg: a no-op on the CPU (its budgets need a kernel built for them on the GPU)
#endif
    jit_on(k)({n, stop, x.arg(), y.arg()});
    auto got = y.download();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], round_to(dtypes::float32, hx[i] * 2)) << i;
    EXPECT_EQ(got[n], std::min<int64_t>(stop, 100));
  }
}

TEST(Backend_, ClusterIndicesComeFromTheBlockIndex) {
  REQUIRE_GPU();
#ifndef TILUS_TEST_CPU
  if (current_device().compute_capability < 90)
    GTEST_SKIP() << "thread-block clusters need sm_90, " << current_device().name << " is sm_"
                 << current_device().compute_capability;
#endif
  Buffer out(dtypes::int32, 32);
  out.upload(std::vector<double>(32, -1));
  jit_on(tests::ClusterIds{})({out.arg()});
  auto got = out.download();
  for (int by = 0; by < 2; ++by)
    for (int bx = 0; bx < 4; ++bx) {
      int b = by * 4 + bx;
      EXPECT_EQ(got[4 * b], bx % 2) << "block " << b;
      EXPECT_EQ(got[4 * b + 1], by % 2) << "block " << b;
      EXPECT_EQ(got[4 * b + 2], bx % 2 + 2 * (by % 2)) << "block " << b;
      EXPECT_EQ(got[4 * b + 3], 22) << "block " << b;
    }
}

TEST(Backend_, GridBarrierNeedsEveryBlockResident) {
  REQUIRE_GPU();
  int64_t blocks = 6;
  auto hx = randoms(blocks * 128, dtypes::float32);
  Buffer x(dtypes::float32, blocks * 128), tmp(dtypes::float32, blocks * 128), y(dtypes::float32, blocks * 128);
  x.upload(hx);
  auto kernel = jit_on(tests::GridExchange{});
#ifdef TILUS_TEST_CPU
  // The CPU backend runs blocks in batches: a grid barrier is a compile error there.
  try {
    kernel({blocks, x.arg(), tmp.arg(), y.arg()});
    FAIL() << "sync_grid compiled for the CPU backend";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("sync_grid: sync_grid needs every block resident at once; the CPU backend runs "
                               "blocks in batches"),
              std::string::npos)
        << e.message();
    EXPECT_NE(e.loc().file.find("builtins_scripts.h"), std::string::npos) << e.loc().str();
  }
#else
  kernel({blocks, x.arg(), tmp.arg(), y.arg()});
  auto got = y.download();
  for (int64_t b = 0; b < blocks; ++b)
    for (int t = 0; t < 128; ++t)
      ASSERT_EQ(got[b * 128 + t], round_to(dtypes::float32, hx[((b + 1) % blocks) * 128 + t] * 2)) << b << " " << t;
  // More blocks than the GPU holds at once: refused before the launch, naming the kernel.
  int64_t many = 1 << 16;
  Buffer big(dtypes::float32, many * 128);
  try {
    kernel({many, big.arg(), big.arg(), big.arg()});
    FAIL() << "a grid of " << many << " blocks launched cooperatively";
  } catch (const ArgumentError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("kernel GridExchange synchronizes its whole grid (sync_grid)"), std::string::npos) << m;
    EXPECT_NE(m.find("has 65536 blocks"), std::string::npos) << m;
  }
#endif
}

TEST(Backend_, ShufflesOfEveryElementWidth) {
  REQUIRE_GPU();
  int64_t n = int64_t(tests::shuffle_dtypes().size()) * 64;
  Buffer out(dtypes::int32, n);
  out.upload(std::vector<double>(n, -1));
  jit_on(tests::ShuffleDtypes{})({out.arg()});
  auto got = out.download();
  for (size_t k = 0; k < tests::shuffle_dtypes().size(); ++k) {
    DataType t = tests::shuffle_dtypes()[k];
    for (int i = 0; i < 64; ++i) {
      int lane = (i % 32) ^ 3;
      double want = t.is_bool() ? double(lane != 0) : lane;
      ASSERT_EQ(got[k * 64 + i], want) << t.name() << " thread " << i;
    }
  }
}

#ifdef TILUS_TEST_CPU
// ldg / stg add no bounds predicate (pred is their only guard), but checked mode still reports an
// access past the array.
TEST(Backend_, ExplicitWidthAccessesOutOfBoundsAreReported) {
  REQUIRE_GPU();
  int64_t n = 10;  // 3 blocks of 4 floats: the last reads and writes elements 10 and 11
  Buffer x(dtypes::float32, n), y(dtypes::float32, n);
  x.upload(randoms(n, dtypes::float32));
  try {
    jit_on(tests::VectorCopy(128))({n, int64_t(3), int64_t(3), x.arg(), y.arg()});
    FAIL() << "expected CpuCheckError";
  } catch (const CpuCheckError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("ldg128"), std::string::npos) << m;
    EXPECT_NE(m.find("builtins_scripts.h"), std::string::npos) << m;
    EXPECT_NE(m.find("global float32[n]"), std::string::npos) << m;
  }
  // With pred false there, nothing is touched.
  jit_on(tests::VectorCopy(128))({n, int64_t(2), int64_t(2), x.arg(), y.arg()});
}
#endif

namespace {
// A TMA load completing on an mbarrier, then a TMA store of the same tile, through the C++ API:
// NVIDIA Tilus's groups, or the seed names.
struct TmaRoundTrip : Script {
  static constexpr const char* param_names = "m, n, x, y, off_m, off_n";
  bool seed_names = false;
  void operator()(Int32 m, Int32 n, Ptr<f16> x, Ptr<f16> y, Int32 off_m, Int32 off_n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gx = global_view(x, {m, n});
    auto gy = global_view(y, {m, n});
    auto s = shared_tensor(dtypes::float16, {32, 64});
    auto bars = mbarrier.alloc({1});
    if (seed_names) {
      single_thread([&] { tma_copy(gx.region({off_m, off_n}, {32, 64}), s, {.barrier = bars[0]}); });
      mbarrier_wait_parity(bars[0], 0);
    } else {
      single_thread([&] {
        mbarrier.arrive_and_expect_tx(bars[0], 32 * 64 * 2);
        tma.global_to_shared(gx, s, {.offsets = {off_m, off_n}}, bars[0]);
      });
      mbarrier.wait(bars[0], MbarrierGroup::consumer_initial_phase);
    }
    single_thread([&] {
      tma.shared_to_global(s, gy, {.offsets = {off_m, off_n}});
      tma.commit_group();
      tma.wait_group(0);
    });
  }
};
}  // namespace

TEST(Backend_, TmaLoadAndStoreThroughTheCppApi) {
  REQUIRE_GPU();
  if (kBackend == Backend::Gpu && current_device().compute_capability < 90) GTEST_SKIP() << "TMA needs sm_90";
  int64_t m = 61, n = 96;  // rows of 192 bytes: TMA strides are multiples of 16 bytes
  auto hx = randoms(m * n, dtypes::float16);
  Buffer x(dtypes::float16, m * n), y(dtypes::float16, m * n);
  x.upload(hx);
  for (bool seed : {false, true})
    // Boxes crossing the far edges (a TMA store box may not start at a negative coordinate:
    // that traps, with a message, tests/python/test_hopper_copies.py).
    for (auto [om, on] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {40, 56}, {13, 24}, {8, 0}}) {
      SCOPED_TRACE(fmt::format("seed names {} offsets {} {}", seed, om, on));
      y.upload(std::vector<double>(size_t(m * n), 7.0));
      TmaRoundTrip k;
      k.seed_names = seed;
      jit_on(k)({m, n, x.arg(), y.arg(), om, on});
      std::vector<double> want(size_t(m * n), 7.0);
      for (int64_t i = std::max<int64_t>(0, om); i < std::min(m, om + 32); ++i)
        for (int64_t j = std::max<int64_t>(0, on); j < std::min(n, on + 64); ++j) want[i * n + j] = hx[i * n + j];
      expect_close(y.download(), want, 0, 0);
    }
}
