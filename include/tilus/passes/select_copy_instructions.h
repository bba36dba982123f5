#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// Copy instruction selection (DESIGN 6.5). Every `copy` / `async_copy` goes through one
// priority chain and gets its choice recorded on the node (`selected`, `vector`, `mapping`,
// `note`, shown by the IR printer):
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
// copy_async gets its cp.async vector width the same way. Runs after bounds predicates
// (checked dims decide vector legality) and before the async-wait pass (a copy that became
// cp.async is asynchronous).
Program select_copy_instructions(const Program& program, const Target& target);

}  // namespace tilus
