#include "tilus/ir/target.h"

#include <fmt/format.h>

#include <cctype>

#include "tilus/ir/error.h"

namespace tilus {

Target Target::from_arch(const std::string& arch) {
  auto bad = [&]() {
    return CompileError(
        fmt::format("unknown target '{}': expected sm_<major><minor>[a], e.g. sm_80, sm_90a or sm_100a", arch));
  };
  if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0) throw bad();
  size_t i = 3;
  int sm = 0;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i]))) sm = sm * 10 + (arch[i++] - '0');
  if (i == 3 || (i < arch.size() && !(arch[i] == 'a' && i + 1 == arch.size()))) throw bad();
  if (sm < 70) throw CompileError(fmt::format("target '{}' is not supported: tilus needs sm_70 or newer", arch));
  Target t;
  t.arch = arch;
  t.sm = sm;
  // Opt-in shared memory per block by compute capability (CUDA programming guide, "Technical
  // Specifications per Compute Capability").
  if (sm >= 120) t.shared_memory_per_block = 99 * 1024;
  else if (sm >= 90) t.shared_memory_per_block = 227 * 1024;  // 9.0, 10.0, 10.3, 11.0
  else if (sm == 80 || sm == 87) t.shared_memory_per_block = 163 * 1024;
  else if (sm == 86 || sm == 89) t.shared_memory_per_block = 99 * 1024;
  else if (sm == 75) t.shared_memory_per_block = 64 * 1024;
  else t.shared_memory_per_block = 96 * 1024;
  // Clusters from sm_90: 8 blocks portably, 16 with the non-portable attribute.
  if (sm >= 90) {
    t.cluster_blocks_portable = 8;
    t.cluster_blocks_max = 16;
  }
  // Tensor memory (sm_100 / sm_103, the data-center Blackwells): 128 lanes of 512 32-bit
  // columns per block's SM.
  if (sm == 100 || sm == 103 || sm == 110) {
    t.tensor_memory_lanes = 128;
    t.tensor_memory_columns = 512;
  }
  t.multiprocessors = sm >= 100 ? 148 : sm >= 90 ? 132 : sm == 89 ? 128 : sm == 86 ? 84 : sm >= 80 ? 108 : 80;
  return t;
}

Target Target::cpu() {
  Target t = from_arch("sm_90a");
  t.arch = "cpu";
  t.tensor_memory_lanes = 128;
  t.tensor_memory_columns = 512;
  return t;
}

}  // namespace tilus
