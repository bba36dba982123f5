// The compilation target: what the passes need to know about the GPU.
#pragma once

#include <cstdint>
#include <string>

namespace tilus {

struct Target {
  std::string arch = "sm_90a";  // "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", ...
  int sm = 90;                   // compute capability as major*10 + minor
  // Shared memory one block may use (opt-in maximum), in bytes.
  int64_t shared_memory_per_block = 227 * 1024;
  // Streaming multiprocessors: the blocks of a persistent grid (pipeline_loops). The GPU's own
  // count when it compiles for the GPU present, else the usual part's (H100 SXM: 132).
  int64_t multiprocessors = 132;

  // Parses "sm_80", "sm_90a", ... (CompileError for anything else).
  static Target from_arch(const std::string& arch);
  // The CPU backend's target: the passes treat it as sm_90a (same legality checks, same
  // shared-memory budget) so a kernel that runs on the CPU also compiles for the H100.
  static Target cpu();
  bool is_cpu() const { return arch == "cpu"; }
  bool has_cp_async() const { return sm >= 80; }
  bool has_tma() const { return sm >= 90; }
  // wgmma is an sm_90a feature (not in sm_90, not carried to later architectures).
  bool has_wgmma() const { return sm == 90 && (is_cpu() || (!arch.empty() && arch.back() == 'a')); }
};

}  // namespace tilus
