#pragma once

#include "tilus/ir/program.h"

namespace tilus {

// The shared-layout pass: gives every shared_tensor allocation its layout before anything
// reads the layouts (the dot -> wgmma choice, layout inference, instruction selection). A
// user annotation (annotate_layout on the allocation) wins; otherwise a row-major tile takes
// SharedLayout::row_major_swizzled's swizzle: rows of 32, 64 or 128 bytes get TMA's 32B / 64B /
// 128B pattern (the one wgmma descriptors name), longer rows XOR their 16-byte units with the
// row index (a tile moved by TMA keeps such rows unswizzled: TMA has no such pattern). Slices
// and permuted views inherit the strides and swizzle of what they view; a reshape_shared is
// row-major in its own shape with the swizzle of what it reshapes. annotate_layout
// instructions of shared tensors are consumed.
Program choose_shared_layouts(const Program& program);

// The layout an unannotated shared tensor that TMA does not move gets: row-major with the
// automatic swizzle (the tensor's own layout where none applies). Layout inference gives its
// conversion buffers this layout.
SharedLayout auto_shared_layout(const Tensor& t);

}  // namespace tilus
