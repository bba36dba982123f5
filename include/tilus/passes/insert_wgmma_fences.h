#pragma once

#include "tilus/ir/program.h"

namespace tilus {

// The wgmma-fence pass: PTX requires a wgmma.fence between a warp group's access to a
// register and a wgmma.mma_async that accesses the same register (its accumulator, or a in
// registers), and before the warp group's first wgmma.mma_async; wgmma.mma_async of one
// shape chaining on an accumulator need none between them. Forgetting it is undefined
// behaviour that no tool reports, so this pass inserts a `wgmma.fence` before every
// `wgmma.mma` that some path reaches with one of the kernel's wgmma register operands
// accessed by another instruction since the last fence (or with no fence yet). A kernel
// that fences where PTX asks gets nothing added.
//
// Conservative: any instruction other than wgmma.* that reads or writes a register tensor
// that is some wgmma.mma's d or register a counts, whichever mma it feeds. Loops are
// analysed with the state their previous iteration leaves; branches join to "not fenced"
// when one side is not.
Program insert_wgmma_fences(const Program& program, int* inserted = nullptr);

}  // namespace tilus
