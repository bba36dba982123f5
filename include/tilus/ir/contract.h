// The argument contract: what a kernel requires of the array behind each of its pointer
// parameters. KernelFacts (tilus/ir/facts.h) decides it from the kernel's global views; the
// compiled kernel carries it (KernelParam::contract, tilus/codegen/kernel_source.h); every
// launch checks it (check_arguments, tilus/runtime/launcher.h).
#pragma once

#include <string>
#include <vector>

#include "tilus/ir/dtype.h"
#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"

namespace tilus {

// One global view of a pointer parameter.
struct ViewContract {
  SourceLoc loc;                     // the global_view's call
  std::string type;                  // "global float32[m, n]"
  DataType dtype;                    // its elements
  std::vector<Expr> shape, strides;  // in elements, over the kernel's parameters
  // The strides are the row-major default of the shape: the array must be C-contiguous (a
  // dense buffer). Otherwise the kernel declared them, and an array of the view's rank must
  // have exactly those strides.
  bool row_major = true;
  // The elements, counted from the parameter's pointer, that the view may touch:
  // offset + sum((shape_d - 1) * |stride_d|) + 1, or 0 when a dim is empty (int64, over the
  // scalar parameters). Undefined when it depends on anything else (a block index, a loop
  // variable, a pointer other than the parameter plus an integer): that view is not
  // size-checked.
  Expr extent;
};

// A fact about the scalar parameters the kernel states (assume(c % 64 == 0) in the kernel
// body, outside any branch or loop): the compiler uses it, and every launch checks it.
struct Assumption {
  Expr cond;  // over the kernel's scalar parameters
  SourceLoc loc;
};

// Everything a kernel asks of one pointer parameter's array.
struct PointerContract {
  std::vector<ViewContract> views;
  // The first instruction that writes through the parameter (display name empty: none); an
  // argument the front end marks read-only is refused.
  std::string write_inst;
  SourceLoc write_loc;
  bool writes() const { return !write_inst.empty(); }
};

}  // namespace tilus
