// The CUDA source emitter: one kernel of the tile IR (after the pass pipeline) to CUDA C++.
#pragma once

#include "tilus/codegen/kernel_source.h"
#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// What the emitted code does beyond the kernel's own work. Part of the generated source, so
// of the cache key too.
struct CudaOptions {
  // Device-side checks that every shared tile at a run-time offset (KernelFacts::shared_bounds)
  // stays inside its allocation: a failure prints the instruction, its source line and the
  // offending index, and traps. TILUS_DEBUG_BOUNDS=1 sets it (from_env).
  bool debug_bounds = false;
  static CudaOptions from_env();
};

// Writes one `extern "C" __global__` function for the kernel. The kernel must have been
// through run_pipeline (layouts inferred, shared memory planned). Throws CompileError for
// IR it cannot lower, naming the instruction.
KernelSource emit_cuda(const Kernel& kernel, const Target& target, const CudaOptions& options = {});

}  // namespace tilus
