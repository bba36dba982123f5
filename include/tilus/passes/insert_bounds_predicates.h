#pragma once

#include "tilus/ir/program.h"

namespace tilus {

// The bounds-predicate pass (DESIGN 6.4): sets `checked_dims` of every load_global,
// store_global and copy_async to the global dims whose bounds must be checked at run time.
// A dim is left out when the ranges the program implies (block indices over the grid, loop
// variables over their loops, let-bound values, the kernel's specialization facts) prove
// that every index the access touches along it lies in [0, extent): offset >= 0 and
// offset + tile extent <= extent, where a global dim that no tile dim maps to has extent 1.
// Besides interval reasoning, a tile at `v + c` inside `for v in range(b, e, s)` is known to
// end inside an extent >= e when c + tile extent <= s and s divides e - b (so a k loop over a
// k specialized as a multiple of the step needs no check).
// copy_async with check_bounds=false gets no checked dims: the user vouched for it.
Program insert_bounds_predicates(const Program& program);

}  // namespace tilus
