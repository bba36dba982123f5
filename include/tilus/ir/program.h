// Kernels and programs.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"
#include "tilus/ir/stmt.h"
#include "tilus/ir/tensor_map.h"

namespace tilus {

// A global tensor the kernel allocates (global_tensor): memory the runtime provides at every
// launch, passed as a pointer parameter after the kernel's own (before the TMA tensor maps).
// A `requires_clean` one is zero before the kernel's first launch and every launch must leave
// it zero again (so the runtime clears it only when it allocates it); the others hold
// anything.
struct GlobalScratch {
  Var ptr;                  // the pointer parameter (role Param) the tensor's global_view reads
  std::vector<Expr> shape;  // over the scalar parameters
  bool requires_clean = false;
  SourceLoc loc;            // the global_tensor call
  DataType dtype() const { return ptr.dtype().pointee(); }
  // Its storage bytes (int64, over the scalar parameters; sub-byte elements packed).
  Expr bytes() const {
    Expr n = int_const(1, dtypes::int64);
    for (const Expr& d : shape) n = n * cast(d, dtypes::int64);
    int bits = dtype().bits();
    return bits % 8 == 0 ? n * int_const(bits / 8, dtypes::int64)
                         : cdiv(n * int_const(bits, dtypes::int64), int_const(8, dtypes::int64));
  }
};

struct Kernel {
  std::string name;
  std::vector<Var> params;  // runtime parameters: scalars and pointers, in call order
  // Compile-time constants the kernel was specialized with, as (name, printed value),
  // in parameter order. They are folded into the body.
  std::vector<std::pair<std::string, std::string>> constants;
  std::vector<Expr> grid;   // 1 to 3 block counts, expressions over params
  int64_t warps = 0;
  std::array<int64_t, 3> cluster{1, 1, 1};
  // attrs.min_blocks: blocks of this kernel each SM must be able to hold at once (the second
  // argument of __launch_bounds__: ptxas then keeps the registers a thread within 64K / (that
  // times the block's threads)); 0: ptxas chooses.
  int64_t min_blocks = 0;
  Stmt body;
  SourceLoc loc;
  // Facts about runtime parameters the kernel was specialized for: an integer parameter
  // divisible by d, a pointer aligned to d bytes (param index -> d).
  std::map<int, int64_t> param_divisibility;
  // Bytes of dynamic shared memory the block uses (set by plan_shared_memory).
  int64_t shared_memory_bytes = 0;
  // The TMA tensor maps the kernel's TMA copies go through (set by select_instructions); the
  // runtime encodes one per launch (cached) and passes it by value after the parameters.
  std::vector<TensorMapSpec> tensor_maps;
  // mbarriers the emitters keep for synchronous `copy`s lowered to TMA (one per copy, chosen
  // by select_instructions), at a byte offset planned by plan_shared_memory.
  int64_t copy_barriers = 0;
  int64_t copy_barrier_offset = -1;
  // The global tensors the kernel allocates, in call order.
  std::vector<GlobalScratch> global_tensors;

  int64_t num_threads() const { return warps * 32; }
};

struct Program {
  std::vector<Kernel> kernels;
};

// A program of f(kernel) for every kernel: how each pass runs over a program.
template <class F>
Program map_kernels(const Program& p, F f) {
  Program out;
  for (const Kernel& k : p.kernels) out.kernels.push_back(f(k));
  return out;
}

}  // namespace tilus
