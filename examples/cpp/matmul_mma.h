// A pipelined f16 tensor-core matmul: 128x256x32 tiles, 8 warps, `stages` shared buffers
// filled with cp.async and explicit waits (issue 4's passes will insert them). c = a @ b
// with f16 inputs, f32 accumulation (mma.sync m16n8k16; wgmma on sm_90a) and f16 output.
#pragma once

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct MatmulMma : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  int64_t block_m = 128, block_n = 256, block_k = 32, warps = 8, stages = 3, group = 8;

  MatmulMma() = default;
  MatmulMma(int64_t bm, int64_t bn, int64_t bk, int64_t w, int64_t s)
      : block_m(bm), block_n(bn), block_k(bk), warps(w), stages(s) {}

  // One block per c tile, numbered so that `group` consecutive blocks cover a column of
  // tiles of m: they share the tiles of b they read, which then stay in L2. Sets the grid
  // and warps; returns the tile's (row, column) origin.
  std::pair<Expr, Expr> tile_origin(const Expr& m, const Expr& n) {
    Expr tiles_m = let("tiles_m", cdiv(m, block_m));
    Expr tiles_n = let("tiles_n", cdiv(n, block_n));
    attrs.blocks = {cdiv(m, block_m) * cdiv(n, block_n)};
    attrs.warps = warps;
    Expr first_m = let("first_m", blockIdx.x / (group * tiles_n) * group);
    Expr rows = let("rows", tilus::min(tiles_m - first_m, Expr(group)));
    return {let("offset_m", (first_m + blockIdx.x % rows) * block_m),
            let("offset_n", blockIdx.x % (group * tiles_n) / rows * block_n)};
  }

  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    auto [offset_m, offset_n] = tile_origin(m, n);
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {k, n});
    auto sa = shared_tensor(dtypes::float16, {stages, block_m, block_k});
    auto sb = shared_tensor(dtypes::float16, {stages, block_k, block_n});
    auto acc = register_tensor(dtypes::float32, {block_m, block_n}, 0.0);
    Expr steps = let("steps", cdiv(k, block_k));
    // Prologue: the first stages - 1 tiles in flight.
    for (int64_t s = 0; s + 1 < stages; ++s) {
      copy_async(ga, sa[s], {.offsets = {offset_m, s * block_k}});
      copy_async(gb, sb[s], {.offsets = {s * block_k, offset_n}});
      copy_async_commit_group();
    }
    for (Expr step : range(steps, {.name = "step"})) {
      copy_async_wait_group(stages - 2);
      sync();
      // Refill the buffer consumed in the previous iteration (every thread is past it).
      Expr next = step + (stages - 1);
      copy_async(ga, sa[next % stages], {.offsets = {offset_m, next * block_k}});
      copy_async(gb, sb[next % stages], {.offsets = {next * block_k, offset_n}});
      copy_async_commit_group();
      Expr cur = step % stages;
      acc = dot(load_shared(sa[cur]), load_shared(sb[cur]), acc);
    }
    copy_async_wait_all();
    auto gc = global_view(c, {m, n});
    store_global(gc, acc.to(dtypes::float16), {.offsets = {offset_m, offset_n}});
  }
};

}  // namespace examples
