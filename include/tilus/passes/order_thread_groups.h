#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// The thread-group ordering pass (GPU targets; the last of the pipeline): of adjacent sibling
// thread groups over disjoint threads, the ones that issue wgmma come first, in their order,
// then the others, in theirs. Each thread runs at most one of such groups, so the order of
// their text changes nothing a thread does; it changes what ptxas makes of the kernel. With a
// producer group's loop of mbarrier waits before the consumers' wgmma pipeline, ptxas can make
// every wgmma wait for the one before (its remarks C7514 and C7520: hopper_matmul_v2, and
// NVIDIA Tilus's hopper matmul v4 run unchanged), and with the consumers first it does not.
// Groups with anything between them (a barrier the earlier passes inserted, say) stay as
// they are.
Program order_thread_groups(const Program& program, const Target& target);

}  // namespace tilus
