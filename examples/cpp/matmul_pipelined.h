// The tensor-core matmul of matmul_mma.h written without a single wait or sync: the
// async-wait pass commits and waits (keeping stages - 1 tiles in flight) and the barrier pass
// separates the buffer reuse. Same tiles, grouping and pipeline depth.
#pragma once

#include "matmul_mma.h"

namespace examples {
using namespace tilus;

struct MatmulPipelined : MatmulMma {
  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    auto [offset_m, offset_n] = tile_origin(m, n);
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {k, n});
    auto sa = shared_tensor(dtypes::float16, {stages, block_m, block_k});
    auto sb = shared_tensor(dtypes::float16, {stages, block_k, block_n});
    auto acc = register_tensor(dtypes::float32, {block_m, block_n}, 0.0);
    for (int64_t s = 0; s + 1 < stages; ++s) {
      copy_async(ga, sa[s], {.offsets = {offset_m, s * block_k}});
      copy_async(gb, sb[s], {.offsets = {s * block_k, offset_n}});
      copy_async_commit_group();
    }
    for (Expr step : range(cdiv(k, block_k), {.name = "step"})) {
      Expr next = step + (stages - 1);
      copy_async(ga, sa[next % stages], {.offsets = {offset_m, next * block_k}});
      copy_async(gb, sb[next % stages], {.offsets = {next * block_k, offset_n}});
      copy_async_commit_group();
      acc = dot(load_shared(sa[step % stages]), load_shared(sb[step % stages]), acc);
    }
    store_global(global_view(c, {m, n}), acc.to(dtypes::float16), {.offsets = {offset_m, offset_n}});
  }
};

}  // namespace examples
