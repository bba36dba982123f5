#pragma once

#include "tilus/ir/program.h"

namespace tilus {

// The barrier-insertion pass (DESIGN 6.7): puts a `sync` before every shared-memory access
// that conflicts with an earlier access not yet separated from it by a barrier.
//
// Two accesses conflict when they may touch the same bytes, at least one writes, and their
// thread-to-element mappings may differ (a load_shared / store_shared pair through the same
// view with the same register layout is thread-private, except for 16-bit data, which the
// emitter may move with warp-collective ldmatrix; everything else counts as differing).
// Bytes come from the planner's offsets (so tensors that share memory conflict) and, within
// one tensor, from slice offsets: slices whose offsets differ by a constant, or are
// (x + c1) % m and (x + c2) % m with c1 != c2 (mod m), are disjoint.
//
// Loops are analysed twice: what the end of one iteration left pending meets the start of
// the next (slice offsets shifted by one step), so multi-buffered pipelines get exactly the
// barrier their buffer reuse needs. A barrier is never put inside a branch whose condition
// depends on the thread index: it goes before the branch, and a hazard between two accesses
// inside such a branch is a CompileError naming both. Inside a thread group the inserted
// barrier is the group's; a hazard with accesses outside the group gets a block-wide
// barrier before the group. User `sync()` calls are kept and separate accesses like the
// inserted ones, so a kernel that synchronizes correctly gets no extra barrier.
//
// Runs after plan_shared_memory (it needs the offsets). Returns the program and, through
// `inserted` when given, the number of barriers added.
Program insert_barriers(const Program& program, int* inserted = nullptr);

}  // namespace tilus
