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
  // Off by default until a GPU call shows them faster (issue 40; H200 2026-11-29, d 128 attention
  // rule at S 4096 without causal, both on against both off: mid1 +1-2 %, mid2 level): wgmma's
  // shared-memory descriptors as shared memory's descriptor plus each operand's start in 16-byte
  // units (TILUS_WGMMA_DESC_UNITS=1), instead of each operand's byte address masked and shifted;
  // signed floor division and modulo by a power of two as an arithmetic shift and a mask
  // (TILUS_FLOOR_POW2=1), instead of tilus::floor_div / floor_mod's sign fix-up. Together they
  // take the rule's step from 489 to 467 instructions, 68 to 40 of them uniform (f16).
  bool wgmma_desc_units = false;
  bool floor_pow2 = false;
  static CudaOptions from_env();
};

// Writes one `extern "C" __global__` function for the kernel. The kernel must have been
// through run_pipeline (layouts inferred, shared memory planned). Throws CompileError for
// IR it cannot lower, naming the instruction.
KernelSource emit_cuda(const Kernel& kernel, const Target& target, const CudaOptions& options = {});

}  // namespace tilus
