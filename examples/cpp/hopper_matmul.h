// The fastest Hopper matmul of the examples (examples/python/hopper_matmul_v3.py) through the C++
// Script API: c = a @ b.T with a [m, k] and b [n, k] f16, persistent and warp-specialized. One
// block per SM walks the output tiles in a grouped order; a producer warp fills a ring of
// `stages` shared buffers with TMA (each completing on its `full` mbarrier), the consumer warp
// groups multiply with wgmma and hand each buffer back on its `empty` mbarrier once the wgmma
// that read it retired. Needs sm_90a.
#pragma once

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct HopperMatmul : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  int64_t block_m = 128, block_n = 256, block_k = 64, stages = 4, consumers = 2, group = 8, blocks = 132;

  // The origin of output tile t in the grouped order (`group` tiles down a column first).
  std::pair<Expr, Expr> tile_origin(const Expr& t, const Expr& tiles_m, const Expr& tiles_n) {
    Expr span = let("span", tiles_n * group);
    Expr first_m = let("first_m", t / span * group);
    Expr rows = let("rows", tilus::min(tiles_m - first_m, Expr(group)));
    return {let("offset_m", (first_m + t % rows) * block_m), let("offset_n", t % span / rows * block_n)};
  }

  // One arrival per consumer warp group, by its first thread.
  void release(const SharedTensor& barrier) {
    for (int64_t wg = 0; wg < consumers; ++wg) thread_group(wg * 128, 1, [&] { mbarrier.arrive(barrier); });
  }

  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    int64_t workers = 128 * consumers;
    attrs.blocks = {blocks};
    attrs.warps = 4 * consumers + 1;
    Expr tiles_m = let("tiles_m", cdiv(m, block_m)), tiles_n = let("tiles_n", cdiv(n, block_n));
    Expr tiles = let("tiles", tiles_m * tiles_n), steps = let("steps", cdiv(k, block_k));
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {n, k});
    auto gc = global_view(c, {m, n});
    auto sa = shared_tensor(dtypes::float16, {stages, block_m, block_k});
    auto sb = shared_tensor(dtypes::float16, {stages, block_n, block_k});
    auto full = mbarrier.alloc(std::vector<Expr>(size_t(stages), Expr(1)));
    auto empty = mbarrier.alloc(std::vector<Expr>(size_t(stages), Expr(consumers)));
    thread_group(workers, 32, [&] {  // the producer warp
      for (Expr t : range(blockIdx.x, tiles, blocks, {.name = "t"})) {
        auto [offset_m, offset_n] = tile_origin(t, tiles_m, tiles_n);
        Expr first = let("first", (t - blockIdx.x) / blocks * steps);
        for (Expr step : range(steps, {.name = "step"})) {
          Expr g = let("g", first + step), stage = let("stage", g % stages);
          mbarrier.wait(empty[stage], (g / stages % 2) ^ 1);
          single_thread([&] {
            mbarrier.arrive_and_expect_tx(full[stage], (block_m + block_n) * block_k * 2);
            tma.global_to_shared(ga, sa[stage], {.offsets = {offset_m, step * block_k}}, full[stage]);
            tma.global_to_shared(gb, sb[stage], {.offsets = {offset_n, step * block_k}}, full[stage]);
          });
        }
      }
    });
    thread_group(0, workers, [&] {  // the consumer warp groups
      for (Expr t : range(blockIdx.x, tiles, blocks, {.name = "t"})) {
        auto [offset_m, offset_n] = tile_origin(t, tiles_m, tiles_n);
        Expr first = let("first", (t - blockIdx.x) / blocks * steps);
        auto acc = register_tensor(dtypes::float32, {block_m, block_n}, 0.0);
        for (Expr step : range(steps, {.name = "step"})) {
          Expr g = let("g", first + step), stage = let("stage", g % stages);
          mbarrier.wait(full[stage], g / stages % 2);
          wgmma.fence();
          wgmma.mma(sa[stage], sb[stage].transpose(), acc);
          wgmma.commit_group();
          wgmma.wait_group(1);  // the previous step's wgmma retired: release its stage
          if_(step > 0, [&] { release(empty[(g + stages - 1) % stages]); });
        }
        wgmma.wait_group(0);
        release(empty[(first + steps - 1) % stages]);
        store_global(gc, acc.to(dtypes::float16), {.offsets = {offset_m, offset_n}});
      }
    });
  }
};

}  // namespace examples
