// What the CUDA emitter produces for one kernel, and what the runtime needs to launch it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilus/ir/dtype.h"
#include "tilus/ir/expr.h"

namespace tilus {

struct KernelParam {
  std::string name;
  DataType dtype;  // scalar type, or a pointer type
};

struct KernelSource {
  std::string name;                 // the extern "C" __global__ function
  std::string source;               // CUDA C++ text
  std::vector<KernelParam> params;  // in call order
  std::vector<Var> param_vars;      // the IR variables of the params (for evaluating grid)
  std::vector<Expr> grid;           // 1 to 3 block counts over the params
  int64_t block_threads = 0;
  int64_t shared_memory_bytes = 0;  // dynamic shared memory
  std::string arch;                 // "sm_90a", ...
};

}  // namespace tilus
