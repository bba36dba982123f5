// A kernel that exercises the data-movement and shape instructions the other test kernels
// do not: transpose, store_shared, squeeze/unsqueeze, where, maximum/minimum, view and the
// synchronous copy. test_codegen checks its CUDA text (golden), test_gpu runs it.
#pragma once

#include "tilus/tilus.h"

namespace tests {
using namespace tilus;

// x: [n, 32] f32 (n may be below 8: rows past n read as 0 and are not written).
//   a[32, 8]  = transpose(x tile), through shared memory
//   b[1, 8]   = row sums of the tile as [1, 8] (sum keepdim -> squeeze -> unsqueeze)
//   c[n, 32]  = min(max(where(x > 0, x, -x / 2), -0.25), 1.5)
//   d[n, 32]  = the bits of the tile as int32 (view)
//   e[n, 32]  = the tile copied global -> shared -> global by `copy`, plus 1
struct Shapes : Script {
  static constexpr const char* param_names = "n, x, a, b, c, d, e";
  void operator()(Int32 n, Ptr<f32> x, Ptr<f32> a, Ptr<f32> b, Ptr<f32> c, Ptr<i32> d, Ptr<f32> e) {
    attrs.blocks = {1};
    attrs.warps = 2;
    auto gx = global_view(x, {n, 32});
    auto tile = load_global(gx, {.offsets = {0, 0}, .shape = {8, 32}});

    auto st = shared_tensor(dtypes::float32, {32, 8});
    store_shared(st, transpose(tile));
    sync();
    store_global(global_view(a, {32, 8}), load_shared(st), {.offsets = {0, 0}});
    // No sync here: `sc` below may get the bytes of `st`, and insert_barriers separates them.

    auto sums = sum(tile, {.dims = std::vector<int>{1}, .keepdim = true});
    store_global(global_view(b, {1, 8}), unsqueeze(squeeze(sums, {1}), {0}), {.offsets = {0, 0}});

    auto w = minimum(maximum(where(tile > 0.0f, tile, -tile / 2.0f), -0.25f), 1.5f);
    store_global(global_view(c, {n, 32}), w, {.offsets = {0, 0}});

    store_global(global_view(d, {n, 32}, {.dtype = dtypes::int32}), view(tile, {.dtype = dtypes::int32}),
                 {.offsets = {0, 0}});

    auto sc = shared_tensor(dtypes::float32, {8, 32});
    copy(gx.region({0, 0}, {8, 32}), sc);
    sync();
    auto ge = global_view(e, {n, 32});
    store_global(ge, load_shared(sc) + 1.0f, {.offsets = {0, 0}});
  }
};

}  // namespace tests
