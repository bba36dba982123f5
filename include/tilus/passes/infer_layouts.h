#pragma once

#include "tilus/ir/layout.h"
#include "tilus/ir/program.h"

namespace tilus {

// The layout inference pass: gives every register tensor a layout. Anchors are dot (MMA
// fragment layouts for f16/bf16 on shapes that fit m16n8k16, a SIMT outer-product layout
// otherwise) and annotate_layout; layouts propagate through elementwise operations, casts,
// assignments, reductions, transposes, reshapes and repeats, forward and backward; tensors
// left free (loads, allocations) get the default: 16-byte contiguous vectors per thread
// along the last dim. annotate_layout instructions are consumed.
Program infer_layouts(const Program& program);

// How a dot of a [m, k] x [k, n] tile is computed by `threads` threads; the code generators
// recognise the layouts it produces.
struct DotPlan {
  enum Kind { Mma, Simt } kind = Simt;
  // Mma: m16n8k16 tiles; wm x wn warps (rep replicas), each rm x rn tiles, rk k-steps.
  int64_t wm = 1, wn = 1, rm = 1, rn = 1, rk = 1;
  // Simt: tm x tn threads, each a pm x pn block of c.
  int64_t tm = 1, tn = 1, pm = 1, pn = 1;
  int64_t rep = 1;
  RegisterLayout a, b, c;
};
DotPlan plan_dot(DataType ab, DataType c, int64_t m, int64_t n, int64_t k, int64_t threads);

// The default layout of a tile: 16-byte vectors per thread along the last dim (`vector`
// elements when given), threads over the last dim first, replicas for threads beyond the
// tile's parallelism.
RegisterLayout default_register_layout(const std::vector<int64_t>& shape, DataType dtype, int64_t threads,
                                       int64_t vector = 0);

}  // namespace tilus
