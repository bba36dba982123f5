#pragma once

#include "tilus/ir/program.h"

namespace tilus {

// The layout inference pass: gives every register tensor a layout. Anchors are dot (MMA
// fragment layouts for f16/bf16 on shapes that fit m16n8k16, a SIMT outer-product layout
// otherwise) and annotate_layout; layouts propagate through elementwise operations, casts,
// assignments, reductions, transposes, reshapes and repeats, forward and backward; tensors
// left free (loads, allocations) get the default: 16-byte contiguous vectors per thread
// along the last dim. annotate_layout instructions are consumed.
Program infer_layouts(const Program& program);

}  // namespace tilus
