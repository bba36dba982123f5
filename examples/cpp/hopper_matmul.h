// The fastest Hopper matmul of the examples (examples/python/hopper_matmul_v6.py) through the C++
// Script API: c = a @ b.T with a [m, k] and b [n, k] f16, persistent and warp-specialized, in
// clusters of two blocks. The two blocks of a cluster take two output tiles one above the other
// and share their tile of b: each loads its own tile of a and half of b's, multicast into both
// blocks (TMA multicast). A producer warp fills a ring of `stages` shared buffers (each completing
// on its `full` mbarrier); the consumer warp groups multiply with wgmma and hand each buffer back
// on the `empty` mbarrier of both blocks once the wgmma that read it retired. The accumulator is
// two column halves; each half leaves through one shared tile as TMA stores (c's rows must be a
// multiple of 16 bytes: n a multiple of 8). Needs sm_90a.
#pragma once

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct HopperMatmul : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  int64_t block_m = 128, block_n = 256, block_k = 64, stages = 4, group = 8, blocks = 132;

  // The origin of the pair of output tiles t (2 * block_m rows) in the grouped order (`group`
  // pairs down a column first).
  std::pair<Expr, Expr> pair_origin(const Expr& t, const Expr& pairs_m, const Expr& tiles_n) {
    Expr span = let("span", tiles_n * group);
    Expr first_m = let("first_m", t / span * group);
    Expr rows = let("rows", tilus::min(pairs_m - first_m, Expr(group)));
    return {let("pair_m", (first_m + t % rows) * 2 * block_m), let("offset_n", t % span / rows * block_n)};
  }

  // One arrival per consumer warp group, by its first thread, on this block's barrier and the peer's.
  void release(const SharedTensor& barrier, const Expr& peer) {
    for (int64_t wg = 0; wg < 2; ++wg)
      thread_group(wg * 128, 1, [&] {
        mbarrier.arrive(barrier);
        mbarrier_arrive(barrier, peer);
      });
  }

  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    const int64_t half = block_n / 2, box = 64;  // a box: one 128-byte swizzled row of f16
    attrs.blocks = {blocks};
    attrs.cluster_blocks = {2, 1, 1};
    attrs.warps = 9;  // two consumer warp groups and the producer warp
    Expr rank = let("rank", cluster.blockRank), peer = let("peer", rank ^ 1);
    Expr cluster_id = let("cluster", blockIdx.x / 2), clusters = Expr(blocks / 2);
    Expr pairs_m = let("pairs_m", cdiv(m, 2 * block_m)), tiles_n = let("tiles_n", cdiv(n, block_n));
    Expr pairs = let("pairs", pairs_m * tiles_n), steps = let("steps", cdiv(k, block_k));
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {n, k});
    auto gc = global_view(c, {m, n});
    auto sa = shared_tensor(dtypes::float16, {stages, block_m, block_k});
    auto sb = shared_tensor(dtypes::float16, {stages, block_n, block_k});
    auto sc = shared_tensor(dtypes::float16, {half / box, block_m, box});  // the boxes of one column half
    auto full = mbarrier.alloc(std::vector<Expr>(size_t(stages), Expr(1)));
    auto empty = mbarrier.alloc(std::vector<Expr>(size_t(stages), Expr(4)));  // both blocks' consumers
    cluster.sync();  // the peer's barriers are initialized before anything arrives on them
    thread_group(256, 32, [&] {  // the producer warp
      for (Expr t : range(cluster_id, pairs, clusters, {.name = "t"})) {
        auto [pair_m, offset_n] = pair_origin(t, pairs_m, tiles_n);
        Expr first = let("first", (t - cluster_id) / clusters * steps);
        for (Expr step : range(steps, {.name = "step"})) {
          Expr g = let("g", first + step), stage = let("stage", g % stages);
          mbarrier.wait(empty[stage], (g / stages % 2) ^ 1);
          single_thread([&] {
            mbarrier.arrive_and_expect_tx(full[stage], (block_m + block_n) * block_k * 2);
            tma.global_to_shared(ga, sa[stage], {.offsets = {pair_m + rank * block_m, step * block_k}}, full[stage]);
            tma.global_to_shared(gb, sb[stage].slice({rank * half, 0}, {0, 1}, {half, block_k}),
                                 {.offsets = {offset_n + rank * half, step * block_k}, .multicast_mask = 3},
                                 full[stage]);
          });
        }
      }
    });
    thread_group(0, 256, [&] {  // the consumer warp groups
      for (Expr t : range(cluster_id, pairs, clusters, {.name = "t"})) {
        auto [pair_m, offset_n] = pair_origin(t, pairs_m, tiles_n);
        Expr offset_m = let("offset_m", pair_m + rank * block_m);
        Expr first = let("first", (t - cluster_id) / clusters * steps);
        RegisterTensor halves[2] = {register_tensor(dtypes::float32, {block_m, half}, 0.0),
                                    register_tensor(dtypes::float32, {block_m, half}, 0.0)};
        for (Expr step : range(steps, {.name = "step"})) {
          Expr g = let("g", first + step), stage = let("stage", g % stages);
          mbarrier.wait(full[stage], g / stages % 2);
          wgmma.fence();
          for (int64_t h = 0; h < 2; ++h)
            wgmma.mma(sa[stage], sb[stage].slice({h * half, 0}, {0, 1}, {half, block_k}).transpose(), halves[h]);
          wgmma.commit_group();
          wgmma.wait_group(1);  // the previous step's wgmma retired: release its stage
          if_(step > 0, [&] { release(empty[(g + stages - 1) % stages], peer); });
        }
        wgmma.wait_group(0);
        release(empty[(first + steps - 1) % stages], peer);
        for (int64_t h = 0; h < 2; ++h) {
          single_thread([&] { tma.wait_group(0, /*read=*/true); });  // the stores before have read sc
          store_shared(sc.permute({1, 0, 2}), reshape(halves[h].to(dtypes::float16), {block_m, half / box, box}));
          single_thread([&] {
            for (int64_t j = 0; j < half / box; ++j)
              tma.shared_to_global(sc[j], gc, {.offsets = {offset_m, offset_n + h * half + j * box}});
            tma.commit_group();
          });
        }
      }
    });
    cluster.sync();  // no block leaves while its peer may still write to it
  }
};

}  // namespace examples
