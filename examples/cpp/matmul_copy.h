// The pipelined tensor-core matmul of matmul_pipelined.h with every data movement written as
// `copy`: global -> shared tiles asked to be cp.async (each copy commits its own group, so the
// async-wait pass keeps stages - 1 tiles in flight), shared -> register fragments that the
// selection pass turns into ldmatrix, and the register -> global epilogue. No wait, no sync.
#pragma once

#include "matmul_mma.h"

namespace examples {
using namespace tilus;

struct MatmulCopy : MatmulMma {
  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c) {
    auto [offset_m, offset_n] = tile_origin(m, n);
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {k, n});
    auto sa = shared_tensor(dtypes::float16, {stages, block_m, block_k});
    auto sb = shared_tensor(dtypes::float16, {stages, block_k, block_n});
    auto acc = register_tensor(dtypes::float32, {block_m, block_n}, 0.0);
    const CopyOptions cp_async{.annotations = {{"use_cp_async", "true"}}};
    auto load_stage = [&](const Expr& s, const Expr& buffer) {
      copy(ga.region({offset_m, s * block_k}, {block_m, block_k}), sa[buffer], cp_async);
      copy(gb.region({s * block_k, offset_n}, {block_k, block_n}), sb[buffer], cp_async);
    };
    for (int64_t s = 0; s + 1 < stages; ++s) load_stage(Expr(s), Expr(s));
    for (Expr step : range(cdiv(k, block_k), {.name = "step"})) {
      Expr next = step + (stages - 1);
      load_stage(next, next % stages);
      auto fa = register_tensor(dtypes::float16, {block_m, block_k});
      auto fb = register_tensor(dtypes::float16, {block_k, block_n});
      copy(sa[step % stages], fa);
      copy(sb[step % stages], fb);
      acc = dot(fa, fb, acc);
    }
    copy(acc.to(dtypes::float16), global_view(c, {m, n}).region({offset_m, offset_n}, {block_m, block_n}));
  }
};

}  // namespace examples
