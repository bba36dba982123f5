#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// The wgmma-wait ordering pass (GPU targets): a `wgmma.wait_group` that the program put after
// register work (an instruction that computes a register tensor since the last wgmma
// instruction of its statement list) gets `ordered=true`, which the CUDA emitter lowers as a
// CTA-scope fence (`fence.acq_rel.cta`) before the wait. The work is there to run while the
// waited wgmma still run (flash attention's softmax of S_j between the waits for S_j and for
// P V); ptxas treats the wait as free to schedule early and hoisted it above most of that work
// (the SASS put the softmax after the second wait: no overlap). It does not schedule across a
// memory fence, and with no memory access pending in the warp group the fence is cheap. Waits
// that follow a commit or another wait directly (every matmul example) are left alone.
Program order_wgmma_waits(const Program& program, const Target& target);

}  // namespace tilus
