#pragma once

#include "tilus/ir/program.h"

namespace tilus {

// The async-wait pass (DESIGN 6.6): every shared-memory access that may touch bytes a
// cp.async (copy_async) is still writing gets the wait it needs before it. Copies not yet
// in a group are committed first (one copy_async_commit_group for all of them); the wait is
// copy_async_wait_group(n) with the largest n that still covers every conflicting copy, so a
// multi-stage pipeline keeps its other stages in flight. Waits and commits the user wrote
// are respected and counted. Loops are analysed with the copies earlier iterations left in
// flight (offsets shifted by one step per iteration).
//
// strict: a missing wait is a CompileError naming the copy's and the access's source
// locations, instead of an inserted wait.
//
// A wait covers the calling thread's copies only; the barrier pass that runs later makes
// the landed data visible to the other threads.
Program insert_async_waits(const Program& program, bool strict = false, int* inserted = nullptr);

}  // namespace tilus
