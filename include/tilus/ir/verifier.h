// Verification of the tile IR (DESIGN 6.1). One rule, one error: every failure is a
// CompileError whose message names the instruction, the operands' kinds, shapes and
// dtypes, and whose location is the instruction's source location.
//
// verify_inst() checks what one instruction can check alone; the tracer calls it on every
// instruction as it is recorded. verify() checks a whole kernel: every instruction, uses
// after definitions, control flow, attributes, layouts and the shared-memory budget.
#pragma once

#include <cstdint>
#include <string>

#include "tilus/ir/inst.h"
#include "tilus/ir/program.h"

namespace tilus {

struct VerifyOptions {
  // Shared memory available to one block on the target, in bytes (0: not checked).
  int64_t shared_memory_limit = 0;
  // Require every register tensor to have a layout (after layout inference).
  bool require_layouts = false;
};

void verify_inst(const InstNode& inst);
void verify(const Kernel& kernel, const VerifyOptions& opts = {});
void verify(const Program& program, const VerifyOptions& opts = {});

// Largest number of warps a kernel may have (1024 threads).
inline constexpr int64_t kMaxWarps = 32;
// Warps an SM holds at once (sm_80 to sm_100): attrs.min_blocks times the block's warps.
inline constexpr int64_t kMaxWarpsPerSm = 64;
// Why `min_blocks` blocks of `warps` warps cannot be held by one SM at once; "" when they can
// (or min_blocks is 0: not asked). The builder's error at the user's line and the verifier's.
std::string min_blocks_problem(int64_t min_blocks, int64_t warps);
// Most bytes of register tensors one thread may hold (CUDA's local memory per thread).
inline constexpr int64_t kMaxRegisterBytesPerThread = int64_t(512) << 10;
// Largest thread-block cluster every cluster-capable GPU launches (more needs an opt-in).
inline constexpr int64_t kMaxPortableClusterBlocks = 8;

}  // namespace tilus
