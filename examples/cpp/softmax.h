// Row softmax: y[i, :] = exp(x[i, :] - max(x[i, :])) / sum(...), one block of rows per
// thread block; the whole row (n <= block_n) is held in registers. Out-of-range columns
// load as zero, so they are masked to -inf before the max.
#pragma once

#include <limits>

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct Softmax : Script {
  static constexpr const char* param_names = "m, n, x, y";
  int64_t block_m = 4, block_n = 1024, warps = 4;

  Softmax() = default;
  Softmax(int64_t bm, int64_t bn, int64_t w = 4) : block_m(bm), block_n(bn), warps(w) {}

  void operator()(Int32 m, Int32 n, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(m, block_m)};
    attrs.warps = warps;
    Expr offset_m = let("offset_m", blockIdx.x * block_m);
    auto gx = global_view(x, {m, n});
    auto gy = global_view(y, {m, n});
    auto rows = load_global(gx, {.offsets = {offset_m, 0}, .shape = {block_m, block_n}});
    auto cols = register_tensor(dtypes::int32, {block_m, block_n}, [](const std::vector<Var>& i) { return Expr(i[1]); });
    auto masked = where(cols < n, rows, -std::numeric_limits<float>::infinity());
    auto row_max = max(masked, {.dims = std::vector<int>{1}, .keepdim = true});
    auto e = exp(masked - row_max);
    auto total = sum(e, {.dims = std::vector<int>{1}, .keepdim = true});
    store_global(gy, e / total, {.offsets = {offset_m, 0}});
  }
};

}  // namespace examples
