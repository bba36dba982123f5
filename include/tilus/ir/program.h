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

struct Kernel {
  std::string name;
  std::vector<Var> params;  // runtime parameters: scalars and pointers, in call order
  // Compile-time constants the kernel was specialized with, as (name, printed value),
  // in parameter order. They are folded into the body.
  std::vector<std::pair<std::string, std::string>> constants;
  std::vector<Expr> grid;   // 1 to 3 block counts, expressions over params
  int64_t warps = 0;
  std::array<int64_t, 3> cluster{1, 1, 1};
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
