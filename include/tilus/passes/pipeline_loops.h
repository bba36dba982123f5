#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// Software pipelining (DESIGN 10): every loop the Script marked with `num_stages=S`
// (`self.range(n, num_stages=S)`, C++ RangeOptions::num_stages) whose body copies tiles from
// global to shared memory (copy_async, copy, load_global + store_shared, c2d_im2col) and then
// reads them becomes an S-stage ring:
//
//   - each such shared tile gets a leading stage dim (S copies of it, its layout kept);
//   - the copies of iteration i + S - 1 are issued at the end of iteration i into stage
//     (i + S - 1) % S, the copies of the first S - 1 iterations before the loop (each guarded by
//     the trip count, so any count works), and the body reads stage i % S;
//   - the copies become TMA loads completing on a ring of mbarriers, one per stage, with the
//     wait on the phase of iteration i before the body (sm_90 where every copy is a legal TMA
//     box, by the rule select_instructions applies), else cp.async copies committed as one
//     group per stage, whose waits insert_async_waits derives;
//   - a dot that lower_dots_to_wgmma turned into a synchronous wgmma over two shared operands,
//     accumulating into a register tile that nothing else in the loop touches, accumulates in
//     place and waits at the end of the iteration for the previous iteration's group only, so one
//     iteration's wgmma stays in flight (the refill of its stage comes after that wait), with a
//     wait for all after the loop.
//
// The barriers come from insert_barriers, as for a hand-written ring. The loop keeps its
// variable and bounds and records the ring it became (printed `ring=tma`, `wgmma_in_flight=1`).
// A loop the pass cannot prove it may rewrite is a CompileError at the loop's line naming the
// instruction and line that prevent it: a tile read in an iteration before that iteration
// copies it (a dependence through shared memory from one iteration to the next), a copy whose
// addresses depend on what the iteration computes, a copy under a condition, `break` /
// `continue` / `return` in the body, waits or barriers written in the body, a pipelined tile
// used outside the loop, a write of global memory the copies read, or a step that is not a
// positive constant.
Program pipeline_loops(const Program& program, const Target& target);

}  // namespace tilus
