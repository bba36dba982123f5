// Shared-memory matmul with copy_async: each iteration copies the next tiles of A and B
// into shared memory asynchronously (cp.async), waits for them, and multiplies.
// The waits and syncs are written by hand here; later examples let the passes insert them.
#pragma once

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct MatmulShared : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c";
  int64_t block_m = 64, block_n = 64, block_k = 32, warps = 4;

  MatmulShared() = default;
  MatmulShared(int64_t bm, int64_t bn, int64_t bk, int64_t w = 4) : block_m(bm), block_n(bn), block_k(bk), warps(w) {}

  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    attrs.blocks = {cdiv(m, block_m), cdiv(n, block_n)};
    attrs.warps = warps;
    Expr offset_m = let("offset_m", blockIdx.x * block_m);
    Expr offset_n = let("offset_n", blockIdx.y * block_n);
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {k, n});
    auto sa = shared_tensor(dtypes::float16, {block_m, block_k});
    auto sb = shared_tensor(dtypes::float16, {block_k, block_n});
    auto acc = register_tensor(dtypes::float32, {block_m, block_n}, 0.0);
    for (Expr k0 : range(0, k, block_k, {.name = "k0"})) {
      copy_async(ga, sa, {.offsets = {offset_m, k0}});
      copy_async(gb, sb, {.offsets = {k0, offset_n}});
      copy_async_commit_group();
      copy_async_wait_all();
      sync();
      acc = dot(load_shared(sa), load_shared(sb), acc);
      sync();
    }
    free_shared(sa);
    free_shared(sb);
    auto gc = global_view(c, {m, n});
    store_global(gc, acc.to(dtypes::float16), {.offsets = {offset_m, offset_n}});
  }
};

}  // namespace examples
