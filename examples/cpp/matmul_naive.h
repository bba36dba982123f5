// Naive matmul: every block loads its tiles of A and B straight from global memory and
// multiplies them in registers. c[m, n] = a[m, k] @ b[k, n], f16 inputs, f32 accumulation.
#pragma once

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct MatmulNaive : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  int64_t block_m = 64, block_n = 64, block_k = 16, warps = 4;

  MatmulNaive() = default;
  MatmulNaive(int64_t bm, int64_t bn, int64_t bk, int64_t w = 4) : block_m(bm), block_n(bn), block_k(bk), warps(w) {}

  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    attrs.blocks = {cdiv(m, block_m), cdiv(n, block_n)};
    attrs.warps = warps;
    Expr offset_m = let("offset_m", blockIdx.x * block_m);
    Expr offset_n = let("offset_n", blockIdx.y * block_n);
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {k, n});
    auto acc = register_tensor(dtypes::float32, {block_m, block_n}, 0.0);
    for (Expr k0 : range(0, k, block_k, {.name = "k0"})) {
      auto ta = load_global(ga, {.offsets = {offset_m, k0}, .shape = {block_m, block_k}});
      auto tb = load_global(gb, {.offsets = {k0, offset_n}, .shape = {block_k, block_n}});
      acc = dot(ta, tb, acc);
    }
    auto gc = global_view(c, {m, n});
    store_global(gc, acc.to(dtypes::float16), {.offsets = {offset_m, offset_n}});
  }
};

}  // namespace examples
