#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// The shared-memory planning pass (DESIGN 6.8): gives every shared_tensor a byte `offset`
// and sets Kernel::shared_memory_bytes to the end of the highest placed tensor.
//
// A tensor is live from its allocation to its last use: an operand of any instruction that
// refers to it or to a slice_shared view of it (transitively), free_shared included. A use
// inside a loop that the allocation is outside of keeps it live to the end of that loop,
// since the next iteration uses it again. Tensors with overlapping live ranges get disjoint
// bytes; the others may share. Every offset is a multiple of 128 bytes. Placement is greedy:
// largest tensor first (ties in program order), each at the lowest offset that overlaps no
// placed tensor it is live with.
//
// A total above target.shared_memory_per_block is a CompileError at the allocation that
// makes the footprint exceed the limit, listing the tensors live there.
//
// Kernel::shared_memory_bytes is the planned total only: an emitter that needs a workspace
// of its own (a cross-warp reduction, say) appends it after that total, at the next multiple
// of 128 bytes, and checks the sum against the target's limit itself.
Program plan_shared_memory(const Program& program, const Target& target);

}  // namespace tilus
