#pragma once

#include <optional>
#include <string>

#include "tilus/ir/facts.h"
#include "tilus/ir/lowering.h"
#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// Instruction selection (DESIGN 6.5): writes the lowering record (ir/lowering.h) of every
// memory instruction and every dot. It is the only place these choices are made; the
// emitters and the synchronization passes read the record.
//
// `copy` / `async_copy` go through one priority chain:
//   1. explicit TMA (annotation use_tma): TMA or a CompileError saying why not;
//   2. explicit cp.async (annotation use_cp_async, and every async_copy): global -> shared
//      only, else a CompileError;
//   3. automatic TMA for global <-> shared copies unless disable_tma; TMA is not lowered yet,
//      so this slot checks the box and records "not legal on this target" and falls through;
//   4. ldmatrix (shared -> register, sm_80+) / stmatrix (register -> shared, sm_90+) when
//      the register layout is made of 8x8 matrix fragments of 16-bit data;
//   5. vectorized SIMT: the widest vector that alignment and contiguity allow on both
//      sides; coalesced_width forces a width, clamped (with a warning) when it is not legal;
//      loop_layout pins the thread mapping of a memory-to-memory copy.
// load_shared / store_shared take slot 4 or 5; load_global / store_global slot 5;
// copy_async gets its cp.async vectors (.cg for 16 bytes, .ca for 4 and 8, element by
// element and synchronous where no 4-byte vector is legal); dot gets mma.sync m16n8k16 or a
// SIMT outer product, with the tiling layout inference laid the operands out for. Runs after
// bounds predicates (checked dims decide vector legality) and before the async-wait and
// barrier passes, which read the completion and the thread mapping.
Program select_instructions(const Program& program, const Target& target);

// How wgmma reads the shared tile `t` (a view of one allocation whose layout
// choose_shared_layouts fixed) as an operand whose view dim `k_dim` runs along K, for
// instructions `k_instr` deep: its matrix descriptor, or nullopt and in `why` the reason it
// cannot (the tile must be K-major, in rows of one TMA swizzle span, starting on a whole
// swizzle atom; or, with `mn_major`, 16-bit and MN-major: rows along K, each exactly one swizzle
// span of its M or N elements, or a rank-3 [blocks, k, n / blocks] tile of such column blocks
// whole 8-row atoms apart, the descriptor's leading byte offset). `user` is the instruction that reads it. The rule
// select_instructions checks on wgmma.mma (MN-major for b only) and lower_dots_to_wgmma checks
// (K-major only) before it turns a dot into one.
std::optional<WgmmaOperand> wgmma_shared_operand(const KernelFacts& facts, const InstNode& user, const Tensor& t,
                                                 int k_dim, int64_t k_instr, std::string* why = nullptr,
                                                 bool mn_major = false);

// Why a TMA load of the global -> shared `copy` c cannot be (the rules of the automatic TMA
// slot, the base's and strides' 16-byte alignment proven), or "" when it can; and the same for
// c2d_im2col as one TMA load in im2col mode. The rules pipeline_loops applies before it turns
// a loop's loads into TMA loads on an mbarrier ring, and select_instructions when it lowers them.
std::string tma_load_problem(const KernelFacts& facts, const Target& target, const CopyInst& c);
std::string tma_im2col_problem(const KernelFacts& facts, const Target& target, const Im2colInst& i);

}  // namespace tilus
