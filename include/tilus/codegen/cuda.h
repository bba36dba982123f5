// The CUDA source emitter: one kernel of the tile IR (after the pass pipeline) to CUDA C++.
#pragma once

#include "tilus/codegen/kernel_source.h"
#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// Writes one `extern "C" __global__` function for the kernel. The kernel must have been
// through run_pipeline (layouts inferred, shared memory planned). Throws CompileError for
// IR it cannot lower, naming the instruction.
KernelSource emit_cuda(const Kernel& kernel, const Target& target);

}  // namespace tilus
