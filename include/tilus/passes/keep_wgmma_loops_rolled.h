#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// The wgmma-loop unrolling pass (GPU targets): a loop with a run-time trip count that issues
// wgmma, and whose unrolling the Script left open, gets `unroll=1`. The tensor cores run
// asynchronously, so copies of the loop body gain nothing at run time, while NVVM's runtime
// unrolling (four copies and a remainder loop) made such kernels up to 5x larger in SASS and
// twice as slow to compile (hopper_matmul_v0: 40 HGMMA for 8). Loops with constant trip counts
// are left to NVVM, since full unrolling can be what keeps register arrays in registers; a
// Script's own `unroll=` is kept.
Program keep_wgmma_loops_rolled(const Program& program, const Target& target);

}  // namespace tilus
