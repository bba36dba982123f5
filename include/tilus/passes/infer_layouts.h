#pragma once

#include "tilus/ir/layout.h"
#include "tilus/ir/lowering.h"
#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// The layout inference pass: gives every register tensor a layout. Anchors are dot (MMA
// fragment layouts for f16/bf16 on shapes that fit m16n8k16, a SIMT outer-product layout
// otherwise) and annotate_layout; layouts propagate through elementwise operations, casts,
// assignments, reductions, transposes, reshapes and repeats, forward and backward; tensors
// left free (loads, allocations) get the default: 16-byte contiguous vectors per thread
// along the last dim. annotate_layout instructions are consumed. On GPU targets a 2-D tile
// stored to global memory in pieces under 4 bytes per thread goes through shared memory into
// the default layout first (widen_narrow_stores in the .cpp; docs/passes.md).
Program infer_layouts(const Program& program, const Target& target = Target{});

// How a dot of a [m, k] x [k, n] tile is computed by `threads` threads: mma.sync m16n8k16 for
// f16/bf16 inputs on shapes that fit it, a SIMT outer product otherwise. Layout inference
// gives the operands these layouts; select_instructions records op and tiling on the dot.
struct DotPlan {
  MachineOp op = MachineOp::SimtFma;
  DotTiling tiling;
  RegisterLayout a, b, c;
};
DotPlan plan_dot(DataType ab, DataType c, int64_t m, int64_t n, int64_t k, int64_t threads);
// Every plan layout inference may give such a dot: the default first, then (mma.sync) each
// other split of the block's warps into warps_m x warps_n that divides the tile.
std::vector<DotPlan> dot_plans(DataType ab, DataType c, int64_t m, int64_t n, int64_t k, int64_t threads);

// How wgmma.mma computes d[m, n] += a[m, k] @ b[k, n] on `threads` threads (whole warp groups):
// the split into m64nNkK instructions (operand descriptors are select_instructions' part) and
// the accumulator's layout, the wgmma register fragment of every instruction in turn.
struct WgmmaPlan {
  WgmmaTiling tiling;
  RegisterLayout d;
  RegisterLayout a;  // a in registers (16-bit types): each warp's 16 rows as mma.sync's A fragment
};
WgmmaPlan plan_wgmma(DataType ab, int64_t m, int64_t n, int64_t k, int64_t threads);

// The registers of a tcgen05.ld / st of a [lanes, n] tensor-memory tile (32x32b: thread t of the
// group, one per lane, holds row t, its n elements in order): spatial([lanes, 1]) * local([1, n]).
RegisterLayout tcgen05_ldst_layout(const std::vector<int64_t>& shape);

// The default layout of a tile: 16-byte vectors per thread along the last dim (`vector`
// elements when given), threads over the last dim first, replicas for threads beyond the
// tile's parallelism. Without a given vector, a tile of fewer than 16 bytes per thread takes
// vectors of its elements per thread (at least one), so that its elements spread over the
// threads before any thread holds several (not for sub-byte dtypes, whose threads keep 16-byte
// vectors: two threads never share a byte) (NVIDIA Tilus's and Triton's rule: a 4-element tile
// on a warp is one element on each of 4 threads, not 4 on one).
RegisterLayout default_register_layout(const std::vector<int64_t>& shape, DataType dtype, int64_t threads,
                                       int64_t vector = 0);

}  // namespace tilus
