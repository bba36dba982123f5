// What the CUDA emitter produces for one kernel, and what the runtime needs to launch it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tilus/ir/contract.h"
#include "tilus/ir/dtype.h"
#include "tilus/ir/expr.h"
#include "tilus/ir/program.h"
#include "tilus/ir/tensor_map.h"

namespace tilus {

struct KernelParam {
  std::string name;
  DataType dtype;  // scalar type, or a pointer type; void for a by-value blob
  // A by-value blob (a struct such as the 128-byte CUtensorMap of a TMA descriptor, passed as
  // `const __grid_constant__`) has its size and alignment here; scalars and pointers leave
  // them 0 and take an 8-byte slot.
  int64_t blob_bytes = 0;
  int64_t blob_alignment = 0;
  // Pointers: what the argument's array must be (KernelFacts decides it from the global
  // views; check_arguments checks it at every launch).
  PointerContract contract;

  bool is_blob() const { return blob_bytes > 0; }
  static KernelParam blob(std::string name, int64_t bytes, int64_t alignment) {
    return KernelParam{std::move(name), dtypes::void_t, bytes, alignment, {}};
  }
  // "int32", "float16*", "bytes[128]" (for messages and the cache's metadata).
  std::string type_name() const {
    return is_blob() ? "bytes[" + std::to_string(blob_bytes) + "]" : dtype.name();
  }
};

struct KernelSource {
  std::string name;                 // the extern "C" __global__ function
  std::string source;               // CUDA C++ text
  std::vector<KernelParam> params;  // in call order
  std::vector<Var> param_vars;      // the IR variables of the params (for evaluating grid)
  std::vector<Expr> grid;           // 1 to 3 block counts over the params
  // Thread-block cluster shape (Hopper): {1, 1, 1} launches plainly; anything else launches
  // with the cluster-dimension attribute, each grid dimension a multiple of it.
  std::array<int64_t, 3> cluster{1, 1, 1};
  // The kernel's global tensors (Kernel::global_tensors): pointer parameters after `params`,
  // which the launcher points into memory it keeps per stream; not arguments of the caller.
  std::vector<GlobalScratch> global_tensors;
  // TMA tensor maps (Kernel::tensor_maps): 128-byte by-value parameters after those, which
  // the launcher encodes from each launch's arguments; not arguments of the caller.
  std::vector<TensorMapSpec> tensor_maps;
  // The kernel's assume(...) facts about its scalar parameters, checked at every launch.
  std::vector<Assumption> assumptions;
  int64_t block_threads = 0;
  int64_t shared_memory_bytes = 0;  // dynamic shared memory
  std::string arch;                 // "sm_90a", ...
  // The kernel synchronizes its whole grid (sync_grid): it is launched cooperatively, and every
  // launch checks that its blocks fit on the GPU at once.
  bool cooperative = false;

  bool clustered() const { return cluster != std::array<int64_t, 3>{1, 1, 1}; }
};

class KernelFacts;
struct Kernel;
// What every backend launches a lowered kernel with: its name, parameters (with their
// argument contracts, from `facts`), parameter variables, grid, cluster, block threads and
// planned shared memory. The CUDA emitter adds the source, the arch and its workspace.
KernelSource kernel_signature(const Kernel& kernel, const KernelFacts& facts);

}  // namespace tilus
