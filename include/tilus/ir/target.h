// The compilation target: what the passes need to know about the GPU.
#pragma once

#include <cstdint>
#include <string>

namespace tilus {

struct Target {
  std::string arch = "sm_90a";  // "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_103a", ...
  int sm = 90;                   // compute capability as major*10 + minor
  // Shared memory one block may use (opt-in maximum), in bytes.
  int64_t shared_memory_per_block = 227 * 1024;
  // Tensor memory of one block (Blackwell's tcgen05): lanes x 32-bit columns; 0 where there is none.
  int64_t tensor_memory_lanes = 0;
  int64_t tensor_memory_columns = 0;
  // Blocks of a thread-block cluster: the portable limit every launch may use, and the most a
  // kernel may ask for (the non-portable size, cudaFuncAttributeNonPortableClusterSizeAllowed);
  // 1 where clusters do not exist.
  int64_t cluster_blocks_portable = 1;
  int64_t cluster_blocks_max = 1;
  // Streaming multiprocessors: the blocks of a persistent grid (pipeline_loops). The GPU's own
  // count when it compiles for the GPU present, else the usual part's (H100 SXM: 132).
  int64_t multiprocessors = 132;

  // Parses "sm_80", "sm_90a", "sm_100a", ... (CompileError for anything else).
  static Target from_arch(const std::string& arch);
  // The CPU backend's target: the passes treat it as sm_90a (same legality checks, same
  // shared-memory budget) so a kernel that runs on the CPU also compiles for the H100, and give
  // it Blackwell's tensor memory, tcgen05 and cluster launch control as well (those kernels
  // compile for sm_100a).
  static Target cpu();
  bool is_cpu() const { return arch == "cpu"; }
  // The architecture-specific variant ("sm_90a", "sm_100a"): what wgmma and tcgen05 need.
  bool arch_specific() const { return !arch.empty() && arch.back() == 'a'; }
  bool has_cp_async() const { return sm >= 80; }
  bool has_tma() const { return sm >= 90; }
  bool has_clusters() const { return cluster_blocks_max > 1; }
  // wgmma is an sm_90a feature (not in sm_90, not carried to later architectures).
  bool has_wgmma() const { return sm == 90 && (is_cpu() || arch_specific()); }
  // tcgen05 (tensor memory, its MMA, loads, stores and copies) is an sm_100a / sm_103a feature.
  bool has_tcgen05() const { return is_cpu() || ((sm == 100 || sm == 103) && arch_specific()); }
  // Cluster launch control (clusterlaunchcontrol.try_cancel): sm_100 and newer.
  bool has_cluster_launch_control() const { return is_cpu() || sm >= 100; }
};

}  // namespace tilus
