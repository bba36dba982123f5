// The plain tiled matmul, pipelined by the compiler: per k step the tiles of a and b are
// copied to shared memory and multiplied, and the k loop is marked `num_stages`; the
// pipeline_loops pass makes it a ring of that many stages (TMA loads on mbarriers on sm_90,
// cp.async on sm_80), the dot a wgmma on sm_90a with one iteration's group in flight, and the
// waits and barriers come from the passes. `warp_specialize` adds a producer warp group,
// `persistent` one block per SM over the tiles. No wait, barrier, stage index or thread role is
// written. c = a @ b.T with f16 a [m, k], b [n, k] (k contiguous in both, as wgmma reads b),
// f32 accumulation.
#pragma once

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct MatmulAuto : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  int64_t block_m = 128, block_n = 128, block_k = 64, warps = 4, stages = 4;
  bool warp_specialize = false, persistent = false;
  std::string epilogue;  // a persistent ring's: "" (the pass chooses), "tma" or "registers"

  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    attrs.blocks = {cdiv(m, block_m), cdiv(n, block_n)};
    attrs.warps = warps;
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {n, k});
    auto sa = shared_tensor(dtypes::float16, {block_m, block_k});
    auto sb = shared_tensor(dtypes::float16, {block_n, block_k});
    auto acc = register_tensor(dtypes::float32, {block_m, block_n}, 0.0);
    for (Expr ko : range(cdiv(k, block_k), {.name = "ko",
                                            .num_stages = stages,
                                            .warp_specialize = warp_specialize,
                                            .persistent = persistent,
                                            .epilogue = epilogue})) {
      copy_async(ga, sa, {.offsets = {blockIdx.x * block_m, ko * block_k}});
      copy_async(gb, sb, {.offsets = {blockIdx.y * block_n, ko * block_k}});
      acc = dot(load_shared(sa), load_shared(sb.transpose()), acc);
    }
    store_global(global_view(c, {m, n}), acc.to(dtypes::float16),
                 {.offsets = {blockIdx.x * block_m, blockIdx.y * block_n}});
  }
};

}  // namespace examples
