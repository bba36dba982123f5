#include "tilus/codegen/kernel_source.h"

#include "tilus/ir/facts.h"

namespace tilus {

KernelSource kernel_signature(const Kernel& kernel, const KernelFacts& facts) {
  KernelSource s;
  s.name = kernel.name;
  s.grid = kernel.grid;
  s.cluster = kernel.cluster;
  s.block_threads = kernel.num_threads();
  s.shared_memory_bytes = kernel.shared_memory_bytes;
  s.global_tensors = kernel.global_tensors;
  s.tensor_maps = kernel.tensor_maps;
  s.assumptions = facts.assumptions();
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const Var& p = kernel.params[i];
    s.params.push_back(KernelParam{p.name(), p.dtype(), 0, 0, facts.contracts().at(i)});
    s.param_vars.push_back(p);
  }
  return s;
}

}  // namespace tilus
